"""Reasoning models, the simulator's side (--reasoning-tokens, --reasoning-field), and the
real client measuring it: the thinking is streamed apart from the content, usage counts it
in completion_tokens and says how much of it was reasoning, and the rows keep it apart."""

from __future__ import annotations

import asyncio

import httpx
import pyarrow.parquet as pq
import pytest

from benchledger.client import Target, WindowSpec, measure_window
from benchledger.prompts import load_prompt_set
from benchledger.raw.records import REQUEST_SCHEMA, requests_table
from benchledger.simulator import options
from benchledger.simulator.engine import Engine, SimConfig
from benchledger.sweep.spec import SweepError, parse_sweep
from tests.sweeps import simulator_arm, sweep, toml

REASONING_COLUMNS = ("reasoning_tokens", "reasoning_chunks", "t_first_reasoning_ns",
                     "t_last_reasoning_ns")


# --- the options --------------------------------------------------------------------------


def test_the_options_are_sweep_keys_passed_only_when_changed():
    by_name = {o.name: o for o in options.SWEEP_OPTIONS}
    assert by_name["reasoning_tokens"].default == 0
    assert by_name["reasoning_field"].default == "reasoning_content"
    assert by_name["reasoning_field"].choices == ("reasoning_content", "reasoning")
    for name in ("reasoning_tokens", "reasoning_field"):
        assert by_name[name].sweep_key == name
        assert by_name[name].setting.passed == options.CHANGED
    defaults = {o.sweep_key: [] if o.per_restart else o.default for o in options.SWEEP_OPTIONS}
    plain = options.launch_flags(defaults)
    assert "--reasoning-tokens" not in plain and "--reasoning-field" not in plain
    argv = options.launch_flags({**defaults, "reasoning_tokens": 32,
                                 "reasoning_field": "reasoning"})
    assert argv[-4:] == ["--reasoning-tokens", "32", "--reasoning-field", "reasoning"]
    with pytest.raises(ValueError, match="reasoning_tokens"):
        SimConfig(reasoning_tokens=-1)
    with pytest.raises(ValueError, match="reasoning_field"):
        SimConfig(reasoning_field="thinking")  # type: ignore[arg-type]


def _sweep(**simulator) -> str:
    return toml(sweep("s", [simulator_arm("a", simulator, model="m")]))


def test_a_sweep_sets_them_under_arms_simulator():
    arm = parse_sweep(_sweep(reasoning_tokens=64, reasoning_field="reasoning")).arms[0]
    assert arm.simulator.reasoning_tokens == 64
    assert arm.simulator.reasoning_field == "reasoning"
    with pytest.raises(SweepError, match="reasoning_field"):
        parse_sweep(_sweep(reasoning_field="thoughts"), "s.toml")
    with pytest.raises(SweepError, match="reasoning_tokens"):
        parse_sweep(_sweep(reasoning_tokens=-2), "s.toml")


# --- the engine ---------------------------------------------------------------------------


async def _no_sleep(_seconds: float) -> None:
    await asyncio.sleep(0)


def _chunks(config: SimConfig, max_tokens: int, reasoning_tokens: int):
    async def go():
        engine = Engine(config, sleep=_no_sleep, log=lambda *_: None)
        loop = asyncio.create_task(engine.run())
        request = engine.submit("def f(x): return x", max_tokens, 0.0,
                                reasoning_tokens=reasoning_tokens)
        chunks = [chunk async for chunk in request.chunks()]
        loop.cancel()
        return engine, request, chunks

    return asyncio.run(go())


@pytest.mark.parametrize("speculative", [False, True])
def test_the_first_tokens_are_reasoning_and_counted_as_generated(speculative):
    config = SimConfig(speculative=speculative, speed_spread=0.0)
    engine, request, chunks = _chunks(config, 40, 13)
    assert sum(c.tokens for c in chunks) == request.generated == 40
    assert sum(c.reasoning for c in chunks) == request.reasoning_generated == 13
    assert engine.counters.generation_tokens_total == 40  # reasoning counts, like vLLM
    seen = 0
    for chunk in chunks:  # reasoning first, then content: never back
        assert 0 <= chunk.reasoning <= chunk.tokens
        if seen < 13:
            assert chunk.reasoning == min(chunk.tokens, 13 - seen)
        else:
            assert chunk.reasoning == 0
        seen += chunk.tokens
    # fewer max_tokens than reasoning: all of it is reasoning
    _, short, chunks = _chunks(config, 5, 13)
    assert short.reasoning_generated == short.generated == 5
    assert all(c.reasoning == c.tokens for c in chunks)


def test_an_answer_that_ends_by_itself_ends_after_its_reasoning():
    config = SimConfig(eos_rate=1.0, speed_spread=0.0)
    _, plain, _ = _chunks(config, 400, 0)
    _, thinking, _ = _chunks(config, 400, 50)
    assert plain.finish_reason == thinking.finish_reason == "stop"
    assert thinking.generated == plain.generated + 50


# --- what the server sends ----------------------------------------------------------------


def _post(base: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(base + path, json={"model": "sim-model", "temperature": 0.0, **body},
                      timeout=30)


def _events(response: httpx.Response) -> list:
    import json
    return [json.loads(line[6:]) for line in response.text.splitlines()
            if line.startswith("data: {")]


@pytest.fixture(scope="module")
def servers():
    """One simulator per mode: reasoning with each field name (one speculative), and off.
    Steps of 10 ms keep the reasoning's reads apart from the content's on a busy machine."""
    from tests.conftest import start_simulator, stop_process_group

    started = {}
    try:
        for name, flags in {
            "content": ("--reasoning-tokens", "6", "--step-ms", "10",
                        "--log-interval-s", "60"),
            "reasoning": ("--reasoning-tokens", "6", "--reasoning-field", "reasoning",
                          "--speculative", "--step-ms", "10", "--log-interval-s", "60"),
            "off": ("--log-interval-s", "60",),
        }.items():
            started[name] = start_simulator(*flags)
        yield {name: base for name, (_, base) in started.items()}
    finally:
        for proc, _ in started.values():
            stop_process_group(proc)


def test_the_stream_carries_reasoning_apart_then_content(servers):
    for name, field in (("content", "reasoning_content"), ("reasoning", "reasoning")):
        response = _post(servers[name], "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "def f(x): return x"}],
            "max_tokens": 16, "stream": True, "stream_options": {"include_usage": True},
            "logprobs": True})
        events = _events(response)
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
        thinking = [d for d in deltas if field in d]
        assert thinking and all("content" not in d for d in thinking)
        other = "reasoning" if field == "reasoning_content" else "reasoning_content"
        assert not any(other in d for d in deltas)
        # reasoning first, then content, never back
        kinds = [field in d for d in deltas if d.get(field) or d.get("content")]
        assert kinds == sorted(kinds, reverse=True) and kinds[-1] is False
        usage = events[-1]["usage"]
        assert usage["completion_tokens"] == 16
        assert usage["completion_tokens_details"] == {"reasoning_tokens": 6}
        listed = sum(len(e["choices"][0]["logprobs"]["content"]) for e in events
                     if e["choices"] and e["choices"][0]["logprobs"])
        assert listed == 16  # reasoning tokens have logprobs too


def test_a_whole_answer_carries_its_reasoning_in_the_message(servers):
    for name, field in (("content", "reasoning_content"), ("reasoning", "reasoning")):
        answer = _post(servers[name], "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Tell me about rivers."}],
            "max_tokens": 10}).json()
        message = answer["choices"][0]["message"]
        assert message[field] and message["content"]
        assert answer["usage"]["completion_tokens"] == 10
        assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": 6}
        count = httpx.post(servers[name] + "/tokenize",
                           json={"prompt": message[field], "add_special_tokens": False})
        assert count.json()["count"] == 6
        # all reasoning: no content
        answer = _post(servers[name], "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).json()
        assert answer["choices"][0]["message"]["content"] is None
        assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": 4}


def test_completions_have_no_reasoning(servers):
    response = _post(servers["content"], "/v1/completions", {
        "prompt": "hello", "max_tokens": 8, "stream": True,
        "stream_options": {"include_usage": True}})
    events = _events(response)
    assert all("reasoning_content" not in c and "reasoning" not in c
               for e in events for c in e["choices"])
    assert sum(bool(c["text"]) for e in events for c in e["choices"]) == 8
    assert events[-1]["usage"]["completion_tokens"] == 8
    assert "completion_tokens_details" not in events[-1]["usage"]
    whole = _post(servers["content"], "/v1/completions", {"prompt": "hi", "max_tokens": 3})
    assert "completion_tokens_details" not in whole.json()["usage"]


def test_reasoning_off_sends_no_reasoning(servers):
    response = _post(servers["off"], "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True,
        "stream_options": {"include_usage": True}})
    events = _events(response)
    assert all(set(c["delta"]) <= {"role", "content"} for e in events for c in e["choices"])
    assert "completion_tokens_details" not in events[-1]["usage"]


def test_the_generation_counter_counts_reasoning(servers):
    def generated() -> float:
        page = httpx.get(servers["content"] + "/metrics").text
        line = next(x for x in page.splitlines()
                    if x.startswith("vllm:generation_tokens_total"))
        return float(line.rsplit(" ", 1)[1])

    before = generated()
    _post(servers["content"], "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 12})
    assert generated() - before == 12


# --- measured by the client ---------------------------------------------------------------


def _window(base: str, **overrides):
    values = dict(window_id="run/arm/r0/code-c2", prompts=load_prompt_set("code"),
                  requests=4, warmup=1, concurrency=2, max_tokens=16, temperature=0.0,
                  drain_timeout_s=30.0, request_timeout_s=30.0)
    token_count = overrides.pop("token_count", "usage")
    values.update(overrides)
    result = measure_window(Target(base, "sim-model", token_count=token_count),
                            WindowSpec(**values))
    return [r for r in result.rows if not r["is_warmup"]], result


def test_the_client_keeps_reasoning_apart_from_the_output(servers, tmp_path):
    rows, result = _window(servers["content"])
    assert result.accounting["completed"] == 4
    for row in rows:
        assert row["status"] == "completed", row["error"]
        assert row["reasoning_tokens"] == 6
        assert row["output_tokens"] == row["usage_output_tokens"] == 16
        # one token per step without speculation: each event is one token, so the content
        # tokens are the content events, and usage counted reasoning + content
        assert row["reasoning_chunks"] == 6 and row["chunks"] == 10
        assert row["output_tokens"] == row["reasoning_tokens"] + row["chunks"]
        assert len(row["content_event_ns"]) == row["chunks"]
        assert (row["t_submit_ns"] < row["t_first_reasoning_ns"]
                <= row["t_last_reasoning_ns"] <= row["t_first_ns"] <= row["t_last_ns"])
        assert row["t_first_reasoning_ns"] < row["t_first_ns"]
    table = requests_table(result.rows)
    path = tmp_path / "requests.parquet"
    pq.write_table(table, path)
    back = pq.read_table(path)
    assert back.schema.equals(REQUEST_SCHEMA)
    for name in REASONING_COLUMNS:
        assert str(back.schema.field(name).type) == "int64"
        assert None not in back.column(name).to_pylist()
    assert back.column("reasoning_tokens").to_pylist() == [6] * 5


def test_speculative_steps_cross_into_the_content(servers):
    """Steps of several tokens: one may hold the last reasoning tokens and the first content
    ones; the logprobs count every token, reasoning included, as usage does."""
    rows, _ = _window(servers["reasoning"], token_count="logprobs")
    for row in rows:
        assert row["status"] == "completed", row["error"]
        assert row["token_source"] == "logprobs"
        assert row["output_tokens"] == row["usage_output_tokens"] == 16
        assert row["reasoning_tokens"] == 6
        assert 0 < row["reasoning_chunks"] <= 6 and 0 < row["chunks"] <= 10
        assert row["t_first_reasoning_ns"] < row["t_first_ns"]
        assert row["t_last_reasoning_ns"] <= row["t_first_ns"]


def test_the_server_tokenizer_counts_the_reasoning_too(servers):
    rows, result = _window(servers["content"], token_count="server_tokenizer",
                           calibration_requests=2)
    assert all(r["output_tokens"] == r["usage_output_tokens"] == 16 for r in rows)
    assert result.accounting["calibration_rel_error"] == 0.0


def test_fewer_max_tokens_than_reasoning_leave_no_content(servers):
    rows, _ = _window(servers["content"], max_tokens=4, requests=2, warmup=0)
    for row in rows:
        assert row["status"] == "completed" and row["finish_reason"] == "length"
        assert (row["reasoning_tokens"], row["output_tokens"], row["chunks"]) == (4, 4, 0)
        assert row["t_first_ns"] is None and row["t_first_reasoning_ns"] is not None


def test_without_reasoning_the_new_fields_are_empty(servers):
    rows, result = _window(servers["off"])
    assert all(r["status"] == "completed" for r in rows)
    for row in rows:
        assert row["reasoning_tokens"] is None and row["reasoning_chunks"] == 0
        assert row["t_first_reasoning_ns"] is None and row["t_last_reasoning_ns"] is None
        assert row["output_tokens"] == 16 and row["chunks"] == 16
    table = requests_table(result.rows)
    assert set(REASONING_COLUMNS) <= set(table.column_names)
    assert table.column("reasoning_chunks").to_pylist() == [0] * 5
    assert table.column("t_first_reasoning_ns").null_count == 5
