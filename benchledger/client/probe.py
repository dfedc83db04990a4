"""One request before a run: does the server answer the arm's request, and does the arm's
token count get a count from it?

A window learns this from its warm-up (benchledger.client.window.warmup_problem): after the
run's Airflow start, the server's readiness wait and the warm-up itself, and then only for
that window. For a server benchledger does not start (an external arm) the same question can
be asked before anything runs: one short streamed request, sent and read by the same code as
a window's (stream_one), its count judged by the same rule as a warm-up's. What it finds is
said in the words the window would use: a server that streams no usage gets the advice to
count from logprobs; a model name the server does not serve, its HTTP answer.
"""

from __future__ import annotations

import asyncio

from benchledger.client.record import RequestRecord
from benchledger.client.request import REQUEST_ID_HEADER, stream_one
from benchledger.client.streams import client_session
from benchledger.client.target import Target
from benchledger.client.window import warmup_problem
from benchledger.prompts import Prompt
from benchledger.redaction import redact

# Short: the probe is a question about the answer's form, not a measurement.
PROBE_MAX_TOKENS = 8
PROBE_PROMPT = Prompt("preflight", "Count from one to ten.")
PROBE_TIMEOUT_S = 60.0
PROBE_ERROR_CHARS = 300  # of the server's answer, in the one line that refuses the run
OVERLAP_MAX_TOKENS = 32  # two answers this long overlap on any server worth measuring
# What the server's log shows for the first probe (X-Request-Id); the two sent together
# to see whether it serves them at once are p0001 and p0002.
PROBE_REQUEST_ID = "preflight/p0000"
# What the server said goes to a terminal: its control characters (an escape sequence)
# are shown, not obeyed.
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(32), 127)}


# The start of what count_problem says of a server that answers only without X-Request-Id
# (benchledger.local.starter writes request_id_header = false on reading it).
HEADER_REFUSED = "the server refuses the X-Request-Id header"


async def _probe(target: Target, records: list[RequestRecord], timeout_s: float) -> None:
    async with client_session(target, len(records), timeout_s) as http:
        await asyncio.gather(*(stream_one(http, target, record, timeout_s)
                               for record in records))


def _record(target: Target, seq: int = 0, max_tokens: int = PROBE_MAX_TOKENS
            ) -> RequestRecord:
    return RequestRecord(request_id=PROBE_REQUEST_ID.replace("0000", f"{seq:04d}"),
                         window_id="preflight", seq=seq,
                         is_warmup=True, prompt=PROBE_PROMPT, max_tokens=max_tokens,
                         temperature=0.0, tally=target.token_count.new_tally())


def _probe_one(target: Target, timeout_s: float) -> RequestRecord:
    record = _record(target)
    asyncio.run(_probe(target, [record], timeout_s))
    return record


def overlap_problem(target: Target, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when two requests sent together both complete; otherwise what became of the
    one that did not: a server that serves one request at a time by cutting the stream in
    progress when the next arrives (llama-cpp-python's default, --interrupt_requests)
    leaves every load point above 1 a window of cut streams. Long enough answers
    (OVERLAP_MAX_TOKENS) that the two overlap. Blocking: runs its own event loop."""
    records = [_record(target, seq, OVERLAP_MAX_TOKENS) for seq in (1, 2)]
    asyncio.run(_probe(target, records, timeout_s))
    for record in records:
        if record.status != "completed":
            return (f"two requests sent together did not both complete ({record.request_id} "
                    f"{record.status}: {_said(target, record)})")
    return None


def count_problem(target: Target, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when one streamed request completes and the target's token count counts its
    tokens (a count made after the window is not judged here); otherwise why not: the
    request's own error (its HTTP status and the start of the server's answer, or what
    cut it), or the token count's advice. A request refused with HTTP 400 is sent again
    without X-Request-Id: answered then, the header is what the server refuses, and the
    advice says so. Blocking: runs its own event loop."""
    record = _probe_one(target, timeout_s)
    if (record.http_status == 400 and target.request_id_header
            and _probe_one(target.without_request_id_header(), timeout_s).status
            == "completed"):
        return (f"{HEADER_REFUSED} ({REQUEST_ID_HEADER}: {PROBE_REQUEST_ID} was answered "
                "HTTP 400) and answers the same request without it: set "
                "request_id_header = false for this arm (llama-cpp-python's server takes "
                "only a UUID there); rows keep their request_id, the server's log "
                "will not show it")
    if record.status != "completed":
        return f"a probe request to {target.endpoint.path} failed: {_said(target, record)}"
    if not target.token_count.counted_by_the_stream:
        return None  # its count is made after a window, calibrated there
    return warmup_problem(target.token_count, [record])


def _said(target: Target, record: RequestRecord) -> str:
    """The request's error in one line (an error page may be HTML), without terminal
    control sequences or the key, cut to PROBE_ERROR_CHARS."""
    said = redact(" ".join(str(record.error).split()).translate(_CONTROLS), target.api_key)
    return f"{said[:PROBE_ERROR_CHARS]}{'...' if len(said) > PROBE_ERROR_CHARS else ''}"
