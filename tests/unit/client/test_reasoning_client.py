"""Reasoning models, the client's side: a chat delta's `reasoning_content` or `reasoning`
is the model's thinking, never output content. It is counted and stamped apart (so TTFT
stays the first output content token), a malformed one fails its request, completions
carry none, and usage's `completion_tokens_details.reasoning_tokens` reaches the row."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchledger.client import (
    CHAT,
    COMPLETIONS,
    Event,
    RequestRecord,
    Target,
    WindowSpec,
    measure_window,
    parse_event,
    read_usage,
)
from benchledger.prompts import Prompt, load_prompt_set
from benchledger.raw.records import REQUEST_SCHEMA, requests_table
from tests.conftest import Script, chat_chunk, sse_event, usage_event

FIELDS = ("reasoning_content", "reasoning")


def chat(delta: dict, finish: str | None = None) -> bytes:
    return json.dumps({"object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": delta, "finish_reason": finish}]}).encode()


# --- parse_event / read_choices -----------------------------------------------------------


@pytest.mark.parametrize("field", FIELDS)
def test_a_reasoning_delta_bears_reasoning_not_content(field):
    event = parse_event(chat({field: " thinking"}))
    assert (event.content, event.reasoning, event.problem) == (0, 1, None)
    # content null, or empty, beside it changes nothing
    for content in (None, ""):
        event = parse_event(chat({field: " thinking", "content": content}))
        assert (event.content, event.reasoning, event.problem) == (0, 1, None)
    # the content delta as before
    assert parse_event(chat({"content": " answer"}))[:3] == (False, 1, 0)


@pytest.mark.parametrize("field", FIELDS)
def test_empty_or_null_reasoning_bears_nothing(field):
    for value in ("", None):
        event = parse_event(chat({field: value}))
        assert (event.content, event.reasoning, event.problem) == (0, 0, None)
    event = parse_event(chat({"role": "assistant", "content": "", field: ""}))
    assert (event.content, event.reasoning) == (0, 0)


def test_a_delta_with_both_bears_both():
    """vLLM's reasoning parser sends the step that ends the thinking as one delta with both
    fields: its content did arrive then."""
    event = parse_event(chat({"reasoning_content": " done.", "content": " The answer"}))
    assert (event.content, event.reasoning) == (1, 1)
    # a server sending both names (the same text) is one reasoning-bearing choice
    event = parse_event(chat({"reasoning_content": " x", "reasoning": " x"}))
    assert (event.content, event.reasoning) == (0, 1)


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("bad", [5, 1.5, True, ["x"], {"text": "x"}])
def test_a_reasoning_field_that_is_not_a_string_fails_the_request(field, bad):
    event = parse_event(chat({field: bad}))
    assert event.problem == f"choices[0].delta.{field} is not a string: {json.dumps(bad)}"
    assert (event.content, event.reasoning) == (0, 0)
    # also beside valid content, and on the counted path
    assert parse_event(chat({field: bad, "content": "a"})).problem
    assert parse_event(chat({field: bad}), CHAT, CHAT.streamed_text).problem


def test_read_choices_counts_each_choice():
    choices = [{"delta": {"reasoning": "a"}}, {"delta": {"content": "b"}},
               {"delta": {"reasoning_content": "c"}, "finish_reason": "length"}]
    # the texts as sent, joined over the choices in order: reasoning apart from the answer
    assert CHAT.read_choices(choices) == (1, 2, "length", None, "b", "ac")
    assert CHAT.read_choices(None) == (0, 0, None, None, None, None)
    content, reasoning, finish, problem, _, _ = CHAT.read_choices("x")
    assert (content, reasoning, finish) == (0, 0, None) and "not a list" in problem
    assert CHAT.read_choices([{"delta": {"reasoning": 3}}])[3] == (
        "choices[0].delta.reasoning is not a string: 3")


@pytest.mark.parametrize("field", FIELDS)
def test_completions_carry_no_reasoning(field):
    text = json.dumps({"choices": [{"index": 0, "text": " a", field: "b",
                                    "delta": {field: "c"}}]}).encode()
    event = parse_event(text, COMPLETIONS)
    assert (event.content, event.reasoning, event.problem) == (1, 0, None)
    # whatever shape a reasoning field has there, completions never read it
    odd = json.dumps({"choices": [{"text": "", field: 5, "delta": {field: [1]}}]}).encode()
    event = parse_event(odd, COMPLETIONS)
    assert (event.content, event.reasoning, event.problem) == (0, 0, None)
    assert COMPLETIONS.read_choices([{"text": "a", field: "b"}]) == (1, 0, None, None, "a", None)


def test_the_counted_path_keeps_the_reasoning_count_and_text():
    """The positional fast path (usage) and the counted path (logprobs, server tokenizer)
    give the same chunks; the tokenizer's text holds the reasoning, which usage counts."""
    data = chat({"reasoning_content": " think", "content": " say"}, "stop")
    fast = parse_event(data)
    # every event carries its answer and reasoning texts apart (the row digests them)
    assert fast == Event(content=1, reasoning=1, finish_reason="stop", answer=" say",
                         thought=" think")
    counted = parse_event(data, CHAT, CHAT.streamed_text)
    assert counted == fast._replace(text=" think say")
    # the answer alone (a session's assistant turn) leaves the reasoning out
    assert parse_event(chat({"reasoning": " only"})).answer is None
    assert parse_event(json.dumps({"choices": [{"text": " t", "reasoning": " r"}]}).encode(),
                       COMPLETIONS)[-2:] == (" t", None)
    lp = json.dumps({"choices": [{"delta": {"reasoning": " a b"}, "logprobs": {
        "content": [{"token": " a"}, {"token": " b"}]}}]}).encode()
    assert parse_event(lp, CHAT, CHAT.logprob_tokens) == Event(reasoning=1, tokens=2,
                                                               thought=" a b")
    assert parse_event(lp) == Event(reasoning=1, thought=" a b")


def test_an_answer_text_holds_its_reasoning_first():
    answer = {"choices": [{"message": {"role": "assistant", "reasoning_content": " think",
                                       "content": " say"}}]}
    assert CHAT.answer_text(answer) == " think say"
    answer = {"choices": [{"message": {"reasoning": " only thinking", "content": None}}]}
    assert CHAT.answer_text(answer) == " only thinking"
    assert CHAT.answer_text({"choices": [{"message": {"content": " say"}}]}) == " say"
    assert CHAT.answer_text({"choices": [{"message": {"reasoning": 5, "content": "s"}}]}) \
        == "s"
    assert COMPLETIONS.answer_text({"choices": [{"text": " t", "reasoning": " r"}]}) == " t"


values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6),
                   st.lists(st.text(max_size=3), max_size=2),
                   st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2))
deltas = st.fixed_dictionaries({}, optional={
    "content": st.one_of(st.text(max_size=6), values), "role": values,
    "reasoning_content": st.one_of(st.text(max_size=6), values),
    "reasoning": st.one_of(st.text(max_size=6), values)})


@given(st.lists(deltas, max_size=3))
def test_any_delta_is_read_without_raising_and_as_its_fields_say(delta_list):
    payload = {"choices": [{"index": i, "delta": d} for i, d in enumerate(delta_list)]}
    event = parse_event(json.dumps(payload).encode())
    fields = [(d.get("content"), *(d.get(k) for k in FIELDS)) for d in delta_list]
    malformed = any(v is not None and not isinstance(v, str) for f in fields for v in f)
    if malformed:
        assert event.problem and "is not a string" in event.problem
        assert (event.content, event.reasoning) == (0, 0)
    else:
        assert event.problem is None
        assert event.content == sum(bool(f[0]) for f in fields)
        assert event.reasoning == sum(bool(f[1] or f[2]) for f in fields)
    # the counted path reads the same choices the same way
    counted = parse_event(json.dumps(payload).encode(), CHAT, CHAT.streamed_text)
    assert (counted.content, counted.reasoning, counted.problem) == (
        event.content, event.reasoning, event.problem)


# --- read_usage ---------------------------------------------------------------------------


def test_usage_reads_the_reasoning_tokens():
    usage = read_usage({"prompt_tokens": 7, "completion_tokens": 30,
                        "completion_tokens_details": {"reasoning_tokens": 20}})
    assert (usage.output_tokens, usage.reasoning_tokens, usage.notes) == (30, 20, ())
    # absent: None, and nothing to say
    for absent in ({"prompt_tokens": 7, "completion_tokens": 3},
                   {"prompt_tokens": 7, "completion_tokens": 3,
                    "completion_tokens_details": None},
                   {"prompt_tokens": 7, "completion_tokens": 3,
                    "completion_tokens_details": {"audio_tokens": 0}}):
        got = read_usage(absent)
        assert (got.reasoning_tokens, got.notes) == (None, ())
    assert read_usage(None).reasoning_tokens is None
    assert read_usage([1]).reasoning_tokens is None
    # recorded as reported, like every count (a gate rule judges)
    assert read_usage({"completion_tokens": 3, "prompt_tokens": 1,
                       "completion_tokens_details": {"reasoning_tokens": -4}}
                      ).reasoning_tokens == -4


@pytest.mark.parametrize(("value", "note"), [
    (True, "usage.completion_tokens_details.reasoning_tokens is not an integer: true"),
    (1.5, "usage.completion_tokens_details.reasoning_tokens is not an integer: 1.5"),
    ("7", 'usage.completion_tokens_details.reasoning_tokens is not an integer: "7"'),
    (2**63, "usage.completion_tokens_details.reasoning_tokens does not fit in int64: "
            "9223372036854775808"),
])
def test_a_reasoning_count_that_is_not_an_integer_is_null_and_named(value, note):
    got = read_usage({"prompt_tokens": 7, "completion_tokens": 30,
                      "completion_tokens_details": {"reasoning_tokens": value}})
    assert got.reasoning_tokens is None and got.output_tokens == 30
    assert got.token_source == "usage"  # the output count stands
    assert note in got.notes[0]


def test_completion_tokens_details_that_is_not_an_object_is_named():
    got = read_usage({"prompt_tokens": 7, "completion_tokens": 3,
                      "completion_tokens_details": [20]})
    assert got.reasoning_tokens is None
    assert got.notes == ("usage.completion_tokens_details is not an object: [20]",)


# --- the row ------------------------------------------------------------------------------


def _record(**values) -> RequestRecord:
    return RequestRecord(request_id="w/m0000", window_id="w", seq=0, is_warmup=False,
                         prompt=Prompt(id="p", text="hi"), max_tokens=8, temperature=0.0,
                         status="completed", t_submit_ns=1, t_done_ns=9, **values)


def test_the_row_and_the_table_have_the_reasoning_columns():
    thinking = _record(usage={"prompt_tokens": 2, "completion_tokens": 8,
                              "completion_tokens_details": {"reasoning_tokens": 5}},
                       chunks=2, content_event_ns=[6, 7], reasoning_chunks=3,
                       t_first_reasoning_ns=3, t_last_reasoning_ns=5)
    plain = _record(usage={"prompt_tokens": 2, "completion_tokens": 3})
    bad = _record(usage={"prompt_tokens": 2, "completion_tokens": 3,
                         "completion_tokens_details": {"reasoning_tokens": "5"}})
    rows = [thinking.row(), plain.row(), bad.row()]
    assert [(r["reasoning_tokens"], r["reasoning_chunks"], r["t_first_reasoning_ns"],
             r["t_last_reasoning_ns"]) for r in rows] == [
        (5, 3, 3, 5), (None, 0, None, None), (None, 0, None, None)]
    assert rows[0]["t_first_ns"] == 6 and rows[0]["output_tokens"] == 8
    assert "reasoning_tokens is not an integer" in rows[2]["error"]
    table = requests_table(rows)
    for name in ("reasoning_tokens", "reasoning_chunks", "t_first_reasoning_ns",
                 "t_last_reasoning_ns"):
        field = REQUEST_SCHEMA.field(name)
        assert str(field.type) == "int64" and field.nullable, name
    assert table.column("reasoning_tokens").to_pylist() == [5, None, None]
    assert table.column("t_first_reasoning_ns").to_pylist() == [3, None, None]
    assert set(rows[0]) == set(REQUEST_SCHEMA.names)


# --- a stream, measured -------------------------------------------------------------------


def _spec(**overrides) -> WindowSpec:
    values = dict(window_id="run/arm/r0/code-c1", prompts=load_prompt_set("code"),
                  requests=1, warmup=0, concurrency=1, max_tokens=16, temperature=0.0,
                  drain_timeout_s=5.0, request_timeout_s=10.0)
    values.update(overrides)
    return WindowSpec(**values)


def test_interleaved_reasoning_is_stamped_apart_from_content(scripted_server):
    """Reasoning, content, more reasoning, more content, each in its own read: the row's
    content stamps and TTFT are the content's alone, the reasoning's span its own."""
    server, base = scripted_server
    role = sse_event({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    server.scripts["interleaved"] = lambda n, body: Script([
        role, sse_event(chat({"reasoning_content": " Let"})), 0.03,
        sse_event(chat({"reasoning_content": " me think"})), 0.03,
        chat_chunk(" So"), 0.03,
        sse_event(chat({"reasoning": " wait"})), 0.03,
        chat_chunk(" yes", "stop"),
        usage_event(prompt_tokens=4, completion_tokens=6, total_tokens=10,
                    completion_tokens_details={"reasoning_tokens": 4}),
        sse_event(b"[DONE]")])
    row = measure_window(Target(base, "interleaved"), _spec()).rows[0]
    assert row["status"] == "completed", row["error"]
    assert (row["chunks"], row["reasoning_chunks"]) == (2, 3)
    assert (row["output_tokens"], row["reasoning_tokens"]) == (6, 4)
    events = row["content_event_ns"]
    assert len(events) == 2 and row["t_first_ns"] == events[0]
    assert row["t_submit_ns"] < row["t_first_reasoning_ns"] < row["t_first_ns"]
    # the later reasoning came between the two content events, and left them alone
    assert row["t_first_ns"] < row["t_last_reasoning_ns"] < row["t_last_ns"]
    assert row["t_first_ns"] - row["t_first_reasoning_ns"] >= 50_000_000  # two pauses


def test_a_stream_with_a_malformed_reasoning_field_fails_naming_it(scripted_server):
    server, base = scripted_server
    server.scripts["bad"] = lambda n, body: Script([
        sse_event(chat({"reasoning": " fine"})), sse_event(chat({"reasoning": {"t": 1}})),
        chat_chunk(" a", "stop"), sse_event(b"[DONE]")])
    row = measure_window(Target(base, "bad"), _spec()).rows[0]
    assert row["status"] == "failed"
    assert row["error"] == 'event 2: choices[0].delta.reasoning is not a string: {"t": 1}'
