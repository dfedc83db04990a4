"""The measurement client against a real local HTTP server with scripted behaviour."""

from __future__ import annotations

import logging
from itertools import islice
from typing import get_args

import pytest

import benchledger.client as client
from benchledger.client import (
    ENDPOINTS,
    TOKEN_COUNTS,
    Target,
    TokenCountUnavailable,
    WindowSpec,
    measure_window,
    poisson_arrivals,
)
from benchledger.prompts import load_prompt_set
from benchledger.raw.records import requests_table
from benchledger.sweep import spec as sweep
from benchledger.sweep.spec import parse_sweep
from tests import sweeps


def spec(**overrides) -> WindowSpec:
    values = dict(window_id="run/arm/r0/code-c1", prompts=load_prompt_set("code"), requests=3,
                  warmup=1, concurrency=1, max_tokens=16, temperature=0.0,
                  drain_timeout_s=5.0, request_timeout_s=10.0)
    values.update(overrides)
    return WindowSpec(**values)


def measured(result):
    return [r for r in result.rows if not r["is_warmup"]]


def test_tokens_come_from_usage_not_chunks(scripted_server):
    _, base = scripted_server
    result = measure_window(Target(base, "spec"), spec())
    rows = measured(result)
    assert [r["output_tokens"] for r in rows] == [10, 10, 10]
    assert [r["chunks"] for r in rows] == [4, 4, 4]  # the role-only event carries no content
    assert all(r["token_source"] == "usage" and r["prompt_tokens"] == 7 for r in rows)
    assert all(r["t_submit_ns"] < r["t_first_ns"] <= r["t_last_ns"] <= r["t_done_ns"]
               for r in rows)
    assert all(len(r["content_event_ns"]) == r["chunks"] for r in rows)
    assert requests_table(result.rows).num_rows == 4  # warm-up included, rows fit the schema


def test_request_asks_for_usage_and_records_targets(scripted_server):
    server, base = scripted_server
    measure_window(Target(base, "plain"), spec(requests=1, warmup=0, max_tokens=33))
    body = server.bodies[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 33 and body["temperature"] == 0.0
    assert body["messages"][0]["content"] == load_prompt_set("code")[0].text


def test_completions_endpoint_reads_text_field(scripted_server):
    server, base = scripted_server
    result = measure_window(Target(base, "plain", endpoint="completions"),
                            spec(requests=1, warmup=0))
    assert "prompt" in server.bodies[-1]
    # the scripted server sends chat deltas, which the completions parser must not count
    assert measured(result)[0]["chunks"] == 0


def test_missing_usage_is_recorded_never_guessed(scripted_server):
    _, base = scripted_server
    # Without a warm-up nothing tells in advance: each row says it has no count.
    rows = measured(measure_window(Target(base, "no-usage"), spec(warmup=0)))
    assert len(rows) == 3
    assert all(r["token_source"] == "missing" and r["output_tokens"] is None for r in rows)
    assert all(r["chunks"] == 5 and r["status"] == "completed" for r in rows)


def test_warmup_without_usage_stops_the_window_naming_the_options(scripted_server):
    server, base = scripted_server
    with pytest.raises(TokenCountUnavailable) as caught:
        measure_window(Target(base, "no-usage"), spec(warmup=2))
    message = str(caught.value)
    assert "no usage for any of the 2 completed warm-up requests" in message
    assert 'token_count = "logprobs"' in message and '"server_tokenizer"' in message
    assert len(server.bodies) == 2  # the measured part never started


def test_http_error_is_a_failed_row(scripted_server):
    _, base = scripted_server
    result = measure_window(Target(base, "http-500"), spec())
    rows = measured(result)
    assert [r["status"] for r in rows] == ["failed"] * 3
    assert rows[0]["http_status"] == 500 and "engine exploded" in rows[0]["error"]
    assert result.accounting["failed"] == 3 and result.accounting["completed"] == 0


def test_stream_cut_short_is_a_failed_row(scripted_server):
    _, base = scripted_server
    rows = measured(measure_window(Target(base, "cut"), spec(requests=1, warmup=0)))
    assert rows[0]["status"] == "failed" and "without [DONE]" in rows[0]["error"]


def test_unfinished_requests_at_drain_deadline_stay_as_unresolved_rows(scripted_server):
    _, base = scripted_server
    result = measure_window(Target(base, "stall"),
                            spec(requests=2, warmup=0, concurrency=2, drain_timeout_s=0.5))
    acc = result.accounting
    assert (acc["submitted"], acc["completed"], acc["failed"], acc["unresolved"]) == (2, 0, 0, 2)
    assert acc["drain_status"] == "incomplete"
    rows = measured(result)
    assert len(rows) == 2 and all(r["status"] == "unresolved" for r in rows)
    assert all(r["chunks"] == 1 and r["t_done_ns"] is None for r in rows)
    assert all("drain deadline" in r["error"] for r in rows)
    # the window ends at the drain deadline, so its denominator covers the wait
    assert acc["elapsed_s"] == pytest.approx(0.5, abs=0.3)


def test_window_accounting_balances_and_warmup_is_separate(scripted_server):
    _, base = scripted_server
    result = measure_window(Target(base, "plain"), spec(requests=4, warmup=2, concurrency=2))
    acc = result.accounting
    assert acc["submitted"] == acc["completed"] + acc["failed"] + acc["unresolved"] == 4
    assert acc["warmup_submitted"] == 2 and acc["drain_status"] == "complete"
    warm = [r for r in result.rows if r["is_warmup"]]
    assert len(warm) == 2 and {r["request_id"][-5:] for r in warm} == {"w0000", "w0001"}
    first_measured = min(r["t_submit_ns"] for r in measured(result))
    assert all(r["t_done_ns"] <= first_measured for r in warm)  # warm-up is outside
    assert acc["window_start_ns"] == first_measured
    # the denominator: first measured submission to the last measured completion
    last_done = max(r["t_done_ns"] for r in measured(result))
    assert acc["window_end_ns"] == last_done > first_measured
    assert acc["elapsed_s"] == (last_done - first_measured) / 1e9


def poisson_offsets(count: int, rate_rps: float, seed: int) -> list[float]:
    return list(islice(poisson_arrivals(rate_rps, seed), count))


def test_poisson_arrivals_are_seeded_and_the_achieved_rate_recorded(scripted_server):
    assert poisson_offsets(5, 10.0, seed=3) == poisson_offsets(5, 10.0, seed=3)
    assert poisson_offsets(5, 10.0, seed=3) != poisson_offsets(5, 10.0, seed=4)
    _, base = scripted_server
    result = measure_window(Target(base, "plain"),
                            spec(requests=12, warmup=0, concurrency=12, arrival="poisson",
                                 rate_rps=40.0, seed=1))
    acc = result.accounting
    offsets = poisson_offsets(12, 40.0, seed=1)
    assert acc["arrival"] == "poisson" and acc["requested_rate_rps"] == 40.0
    # the client kept the schedule: achieved = the schedule's own rate, give or take
    assert acc["achieved_rate_rps"] == pytest.approx(11 / offsets[-1], rel=0.25)
    submits = sorted(r["t_submit_ns"] for r in measured(result))
    assert (submits[-1] - submits[0]) / 1e9 == pytest.approx(offsets[-1], abs=0.05)


def test_cold_prompts_get_unique_recorded_prefixes_and_filler(scripted_server):
    server, base = scripted_server
    result = measure_window(Target(base, "plain"),
                            spec(requests=3, warmup=1, prompt_cache="cold", input_tokens=50))
    rows = result.rows
    assert len(rows) == 4
    prefixes = [r["prompt_prefix"] for r in rows]
    assert all(p and p.startswith("[request ") for p in prefixes)
    assert len(set(prefixes)) == len(rows)  # warm-up included: no two share a prefix
    sent = [b["messages"][0]["content"] for b in server.bodies[-4:]]
    assert all(text.startswith(p) for text, p in zip(sent, prefixes, strict=True))
    filler = sent[0].split("\n\n")[1]
    assert len(filler.split()) == 50  # the filler in front of the built-in prompt
    assert sent[0].endswith(load_prompt_set("code")[0].text)
    assert result.accounting["prompt_cache"] == "cold"
    assert result.accounting["input_tokens_target"] == 50


def test_warm_prompts_are_sent_as_they_are(scripted_server):
    server, base = scripted_server
    result = measure_window(Target(base, "plain"), spec(requests=1, warmup=0))
    assert result.rows[0]["prompt_prefix"] is None
    assert server.bodies[-1]["messages"][0]["content"] == load_prompt_set("code")[0].text


def test_api_key_is_sent_as_bearer_and_never_recorded(scripted_server, caplog):
    server, base = scripted_server
    key = "sk-test-5f1e9a"
    target = Target(base, "plain", api_key=key)
    assert key not in repr(target)
    # Every logger the client's requests go through, at DEBUG (Airflow, imported by earlier
    # tests in this process, sets some of them to WARNING): aiohttp for the streams, httpx
    # (which logs every request it sends) for the token counts after a part.
    caplog.set_level(logging.DEBUG)
    for name in ("aiohttp", "aiohttp.client", "httpx", "httpcore", "benchledger"):
        caplog.set_level(logging.DEBUG, logger=name)
    result = measure_window(target, spec(requests=2, warmup=1))
    assert key not in caplog.text
    assert [h.get("Authorization") for h in server.headers] == [f"Bearer {key}"] * 3
    # a server that echoes the key into its error body does not get it into a row
    echoed = measure_window(Target(base, "echo-auth", api_key=key), spec(requests=1, warmup=0))
    row = measured(echoed)[0]
    assert row["status"] == "failed" and row["http_status"] == 401
    assert "bad key: Bearer <redacted>" in row["error"]
    for res in (result, echoed):
        assert key not in repr(res.rows) and key not in repr(res.accounting)


def test_no_api_key_sends_no_authorization(scripted_server):
    server, base = scripted_server
    measure_window(Target(base, "plain"), spec(requests=1, warmup=0))
    assert "Authorization" not in server.headers[-1]


# --- the arm's endpoint and token count: strategies picked once, by the sweep's values ------


def test_every_endpoint_and_token_count_of_the_sweep_has_its_strategy():
    """The client spells the sweep's EndpointName and TokenCountName again (it may not import
    the sweep module, which imports the simulator's): both must name the same values, and
    each value must pick a strategy."""
    assert get_args(sweep.EndpointName) == get_args(client.EndpointName)
    assert get_args(sweep.TokenCountName) == get_args(client.TokenCountName)
    assert set(ENDPOINTS.names()) == set(get_args(client.EndpointName))
    assert set(TOKEN_COUNTS.names()) == set(get_args(client.TokenCountName))


def test_a_target_is_made_from_the_arm_plan_with_the_strategies_it_names():
    text = sweeps.toml(sweeps.sweep(
        "t", [sweeps.simulator_arm("a", model="m", token_count="logprobs",
                                   tokenize_path="/extras/tokenize")],
        defaults={"endpoint": "completions"}))
    plan = parse_sweep(text).arm("a")
    target = Target(base_url="http://x", model=plan.arm.model, endpoint=plan.endpoint,
                    api_key=None, token_count=plan.arm.token_count,
                    tokenize_path=plan.arm.tokenize_path)
    assert (target.endpoint, target.token_count) == (ENDPOINTS["completions"],
                                                     TOKEN_COUNTS["logprobs"])
    assert (target.endpoint.name, target.token_count.name) == ("completions", "logprobs")
    assert target.tokenize_path == "/extras/tokenize"
    with pytest.raises(ValueError, match=r"no endpoint named 'responses' \(known: chat, "
                                         r"completions\)"):
        Target("http://x", "m", endpoint="responses")  # not a value the sweep allows
    with pytest.raises(ValueError, match="no token count named 'chunks'"):
        Target("http://x", "m", token_count="chunks")
