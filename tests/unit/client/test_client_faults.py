"""The measurement client against hostile and broken servers (issue #11, the fault suite's
client part). Every case runs against a real loopback HTTP server (tests/conftest.py's
scripted server, byte-exact answers) and checks the same things: every request is a row
with a status, and a reason when it did not complete; the window's accounting balances;
the rows convert to the Arrow schema (the window's Parquet file cannot fail on a value);
the good requests of the same window keep their values.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import tracemalloc

import aiohttp
import pytest

import benchledger.client as client
from benchledger.client import Target, WindowSpec, measure_window
from benchledger.client import record as client_record
from benchledger.client import sse as client_sse
from benchledger.client.progress import progress_line as client_progress_line
from benchledger.prompts import load_prompt_set
from benchledger.raw.records import requests_table
from tests.conftest import RESET, Script, chat_chunk, good_stream, sse_event, usage_event

STATUSES = {"completed", "failed", "unresolved"}


def spec(**overrides) -> WindowSpec:
    values = dict(window_id="run/arm/r0/code-c1", prompts=load_prompt_set("code"), requests=4,
                  warmup=0, concurrency=1, max_tokens=16, temperature=0.0,
                  drain_timeout_s=5.0, request_timeout_s=10.0)
    values.update(overrides)
    return WindowSpec(**values)


def check_window(result, submitted: int) -> list[dict]:
    """What holds for every window whatever the server did; returns the measured rows."""
    acc = result.accounting
    rows = [r for r in result.rows if not r["is_warmup"]]
    warm = [r for r in result.rows if r["is_warmup"]]
    assert len(rows) == acc["submitted"] == submitted
    assert acc["submitted"] == acc["completed"] + acc["failed"] + acc["unresolved"]
    for status in STATUSES:
        assert acc[status] == sum(r["status"] == status for r in rows)
        assert acc[f"warmup_{status}"] == sum(r["status"] == status for r in warm)
    assert acc["warmup_submitted"] == len(warm)
    for row in result.rows:
        assert row["status"] in STATUSES
        if row["status"] != "completed":
            assert row["error"], row
    assert requests_table(result.rows).num_rows == len(result.rows)
    return rows


def script(server, name: str, make) -> Target:
    """Register `make(n)` (the n-th request of this model, from 0) as the model's answer."""
    server.scripts[name] = lambda n, body: make(n)
    return Target(server.base, name)


@pytest.fixture
def server(scripted_server):
    srv, base = scripted_server
    srv.base = base
    return srv


def every_other_bad(bad: Script):
    """Requests 1, 3, ... get `bad`; 0, 2, ... a good 5-token answer."""
    return lambda n: bad if n % 2 else Script(good_stream(5))


def assert_good_rows_intact(rows: list[dict]) -> None:
    good = rows[0::2]
    assert all(r["status"] == "completed" and r["error"] is None for r in good)
    assert [r["output_tokens"] for r in good] == [5] * len(good)
    assert all(r["prompt_tokens"] == 7 and r["chunks"] == 5 and r["token_source"] == "usage"
               and r["finish_reason"] == "length" for r in good)


# --- odd events fail only their own request ---------------------------------------------------

ODD_EVENTS = {
    # the bytes of the bad event -> words its request's error must contain
    "data-42": (sse_event("42"), "event 2: not a JSON object: 42"),
    "choice-x": (sse_event({"choices": ["x"]}), 'event 2: choices[0] is not an object: "x"'),
    "choices-object": (sse_event({"choices": {"0": 1}}), "choices is not a list"),
    "delta-list": (sse_event({"choices": [{"delta": [1]}]}), "choices[0].delta is not an object"),
    "content-number": (sse_event({"choices": [{"delta": {"content": 5}}]}),
                       "choices[0].delta.content is not a string: 5"),
    "finish-number": (sse_event({"choices": [{"delta": {}, "finish_reason": 3}]}),
                      "choices[0].finish_reason is not a string: 3"),
    "truncated-json": (b'data: {"choices": [{"index": 0, "delta": {"cont\n\n', "not JSON"),
    "garbage-line": (b"garbage\n\n", 'not an SSE field after event 1: "garbage"'),
    "llama-error-line": (b'error: {"code": 500, "message": "slot crashed"}\n\n',
                         "slot crashed"),
    "non-utf8": (b'data: {"choices": [{"delta": {"content": "a\xff"}}]}\n\n',
                 "not UTF-8 (byte 0xff"),
    "error-object": (sse_event({"error": {"message": "out of memory"}}),
                     "error event: {\"message\": \"out of memory\"}"),
    "error-event-type": (b'event: error\ndata: {"message": "overloaded"}\n\n',
                         "error event:"),
}


@pytest.mark.parametrize("name", sorted(ODD_EVENTS))
def test_an_odd_event_fails_only_its_own_request(server, name):
    bad_event, words = ODD_EVENTS[name]
    bad = Script([chat_chunk("a"), bad_event, *good_stream(5)])
    target = script(server, name, every_other_bad(bad))
    rows = check_window(measure_window(target, spec(requests=4)), 4)
    assert_good_rows_intact(rows)
    for row in rows[1::2]:
        assert row["status"] == "failed" and row["http_status"] == 200
        assert words in row["error"], row["error"]
        # what arrived before the bad event is kept: one content event
        assert row["chunks"] == 1 and len(row["content_event_ns"]) == 1


def test_a_stream_cut_mid_event_names_what_was_left(server):
    target = script(server, "half", lambda n: Script([chat_chunk("a"),
                                                      b'data: {"choices": [{"ind']))
    rows = check_window(measure_window(target, spec(requests=2)), 2)
    assert all(r["status"] == "failed" for r in rows)
    assert "without [DONE] or a finish_reason" in rows[0]["error"]
    assert 'unfinished event at the end: "data: {\\"choices\\"' in rows[0]["error"]


def test_a_stream_without_done_usage_or_finish_reason_fails(server):
    target = script(server, "no-end", lambda n: Script([chat_chunk("a"), chat_chunk("b")]))
    rows = check_window(measure_window(target, spec(requests=2)), 2)
    assert all(r["status"] == "failed" and r["token_source"] == "missing"
               and r["output_tokens"] is None and r["chunks"] == 2 for r in rows)
    assert rows[0]["error"] == "stream ended without [DONE] or a finish_reason"


def test_split_and_crlf_streams_are_read_like_whole_ones(server):
    """Events cut across TCP writes at every awkward place, and CRLF line ends."""
    whole = b"".join(good_stream(5)).replace(b"\n", b"\r\n")
    pieces = [whole[i:i + 7] for i in range(0, len(whole), 7)]
    steps = [x for piece in pieces for x in (piece, 0.001)]
    target = script(server, "split", lambda n: Script(steps))
    rows = check_window(measure_window(target, spec(requests=2)), 2)
    assert_good_rows_intact(rows)


def test_comments_and_other_sse_fields_are_allowed(server):
    steps = [b": keep-alive\n\n", b"id: 1\nevent: message\nretry: 10\n", *good_stream(5)]
    target = script(server, "fields", lambda n: Script(steps))
    rows = check_window(measure_window(target, spec(requests=2)), 2)
    assert_good_rows_intact(rows)


def test_an_endless_line_is_refused_before_it_exhausts_memory(server, monkeypatch):
    monkeypatch.setattr(client_sse, "MAX_EVENT_BYTES", 64 * 1024)
    flood = [b"data: " + b"x" * 16 * 1024] * 8  # 128 KiB, never a line end
    target = script(server, "flood", every_other_bad(Script([chat_chunk("a"), *flood, 5.0])))
    rows = check_window(measure_window(target, spec(requests=2)), 2)
    assert_good_rows_intact(rows)
    assert "a line longer than 65536 bytes" in rows[1]["error"]


# --- HTTP errors, refused and reset connections -----------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
def test_http_errors_on_some_requests_are_failed_rows(server, status):
    body = json.dumps({"error": {"message": f"busy ({status})"}}).encode()
    bad = Script([body], status=status, content_type="application/json")
    target = script(server, f"http-{status}", every_other_bad(bad))
    rows = check_window(measure_window(target, spec(requests=4)), 4)
    assert_good_rows_intact(rows)
    for row in rows[1::2]:
        assert row["status"] == "failed" and row["http_status"] == status
        assert row["error"].startswith(f"HTTP {status}: ") and f"busy ({status})" in row["error"]
        assert row["t_done_ns"] is not None and row["chunks"] == 0


def test_a_huge_error_body_is_not_read_whole(server):
    bad = Script([b"x" * 65536] * 64, status=500, content_type="text/plain")  # 4 MiB
    target = script(server, "big-500", lambda n: bad)
    rows = check_window(measure_window(target, spec(requests=1)), 1)
    assert rows[0]["http_status"] == 500 and len(rows[0]["error"]) < 600


def test_a_200_that_is_not_an_event_stream_fails(server):
    bad = Script([b'{"choices": [{"message": {"content": "hi"}}]}'],
                 content_type="application/json")
    target = script(server, "not-sse", lambda n: bad)
    rows = check_window(measure_window(target, spec(requests=1)), 1)
    assert "Content-Type 'application/json', not text/event-stream" in rows[0]["error"]


def test_connection_refused_at_start_is_a_failed_row_per_request():
    with socket.socket() as sock:  # a port nobody listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = measure_window(Target(f"http://127.0.0.1:{port}", "m"), spec(requests=3, warmup=1))
    rows = check_window(result, 3)
    assert all(r["status"] == "failed" and r["http_status"] is None
               and r["error"].startswith("ClientConnectorError: no connection to the server "
                                         "could be made (Cannot connect to host")
               for r in result.rows), result.rows[0]["error"]
    assert result.accounting["warmup_failed"] == 1 and rows[0]["t_first_ns"] is None


def test_connection_reset_mid_stream_is_a_failed_row(server):
    """A chunked stream (as every OpenAI-compatible server sends) reset mid-stream."""
    bad = Script([chunked(chat_chunk("a")), chunked(chat_chunk("b")), 0.05, RESET],
                 headers={"Transfer-Encoding": "chunked"})
    target = script(server, "reset", every_other_bad(bad))
    rows = check_window(measure_window(target, spec(requests=4)), 4)
    assert_good_rows_intact(rows)
    for row in rows[1::2]:
        assert row["status"] == "failed" and row["chunks"] == 2
        kind, _, said = row["error"].partition(": ")
        assert kind == "ClientPayloadError", row["error"]
        assert "reset" in said.lower() and "mid-stream" in said, row["error"]


def test_a_reset_ending_an_unframed_stream_is_a_stream_without_done(server):
    """HTTP/1.0 without a length: the body is what comes before the connection closes, and
    aiohttp reads a reset there as that end. The row still fails, saying what was missing."""
    bad = Script([chat_chunk("a"), chat_chunk("b"), 0.05, RESET])
    target = script(server, "reset-unframed", every_other_bad(bad))
    rows = check_window(measure_window(target, spec(requests=4)), 4)
    assert_good_rows_intact(rows)
    for row in rows[1::2]:
        assert row["status"] == "failed" and row["chunks"] == 2
        assert row["error"] == "stream ended without [DONE] or a finish_reason", row["error"]


@pytest.mark.parametrize(("exc", "http_status", "expected"), [
    (aiohttp.ServerDisconnectedError(), 200,
     "ServerDisconnectedError: the connection was closed or reset by the server mid-stream "
     "(Server disconnected)"),
    (aiohttp.ClientOSError(104, "Connection reset by peer"), None,
     "ClientOSError: the connection was closed or reset by the server before the server "
     "answered ([Errno 104] Connection reset by peer)"),
    (aiohttp.ClientPayloadError("Response payload is not completed"), 503,
     "ClientPayloadError: the answer's body was cut short or malformed while its HTTP 503 "
     "answer was read (Response payload is not completed)"),
    (aiohttp.SocketTimeoutError(), 200, "SocketTimeoutError: timed out mid-stream"),
    (aiohttp.ClientPayloadError(""), 200,
     "ClientPayloadError: the answer's body was cut short or malformed mid-stream"),
    (ValueError(""), 200, "unexpected ValueError while streaming: no message given "
                          "(mid-stream)"),
    (ValueError("odd"), None, "unexpected ValueError while streaming: odd"),
])
def test_an_exception_is_named_by_what_happened(server, monkeypatch, exc, http_status,
                                                expected):
    """Every exception gets a text saying what happened and how far the request had got,
    then what the library said, if anything (its texts alone are terse or empty)."""
    target = script(server, f"raise-{type(exc).__name__}-{http_status}",
                    lambda n: Script([chat_chunk("a")], status=http_status or 200))

    async def raise_it(*args, **kwargs):
        raise exc

    if http_status is None:  # before the answer: the request itself fails
        monkeypatch.setattr(aiohttp.ClientSession, "_request", raise_it)
    else:  # after the status line: reading the body fails
        monkeypatch.setattr(aiohttp.StreamReader, "iter_any", raise_it_iter(exc))
    rows = check_window(measure_window(target, spec(requests=1)), 1)
    assert rows[0]["status"] == "failed" and rows[0]["error"] == expected, rows[0]["error"]


def raise_it_iter(exc: BaseException):
    """A stand-in for StreamReader.iter_any that raises `exc` on the first read."""
    async def iter_any(self, *args, **kwargs):
        raise exc
        yield b""  # an async generator, as the real one gives
    return iter_any


def chunked(data: bytes) -> bytes:
    """One chunk of a chunked transfer encoding."""
    return b"%x\r\n%s\r\n" % (len(data), data)


# --- usage recorded honestly ------------------------------------------------------------------


def usage_stream(**usage) -> Script:
    return Script([chat_chunk("a"), chat_chunk("b", "stop"), usage_event(**usage),
                   sse_event("[DONE]")])


@pytest.mark.parametrize(("usage", "output", "prompt"), [
    ({"prompt_tokens": 7, "completion_tokens": -5}, -5, 7),
    ({"prompt_tokens": 7, "completion_tokens": 10**9}, 10**9, 7),
    ({"prompt_tokens": -1, "completion_tokens": 40}, 40, -1),  # 40 > max_tokens (16)
    ({"prompt_tokens": 2**63 - 1, "completion_tokens": 2**63 - 1}, 2**63 - 1, 2**63 - 1),
])
def test_integer_counts_are_recorded_as_reported_even_when_absurd(server, usage, output, prompt):
    """A gate rule blocks them; the client never clamps or drops a reported integer."""
    target = script(server, "usage-int", lambda n: usage_stream(**usage))
    row = check_window(measure_window(target, spec(requests=1)), 1)[0]
    assert row["status"] == "completed" and row["error"] is None
    assert (row["output_tokens"], row["prompt_tokens"]) == (output, prompt)
    assert row["token_source"] == "usage" and row["chunks"] == 2


@pytest.mark.parametrize(("value", "shown"), [
    (True, "true"), (1.5, "1.5"), ("7", '"7"'), (None, "null"), ({"n": 3}, '{"n": 3}'),
    (2**63, str(2**63)), (-(2**70), str(-(2**70))),
])
def test_an_unusable_completion_count_is_null_and_named(server, value, shown):
    target = script(server, "usage-odd",
                    lambda n: usage_stream(prompt_tokens=7, completion_tokens=value))
    row = check_window(measure_window(target, spec(requests=1)), 1)[0]
    assert row["status"] == "completed"  # the stream itself ended properly
    assert row["output_tokens"] is None and row["token_source"] == "missing"
    assert row["prompt_tokens"] == 7
    reason = "does not fit in int64" if type(value) is int else "is not an integer"
    assert row["error"] == f"usage.completion_tokens {reason}: {shown}"


def test_missing_prompt_tokens_is_null_never_zero(server):
    target = script(server, "no-prompt", lambda n: usage_stream(completion_tokens=2))
    row = check_window(measure_window(target, spec(requests=1)), 1)[0]
    assert row["prompt_tokens"] is None and row["output_tokens"] == 2
    assert row["token_source"] == "usage" and row["error"] == "usage has no prompt_tokens"


def test_odd_cached_tokens_are_null_and_named(server):
    target = script(server, "cached", lambda n: usage_stream(
        prompt_tokens=7, completion_tokens=2, prompt_tokens_details={"cached_tokens": "all"}))
    row = check_window(measure_window(target, spec(requests=1)), 1)[0]
    assert row["cached_tokens"] is None and row["output_tokens"] == 2
    assert row["error"] == 'usage.prompt_tokens_details.cached_tokens is not an integer: "all"'


def test_usage_that_is_not_an_object_is_named(server):
    steps = [chat_chunk("a", "stop"), sse_event({"choices": [], "usage": [1, 2]}),
             sse_event("[DONE]")]
    target = script(server, "usage-list", lambda n: Script(steps))
    row = check_window(measure_window(target, spec(requests=1)), 1)[0]
    assert row["status"] == "completed" and row["token_source"] == "missing"
    assert row["error"] == "usage is not an object: [1, 2]"


def test_failed_request_keeps_both_its_failure_and_its_usage_note(server):
    steps = [chat_chunk("a"), usage_event(prompt_tokens=7, completion_tokens=True),
             sse_event("42")]
    target = script(server, "both", lambda n: Script(steps))
    row = check_window(measure_window(target, spec(requests=1)), 1)[0]
    assert row["status"] == "failed"
    assert row["error"] == ("event 3: not a JSON object: 42; "
                            "usage.completion_tokens is not an integer: true")


def test_surrogate_in_finish_reason_cannot_break_the_parquet_file(server):
    steps = [chat_chunk("a"), b'data: {"choices": [{"delta": {}, "finish_reason": "\\ud800"}]}'
             b"\n\n", sse_event("[DONE]")]
    target = script(server, "surrogate", lambda n: Script(steps))
    row = check_window(measure_window(target, spec(requests=1)), 1)[0]
    assert row["status"] == "completed" and row["finish_reason"] == "\\ud800"


# --- bounded waits ----------------------------------------------------------------------------


def test_hung_warmup_is_drained_like_a_measured_request(server):
    """Issue #11: a server whose every sixth request hangs after its first chunk, with
    drain_timeout_s = 3. Warm-up used to wait request_timeout_s (here 60 s) for it."""
    hang = Script([chat_chunk("a"), 60.0])
    target = script(server, "sixth", lambda n: hang if n % 6 == 5 else Script(good_stream(3)))
    started = time.monotonic()
    result = measure_window(target, spec(requests=6, warmup=6, drain_timeout_s=3.0,
                                         request_timeout_s=60.0))
    took = time.monotonic() - started
    # cut at the drain deadline (the rows below say so), not after the hung request's 60 s
    # (request_timeout_s): half of them is a margin no loaded machine eats
    assert took < 60.0 / 2, took
    rows = check_window(result, 6)
    warm = [r for r in result.rows if r["is_warmup"]]
    assert [r["status"] for r in warm] == ["completed"] * 5 + ["unresolved"]
    assert warm[-1]["error"] == "warm-up request still running at the drain deadline (3 s)"
    assert warm[-1]["chunks"] == 1 and warm[-1]["t_done_ns"] is None
    assert [r["status"] for r in rows] == ["completed"] * 5 + ["unresolved"]
    acc = result.accounting
    assert (acc["warmup_completed"], acc["warmup_unresolved"]) == (5, 1)
    assert acc["drain_status"] == "incomplete"


def test_a_stream_with_no_bytes_hits_the_request_deadline(server):
    target = script(server, "silent", every_other_bad(Script([30.0])))
    started = time.monotonic()
    rows = check_window(measure_window(target, spec(requests=2, request_timeout_s=1.0)), 2)
    assert time.monotonic() - started < 30.0 / 2  # the deadline, not the 30 s of silence
    assert_good_rows_intact(rows)
    assert rows[1]["status"] == "failed" and rows[1]["chunks"] == 0
    assert rows[1]["error"] == "no complete answer within request_timeout_s (1 s)"


def test_a_silent_stream_past_the_drain_deadline_is_unresolved(server):
    target = script(server, "silent-drain", lambda n: Script([30.0]))
    result = measure_window(target, spec(requests=2, concurrency=2, drain_timeout_s=0.5))
    rows = check_window(result, 2)
    assert all(r["status"] == "unresolved" and "drain deadline (0.5 s)" in r["error"]
               for r in rows)


def test_request_timeout_is_a_total_deadline_not_a_per_read_one(server):
    """A keep-alive comment every 0.2 s would reset a per-read timeout forever."""
    trickle = Script([chat_chunk("a"), *[x for _ in range(100) for x in (0.2, b": .\n\n")]])
    target = script(server, "trickle", lambda n: trickle)
    started = time.monotonic()
    result = measure_window(target, spec(requests=1, request_timeout_s=1.5,
                                         drain_timeout_s=30.0))
    assert time.monotonic() - started < 20.0 / 2  # the deadline, not the 20 s trickle
    row = check_window(result, 1)[0]
    assert row["status"] == "failed" and row["chunks"] == 1
    assert row["error"] == "no complete answer within request_timeout_s (1.5 s)"


def test_the_connect_timeout_never_exceeds_the_request_deadline(server, monkeypatch):
    seen = []
    real = aiohttp.ClientSession.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs["timeout"])
        real(self, *args, **kwargs)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", spy)
    target = script(server, "ok", lambda n: Script(good_stream(2)))
    measure_window(target, spec(requests=1, request_timeout_s=2.0))
    measure_window(target, spec(requests=1, request_timeout_s=600.0))
    assert [(t.sock_connect, t.total) for t in seen] == [(2.0, None), (30.0, None)]


# --- memory: records are made as requests are submitted ---------------------------------------


@pytest.mark.parametrize("arrival", ["closed", "poisson"])
def test_a_huge_request_count_sends_at_once_without_building_records(server, monkeypatch,
                                                                    arrival):
    """requests = 10**9 used to build every record (and the Poisson schedule) up front."""
    shaped = []
    real_shape = client_record.shape_prompt

    def counting_shape(*args):
        shaped.append(1)
        if len(shaped) > 1000:
            raise AssertionError("records are being built ahead of their submission")
        return real_shape(*args)

    monkeypatch.setattr(client_record, "shape_prompt", counting_shape)
    target = script(server, "hang", lambda n: Script([chat_chunk("a"), 30.0]))
    window = spec(requests=10**9, concurrency=2, arrival=arrival, rate_rps=1000.0)

    async def scenario() -> int:
        tracemalloc.start()
        task = asyncio.create_task(client.measure_window_async(target, window))
        deadline = time.monotonic() + 10
        while len(server.bodies) < 2 and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # room for (wrongly) building more
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return peak

    peak = asyncio.run(scenario())
    assert len(server.bodies) == 2  # both slots are held by hanging requests
    assert len(shaped) == 2
    assert peak < 20 * 2**20, peak


def test_done_without_a_finish_reason_is_a_cut_stream_not_an_answer(server):
    """llama-cpp-python's default (issue #39): a stream the server ends because another
    request arrived closes with `[DONE]` and nothing else. Nothing says the answer was
    whole: the request failed, as cut, whatever it delivered before."""
    cut_after = {0: [], 1: [chat_chunk("a"), chat_chunk("b")]}
    target = script(server, "cut", lambda n: Script(
        [*cut_after[n % 2], b"data: [DONE]\n\n"] if n < 2 else good_stream(5)))
    result = measure_window(target, spec(requests=3))
    rows = check_window(result, 3)
    assert [r["status"] for r in rows] == ["failed", "failed", "completed"]
    for row, events in zip(rows[:2], (0, 2), strict=True):
        assert row["finish_reason"] is None and row["chunks"] == events
        assert row["error"].startswith(
            f"stream cut: [DONE] arrived without a finish_reason after {events} content "
            "event(s)"), row["error"]
    assert result.accounting["failed"] == 2 and result.accounting["completed"] == 1


def test_the_progress_line_counts_cut_streams_among_the_failed(server):
    target = script(server, "cut-progress", lambda n: Script(
        [b"data: [DONE]\n\n"] if n % 2 else good_stream(5)))
    seen = []
    measure_window(target, spec(requests=4), on_progress=seen.append)
    done = seen[-1]
    assert (done.phase, done.failed, done.cut) == ("done", 2, 2)
    assert "2 failed (2 cut short by the server)" in client_progress_line(done)
