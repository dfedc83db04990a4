"""Issue #13, piece by piece: reading logprobs and tokenizer answers (client), what the
simulator sends for them, the rules that hold each token source, and an entry's source."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from benchledger.client import (
    CHAT,
    COMPLETIONS,
    TOKEN_COUNTS,
    Endpoint,
    Event,
    RequestRecord,
    Target,
    calibration_summary,
    parse_event,
    read_token_count,
    read_usage,
    request_body,
    tokenize_body,
    warmup_problem,
)
from benchledger.expectations.gate import run_entry_gate, run_gate
from benchledger.prompts import load_prompt_set
from benchledger.simulator import protocol
from benchledger.simulator.options import SimConfig
from benchledger.simulator.tokenizer import tokenize
from benchledger.sweep.spec import SweepError, parse_sweep
from benchledger.warehouse.entries import token_source
from tests.sweeps import external_arm, sweep, toml
from tests.unit.expectations.test_gate import by_key, entry, failures, make_run

# --- the client reads what the server sent -----------------------------------------------


def chat_event(text: str, tokens: list[str] | None, **extra) -> bytes:
    logprobs = None if tokens is None else {"content": [
        {"token": t, "logprob": -0.1, "bytes": list(t.encode()), "top_logprobs": []}
        for t in tokens]}
    choice = {"index": 0, "delta": {"content": text}, "logprobs": logprobs, **extra}
    return json.dumps({"choices": [choice]}).encode()


def read(data: bytes, endpoint: Endpoint, token_count: str = "usage") -> Event:
    """parse_event as a window with this endpoint and token count reads each event."""
    return parse_event(data, endpoint, TOKEN_COUNTS[token_count].event_reader(endpoint))


def test_chat_logprobs_give_the_tokens_of_each_event():
    event = read(chat_event(" a b c", [" a", " b", " c"]), CHAT, "logprobs")
    assert (event.content, event.tokens, event.problem) == (1, 3, None)
    # no logprobs: the event's count is unknown, not 0 and not its chunk
    assert read(chat_event(" a", None), CHAT, "logprobs").tokens is None
    # the usage path never reads them (the default costs nothing extra per event)
    assert read(chat_event(" a b", [" a", " b"]), CHAT).tokens is None


def test_completion_logprobs_list_tokens():
    data = json.dumps({"choices": [{"index": 0, "text": "xy", "logprobs": {
        "tokens": ["x", "y"], "token_logprobs": [-1.0, -2.0], "top_logprobs": None,
        "text_offset": [0, 1]}}]}).encode()
    assert read(data, COMPLETIONS, "logprobs").tokens == 2


@pytest.mark.parametrize(("logprobs", "problem"), [
    ("many", "choices[0].logprobs is not an object"),
    ({"content": 3}, "choices[0].logprobs.content is not a list"),
])
def test_malformed_logprobs_fail_only_their_request(logprobs, problem):
    data = json.dumps({"choices": [{"delta": {"content": "a"}, "logprobs": logprobs}]})
    event = read(data.encode(), CHAT, "logprobs")
    assert event.problem is not None and problem in event.problem


def test_server_tokenizer_keeps_the_text():
    assert read(chat_event(" a b", None), CHAT, "server_tokenizer").text == " a b"


def record(token_count: str) -> RequestRecord:
    return RequestRecord("w/m0", "w", 0, False, load_prompt_set("code")[0], 64, 0.0,
                         tally=TOKEN_COUNTS[token_count].new_tally())


def feed(rec: RequestRecord, *events: Event) -> None:
    for event in events:
        rec.chunks += event.content
        rec.content_event_ns.extend([1] * event.content)
        rec.tally.add(event)


def test_logprob_tokens_are_counted_per_text_bearing_event():
    rec = record("logprobs")
    # a role event (no text, no logprobs), 1 token, tokens without text (carried to the
    # next text), 4 tokens, and logprobs after the last text (credited to that event)
    feed(rec, Event(content=0), Event(content=1, tokens=1), Event(content=0, tokens=2),
         Event(content=1, tokens=4), Event(content=0, tokens=1))
    rec.status = "completed"
    row = rec.row()
    assert (row["output_tokens"], row["token_source"]) == (8, "logprobs")
    assert row["content_event_tokens"] == [1, 7]
    assert sum(row["content_event_tokens"]) == row["output_tokens"]


def test_a_text_event_without_logprobs_leaves_the_count_missing():
    rec = record("logprobs")
    feed(rec, Event(content=1, tokens=3), Event(content=1, tokens=None))
    row = rec.row()
    assert (row["output_tokens"], row["token_source"]) == (None, "missing")
    assert row["content_event_tokens"] is None
    assert "1 of 2 text-bearing events listed no logprobs" in row["error"]


def test_usage_is_kept_beside_another_source():
    rec = record("logprobs")
    feed(rec, Event(content=1, tokens=5))
    rec.usage = {"prompt_tokens": 9, "completion_tokens": 6}
    row = rec.row()
    assert (row["output_tokens"], row["usage_output_tokens"], row["prompt_tokens"]) == (5, 6, 9)


def test_tokenizer_count_or_why_not():
    rec = record("server_tokenizer")
    rec.tally.tokenizer_error = "/tokenize: HTTP 404: Not Found"
    row = rec.row()
    assert row["token_source"] == "missing" and "HTTP 404" in row["error"]
    rec.tally.tokenizer_tokens, rec.tally.tokenizer_error = 12, None
    assert (rec.row()["output_tokens"], rec.row()["token_source"]) == (12, "server_tokenizer")


def test_requests_ask_for_what_the_arm_counts():
    rec = record("logprobs")
    _, chat = request_body(Target("http://x", "m", token_count="logprobs"), rec)
    _, completion = request_body(Target("http://x", "m", "completions", token_count="logprobs"),
                                 rec)
    assert chat["logprobs"] is True and completion["logprobs"] == 1
    # llama-cpp-python 0.3.36 streams chat logprobs only when top_logprobs is given
    assert chat["top_logprobs"] == 0 and "top_logprobs" not in completion
    assert chat["stream_options"] == {"include_usage": True}  # usage is still asked for
    _, plain = request_body(Target("http://x", "m"), rec, stream=False)
    assert plain["stream"] is False and "stream_options" not in plain and "logprobs" not in plain


@pytest.mark.parametrize(("answer", "count"), [
    ({"count": 4, "max_model_len": 8, "tokens": [1, 2, 3, 4], "token_strs": None}, 4),  # vLLM
    ({"tokens": [5, 6]}, 2),  # llama.cpp's server, llama-cpp-python
    ([{"id": 1, "text": "a"}, {"id": 2, "text": "b"}, {"id": 3, "text": "c"}], 3),  # TGI
    ({"error": "no"}, None),
    ("7", None),
])
def test_tokenizer_answers_of_each_server(answer, count):
    assert read_token_count(answer) == count


def test_one_tokenize_body_for_every_server():
    body = tokenize_body(Target("http://x", "m"), "hi")
    assert (body["prompt"], body["content"], body["input"], body["inputs"]) == ("hi",) * 4
    assert body["add_special_tokens"] is False and body["add_special"] is False


def test_calibration_summary():
    samples = [{"prompt_id": "a", "usage_output_tokens": 100, "tokenizer_tokens": 102,
                "error": None},
               {"prompt_id": "b", "usage_output_tokens": 100, "tokenizer_tokens": 100,
                "error": None},
               {"prompt_id": "c", "usage_output_tokens": None, "tokenizer_tokens": 50,
                "error": "the non-streamed answer has no usage"}]
    summary = calibration_summary(samples)
    assert (summary["calibration_requests"], summary["calibration_compared"]) == (3, 2)
    assert summary["calibration_rel_error"] == pytest.approx(0.01)
    assert summary["calibration_max_rel_error"] == pytest.approx(0.02)
    assert "tokenizer 202 vs usage 200" in summary["calibration_detail"]
    none = calibration_summary(samples[2:])
    assert none["calibration_rel_error"] is None
    assert "0 of 1" in none["calibration_detail"] and "no usage" in none["calibration_detail"]


def warmup(token_count: str, kept: dict | None = None, **changes) -> list[RequestRecord]:
    """One completed warm-up request; `kept`: what its token count's tally kept."""
    rec = record(token_count)
    rec.status = "completed"
    for key, value in changes.items():
        setattr(rec, key, value)
    for key, value in (kept or {}).items():
        setattr(rec.tally, key, value)
    return [rec]


def test_the_warmup_names_what_is_missing_and_the_options():
    usage_count, logprobs, tokenizer_count = (TOKEN_COUNTS[name] for name in
                                              ("usage", "logprobs", "server_tokenizer"))
    usage = warmup_problem(usage_count, warmup("usage"))
    assert 'token_count = "logprobs"' in usage and '"server_tokenizer"' in usage
    assert "token_source_is_usage" in usage
    assert "no logprobs" in warmup_problem(logprobs, warmup("logprobs", {"unlogged_events": 2},
                                                            chunks=2))
    tokenizer = warmup_problem(tokenizer_count,
                               warmup("server_tokenizer", {"tokenizer_error": "HTTP 404"}))
    assert "HTTP 404" in tokenizer and "/extras/tokenize" in tokenizer
    # some warm-up request counted, or none completed: nothing to say
    assert warmup_problem(usage_count, warmup("usage", usage={"completion_tokens": 3})) is None
    assert warmup_problem(usage_count, warmup("usage", status="failed")) is None
    assert read_usage(None).token_source == "missing"


# --- what the simulator sends ------------------------------------------------------------


def test_simulator_streams_one_logprob_entry_per_token():
    config = SimConfig()
    chat = protocol.parse_chat({"messages": [{"role": "user", "content": "hi"}],
                                "logprobs": True, "stream": True}, config)
    builder = protocol.ResponseBuilder(True, config.model, chat.logprobs)
    event = builder.content_event(" a b c", None, (" a", " b", " c"))
    entries = event["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in entries] == [" a", " b", " c"]
    assert all(set(e) == {"token", "logprob", "bytes", "top_logprobs"} for e in entries)
    completion = protocol.parse_completion({"prompt": "hi", "logprobs": 1}, config)
    builder = protocol.ResponseBuilder(False, config.model, completion.logprobs)
    first = builder.content_event(" a", None, (" a",))["choices"][0]["logprobs"]
    second = builder.content_event(" b c", None, (" b", " c"))["choices"][0]["logprobs"]
    assert (first["tokens"], second["tokens"]) == ([" a"], [" b", " c"])
    assert second["text_offset"] == [2, 4]
    # not asked for: null, as before
    plain = protocol.ResponseBuilder(True, config.model).content_event("a", None, ("a",))
    assert plain["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"},
    {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
    {"prompt": "x", "logprobs": True},
    {"prompt": "x", "logprobs": 99},
])
def test_simulator_refuses_logprobs_it_cannot_serve(body):
    parse = protocol.parse_chat if "messages" in body else protocol.parse_completion
    with pytest.raises(protocol.ApiError):
        parse(body, SimConfig())


def test_simulator_tokenize_endpoints_follow_each_server():
    config, text = SimConfig(), " the river, 42"
    n = len(tokenize(text))
    assert len(protocol.tokenize_request({"prompt": text}, config, False)) == n + 1  # vLLM BOS
    assert len(protocol.tokenize_request({"prompt": text, "add_special_tokens": False},
                                         config, False)) == n
    assert len(protocol.tokenize_request({"content": text}, config, False)) == n  # llama.cpp
    assert len(protocol.tokenize_request({"input": text}, config, True)) == n + 1
    assert len(protocol.tokenize_request({"input": ""}, config, True)) == 1
    tokens = protocol.tokenize_request({"prompt": text}, config, False)
    vllm = protocol.tokenize_response(tokens, config, False)
    assert vllm["count"] == len(vllm["tokens"]) == n + 1
    assert set(protocol.tokenize_response(tokens, config, True)) == {"tokens"}
    with pytest.raises(protocol.ApiError):
        protocol.tokenize_request({"prompt": 3}, config, False)


# --- the rules that hold each source -----------------------------------------------------


def with_windows(**columns):
    restarts, windows, requests = make_run(n_restarts=1)
    for column, values in columns.items():
        windows[column] = values
    return restarts, windows, requests


def test_tokenizer_calibrated_judges_only_tokenizer_windows():
    run = with_windows(token_count=["server_tokenizer", "usage"],
                       reconcile_tolerance=[0.01, 0.01],
                       calibration_rel_error=[0.02, None],
                       calibration_detail=["5 of 5 calibration requests: +2.00%", None])
    results = by_key(run_gate(*run))
    assert failures(results.values()) == {("r0-w0", "tokenizer_calibrated")}
    assert "above reconcile_tolerance: 5 of 5" in results[("r0-w0", "tokenizer_calibrated")].found
    assert "not applicable" in results[("r0-w1", "tokenizer_calibrated")].found


def test_an_uncalibrated_tokenizer_window_fails():
    run = with_windows(token_count=["server_tokenizer", "server_tokenizer"],
                       reconcile_tolerance=[0.01, 0.01], calibration_rel_error=[None, 0.0],
                       calibration_detail=["0 of 5 calibration requests had both counts", ""])
    results = by_key(run_gate(*run))
    assert failures(results.values()) == {("r0-w0", "tokenizer_calibrated")}
    assert "no calibration" in results[("r0-w0", "tokenizer_calibrated")].found


def test_logprobs_must_match_usage_where_both_exist():
    restarts, windows, requests = make_run(n_restarts=1)
    requests["token_source"] = "logprobs"
    requests["usage_output_tokens"] = requests["output_tokens"]
    requests.loc[3, "usage_output_tokens"] = requests.loc[3, "output_tokens"] + 2
    requests.loc[requests["window_id"] == "r0-w1", "usage_output_tokens"] = None  # no usage
    results = by_key(run_gate(restarts, windows, requests))
    assert failures(results.values()) == {("r0-w0", "logprobs_match_usage")}
    found = results[("r0-w0", "logprobs_match_usage")].found
    assert found.startswith("1 of 15 completed rows") and "(logprobs 103, usage 105)" in found
    assert results[("r0-w1", "logprobs_match_usage")].found.startswith("0 of 0")


def test_counted_sources_pass_token_source_is_usage_and_missing_does_not():
    restarts, windows, requests = make_run(n_restarts=1)
    requests.loc[requests["window_id"] == "r0-w0", "token_source"] = "server_tokenizer"
    requests.loc[requests["window_id"] == "r0-w1", "token_source"] = "chunks"
    assert failures(run_gate(restarts, windows, requests)) == {
        ("r0-w1", "token_source_is_usage")}


def test_an_entry_never_mixes_token_sources():
    entries = pd.DataFrame([entry(token_source="logprobs"),
                            entry(entry_id="e2", token_source="mixed (logprobs, usage)"),
                            entry(entry_id="e3", token_source=None)])
    results = by_key(run_entry_gate(entries))
    assert failures(results.values()) == {("e2", "entry_token_source_single")}
    assert results[("e3", "entry_token_source_single")].found == "rule not applicable"


def test_entry_token_source_from_its_windows():
    assert token_source(pd.Series(["logprobs", "logprobs"])) == "logprobs"
    assert token_source(pd.Series(["usage", "logprobs, usage"])) == "mixed (logprobs, usage)"
    assert token_source(pd.Series([None, None], dtype=object)) is None


# --- the sweep ---------------------------------------------------------------------------

def external(**keys) -> str:
    """A sweep of one external arm with `keys`, as text."""
    return toml(sweep("s", [external_arm("a", "http://127.0.0.1:1", model="m", **keys)]))


def test_sweep_token_count_keys():
    arm = parse_sweep(external()).arms[0]
    assert (arm.token_count, arm.tokenize_path, arm.calibration_requests) == (
        "usage", "/tokenize", 5)
    arm = parse_sweep(external(token_count="server_tokenizer",
                               tokenize_path="/extras/tokenize")).arms[0]
    assert (arm.token_count, arm.tokenize_path) == ("server_tokenizer", "/extras/tokenize")
    for bad in ({"token_count": "chunks"}, {"calibration_requests": 0},
                {"tokenize_path": "tokenize"}):
        with pytest.raises(SweepError):
            parse_sweep(external(**bad))
