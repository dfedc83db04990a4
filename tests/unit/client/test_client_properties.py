"""Property-based tests (hypothesis) of what the client reads from a server: the SSE reader,
the event parser and the usage reader. Whatever a server sends, they never raise, the row
they lead to has the Arrow schema's types, a token count is recorded iff it is a genuine
integer in int64 range, and chunks are counted without ever looking at usage (trap T1).
"""

from __future__ import annotations

import json
import math
import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from benchledger.client import (
    CHAT,
    COMPLETIONS,
    INT64_MAX,
    INT64_MIN,
    Event,
    RequestRecord,
    SSEReader,
    Target,
    WindowSpec,
    measure_window,
    parse_event,
    read_usage,
)
from benchledger.prompts import Prompt, load_prompt_set
from benchledger.raw.records import requests_table
from tests.conftest import Script, good_stream

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)
# Values a token count may take, genuine or not, with the int64 edges.
counts = st.one_of(json_values, st.sampled_from([INT64_MIN, INT64_MAX, INT64_MIN - 1,
                                                 INT64_MAX + 1, 0, -1, 10**9, True, False]))
usages = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={
        "prompt_tokens": counts, "completion_tokens": counts, "total_tokens": counts,
        "prompt_tokens_details": st.one_of(json_values, st.fixed_dictionaries(
            {}, optional={"cached_tokens": counts})),
    }),
)
choices = st.one_of(
    json_values,
    st.lists(st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "index": json_values,
        "delta": st.one_of(json_values, st.fixed_dictionaries(
            {}, optional={"content": st.one_of(st.text(max_size=10), json_values),
                          "role": json_values})),
        "text": st.one_of(st.text(max_size=10), json_values),
        "finish_reason": st.one_of(st.none(), st.sampled_from(["stop", "length", "\ud800"]),
                                   json_values),
    })), max_size=3),
)
payloads = st.fixed_dictionaries({}, optional={"choices": choices, "usage": usages,
                                               "error": json_values, "object": json_values})
endpoints = st.sampled_from([CHAT, COMPLETIONS])


def utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def genuine(value) -> bool:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def encode(value) -> bytes:
    # surrogatepass: a lone surrogate must reach the parser as the server would send it
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def assert_event_types(event: Event) -> None:
    assert isinstance(event, Event)
    assert type(event.done) is bool and type(event.content) is int and event.content >= 0
    assert event.finish_reason is None or isinstance(event.finish_reason, str)
    assert event.problem is None or isinstance(event.problem, str)
    if event.finish_reason is not None:
        event.finish_reason.encode("utf-8")  # writable as Parquet text


def row_for(event: Event) -> dict:
    record = RequestRecord(request_id="w/m0000", window_id="w", seq=0, is_warmup=False,
                           prompt=Prompt(id="p", text="hi"), max_tokens=8, temperature=0.0,
                           status="completed", t_submit_ns=1, t_done_ns=2)
    if event.problem:
        record.fail(event.problem)
    record.usage = event.usage
    record.finish_reason = event.finish_reason
    record.chunks = event.content
    record.content_event_ns = [1] * event.content
    return record.row()


@given(st.binary(max_size=300))
@example(b'"\\ud800"')
@example(b"[" * 100_000)  # nested beyond the recursion limit
@example(b"1" * 5000)  # more digits than int() converts
@example(b"\xff\xfe{}")
def test_any_bytes_parse_to_an_event_never_an_exception(data):
    for endpoint in (CHAT, COMPLETIONS):
        event = parse_event(data, endpoint)
        assert_event_types(event)
        assert requests_table([row_for(event)]).num_rows == 1


@given(json_values)
def test_any_json_value_parses_to_an_event(value):
    event = parse_event(encode(value))
    assert_event_types(event)
    if not isinstance(value, dict):
        assert event.problem and "not a JSON object" in event.problem
    requests_table([row_for(event)])


@given(payloads, endpoints)
@example({"error": [None], "choices": [{"finish_reason": "\ud800"}]}, COMPLETIONS)
def test_any_payload_gives_a_row_of_the_schema_types(payload, endpoint):
    data = encode(payload)
    event = parse_event(data, endpoint)
    assert_event_types(event)
    if payload.get("error"):
        # named as an error event, unless a lone surrogate elsewhere in it makes its bytes
        # not even UTF-8: then that is what fails the request
        assert event.problem.startswith("error event: " if utf8(data) else "not UTF-8")
    row = row_for(event)
    assert requests_table([row]).num_rows == 1
    assert row["error"] is None or len(row["error"]) <= 2000


@given(usages)
def test_a_count_is_recorded_iff_it_is_a_genuine_int64_integer(usage):
    got = read_usage(usage)
    usage_dict = usage if isinstance(usage, dict) else {}
    details = usage_dict.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    for key, recorded, container in (("completion_tokens", got.output_tokens, usage_dict),
                                     ("prompt_tokens", got.prompt_tokens, usage_dict),
                                     ("cached_tokens", got.cached_tokens, details)):
        value = container.get(key)
        if genuine(value):
            assert recorded == value and type(recorded) is int  # as reported, never clamped
        else:
            assert recorded is None
            if key in container:  # present but unusable: named with its raw value
                assert any(f"{key} " in note for note in got.notes), got.notes
    assert got.token_source == ("usage" if got.output_tokens is not None else "missing")
    assert all(isinstance(note, str) for note in got.notes)


@given(usages)
def test_usage_flows_from_the_stream_to_the_row_unchanged(usage):
    event = parse_event(encode({"choices": [], "usage": usage}))
    assert event.problem is None
    row = row_for(event)
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    assert row["output_tokens"] == (completion if genuine(completion) else None)
    assert requests_table([row]).num_rows == 1


@given(payloads, usages, endpoints)
def test_chunks_never_read_usage(payload, other_usage, endpoint):
    """Trap T1: replacing or removing the usage changes nothing about chunks or timing."""
    with_usage = parse_event(encode({**payload, "usage": other_usage}), endpoint)
    without = parse_event(encode({k: v for k, v in payload.items() if k != "usage"}), endpoint)
    # A problem's text may name a byte offset in the event, which the usage moves.
    assert (with_usage.content, with_usage.finish_reason, unplaced(with_usage.problem)) == \
           (without.content, without.finish_reason, unplaced(without.problem))


def unplaced(problem: str | None) -> str | None:
    return None if problem is None else re.sub(r"at offset \d+", "at offset N", problem)


@given(st.lists(st.text(max_size=6), min_size=1, max_size=5), st.integers(1, 40),
       st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_the_sse_reader_does_not_care_where_the_stream_is_cut(texts, cut, newline):
    stream = b"".join(b"data: " + encode({"choices": [{"delta": {"content": t}}]}) + b"\n\n"
                      for t in texts) + b"data: [DONE]\n\n"
    stream = stream.replace(b"\n", newline)
    whole = SSEReader().feed(stream)
    reader = SSEReader()
    pieces = [reader.feed(stream[i:i + cut]) for i in range(0, len(stream), cut)]
    assert [d for piece in pieces for d in piece] == whole
    assert len(whole) == len(texts) + 1 and reader.fault is None
    assert [parse_event(d).content for d in whole[:-1]] == [1 if t else 0 for t in texts]


@given(st.lists(st.binary(max_size=60), max_size=8))
def test_the_sse_reader_never_raises(chunks):
    reader = SSEReader()
    for chunk in chunks:
        for data in reader.feed(chunk):
            assert isinstance(data, bytes)
        if reader.fault:
            assert isinstance(reader.fault, str)
            break
    left = reader.leftover()
    assert left is None or isinstance(left, str)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(payloads | json_values, min_size=1, max_size=4))
def test_any_events_over_real_http_end_in_rows_that_balance(scripted_server, events):
    """End to end over a loopback server: arbitrary events in front of a good answer, and
    every request of the window is a row of the schema's types, the accounting balances."""
    server, base = scripted_server
    steps = [b"data: " + encode(e) + b"\n\n" for e in events] + good_stream(2)
    server.scripts["prop"] = lambda n, body: Script(steps)
    server.served.pop("prop", None)
    spec = WindowSpec(window_id="w", prompts=load_prompt_set("code"), requests=2, warmup=1,
                      concurrency=2, max_tokens=8, temperature=0.0, drain_timeout_s=5.0,
                      request_timeout_s=5.0)
    result = measure_window(Target(base, "prop"), spec)
    acc = result.accounting
    assert len(result.rows) == 3 and acc["submitted"] == 2
    assert acc["submitted"] == acc["completed"] + acc["failed"] + acc["unresolved"]
    assert requests_table(result.rows).num_rows == 3
    for row in result.rows:
        assert row["status"] in ("completed", "failed")
        assert row["status"] == "completed" or row["error"]
        for key in ("output_tokens", "prompt_tokens", "cached_tokens"):
            assert row[key] is None or genuine(row[key])
        assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())
