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
from benchledger.client.request import stream_one
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
PROBE_REQUEST_ID = "preflight/p0000"  # what the server's log shows for it (X-Request-Id)
# What the server said goes to a terminal: its control characters (an escape sequence)
# are shown, not obeyed.
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(32), 127)}


async def _probe(target: Target, record: RequestRecord, timeout_s: float) -> None:
    async with client_session(target, 1, timeout_s) as http:
        await stream_one(http, target, record, timeout_s)


def count_problem(target: Target, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when one streamed request completes and the target's token count counts its
    tokens (a count made after the window is not judged here); otherwise why not: the
    request's own error (its HTTP status and the start of the server's answer, or what
    cut it), or the token count's advice. Blocking: runs its own event loop."""
    record = RequestRecord(request_id=PROBE_REQUEST_ID, window_id="preflight", seq=0,
                           is_warmup=True, prompt=PROBE_PROMPT, max_tokens=PROBE_MAX_TOKENS,
                           temperature=0.0, tally=target.token_count.new_tally())
    asyncio.run(_probe(target, record, timeout_s))
    if record.status != "completed":
        # one line (an error page may be HTML), no terminal control sequences, no key
        said = redact(" ".join(str(record.error).split()).translate(_CONTROLS), target.api_key)
        return (f"a probe request to {target.endpoint.path} failed: "
                f"{said[:PROBE_ERROR_CHARS]}{'...' if len(said) > PROBE_ERROR_CHARS else ''}")
    if not target.token_count.counted_by_the_stream:
        return None  # its count is made after a window, calibrated there
    return warmup_problem(target.token_count, [record])
