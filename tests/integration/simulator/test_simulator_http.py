"""The simulator as a real process on 127.0.0.1, checked with raw httpx and hand parsing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from benchledger.simulator.engine import SimConfig
from benchledger.simulator.tokenizer import count_tokens

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
CODE_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


@dataclass
class Sim:
    proc: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp_path: Path, *flags: str) -> Iterator[Sim]:
    """Start the simulator subprocess, wait for /health, and always kill it afterwards."""
    port = _free_port()
    log_path = tmp_path / f"sim-{port}.log"
    with open(log_path, "w") as log:
        proc = _spawn(port, flags, log)
    sim = Sim(proc, f"http://127.0.0.1:{port}", log_path)
    try:
        _wait_healthy(sim)
        yield sim
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _spawn(port: int, flags: tuple[str, ...], output) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "benchledger.simulator", "--port", str(port), *flags],
        stdout=output, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)


def _wait_healthy(sim: Sim, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert sim.proc.poll() is None, f"simulator exited early:\n{sim.log()}"
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(sim.url + "/health", timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise AssertionError(f"simulator not healthy in {timeout}s:\n{sim.log()}")


@pytest.fixture(scope="module")
def spec_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    yield from _start(tmp_path_factory.mktemp("spec"), "--speculative", "--step-ms", "1",
                      "--seed", "3", "--log-interval-s", "0.2")


@pytest.fixture
def no_usage_sim(tmp_path: Path) -> Iterator[Sim]:
    yield from _start(tmp_path, "--no-usage", "--step-ms", "1")


@pytest.fixture
def stall_sim(tmp_path: Path) -> Iterator[Sim]:
    yield from _start(tmp_path, "--stall-every", "1", "--stall-s", "30", "--step-ms", "1",
                      "--prefill-tok-s", "1000000")


def _chat_body(prompt: str, max_tokens: int, **extra) -> dict:
    return {"model": "sim-model", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, **extra}


def _stream(url: str, body: dict) -> list[str]:
    """POST with stream=true and return the raw `data:` payloads in order."""
    payloads = []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        buffer = ""
        for text in response.iter_text():
            buffer += text
            while "\n\n" in buffer:
                event, buffer = buffer.split("\n\n", 1)
                assert event.startswith("data: "), event
                payloads.append(event[len("data: "):])
    assert buffer == ""
    return payloads


def _sse_events(texts: Iterator[str]) -> Iterator[dict]:
    """Parse SSE text as it arrives, yielding each JSON event as soon as it is complete."""
    buffer = ""
    for text in texts:
        buffer += text
        while "\n\n" in buffer:
            event, buffer = buffer.split("\n\n", 1)
            yield json.loads(event.removeprefix("data: "))


def _metrics(sim: Sim) -> dict[str, float]:
    """Samples of /metrics keyed by `name{labels}`; comment lines are checked for types."""
    text = httpx.get(sim.url + "/metrics").text
    samples = {}
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            assert line.split()[-1] in ("counter", "gauge")
        elif line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return samples


def _metric(samples: dict[str, float], name: str, **labels: str) -> float:
    label_text = ",".join(f'{k}="{v}"' for k, v in sorted({**labels,
                                                            "model_name": "sim-model"}.items()))
    return samples[f"{name}{{{label_text}}}"]


def test_streamed_chat_usage_matches_content_and_metrics(spec_sim: Sim) -> None:
    before = _metrics(spec_sim)
    payloads = _stream(spec_sim.url + "/v1/chat/completions",
                       _chat_body(CODE_PROMPT, 96, stream_options={"include_usage": True}))
    assert payloads[-1] == "[DONE]"
    events = [json.loads(p) for p in payloads[:-1]]
    assert events[0]["object"] == "chat.completion.chunk"
    assert events[0]["id"].startswith("chatcmpl-")
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage_event = events[-1]
    assert usage_event["choices"] == []
    content = [e["choices"][0] for e in events[1:-1]]
    assert all(c["delta"]["content"] for c in content)
    assert [c["finish_reason"] for c in content] == [None] * (len(content) - 1) + ["length"]

    usage = usage_event["usage"]
    completion = usage["completion_tokens"]
    assert completion == sum(count_tokens(c["delta"]["content"]) for c in content) == 96
    assert usage["total_tokens"] == usage["prompt_tokens"] + completion
    assert len(content) < completion  # speculation: a chunk carries several tokens

    after = _metrics(spec_sim)
    delta = {name: _metric(after, name) - _metric(before, name) for name in (
        "vllm:generation_tokens_total", "vllm:prompt_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total")}
    assert delta["vllm:generation_tokens_total"] == completion
    assert delta["vllm:prompt_tokens_total"] == usage["prompt_tokens"]
    assert delta["vllm:spec_decode_num_accepted_tokens_total"] == completion - len(content)
    assert delta["vllm:spec_decode_num_drafts_total"] == len(content) - 1
    assert _metric(after, "vllm:request_success_total", finished_reason="length") == \
        _metric(before, "vllm:request_success_total", finished_reason="length") + 1
    assert _metric(after, "vllm:num_requests_running") == 0
    assert _metric(after, "vllm:num_requests_waiting") == 0


def test_completions_stream_and_non_stream_agree(spec_sim: Sim) -> None:
    url = spec_sim.url + "/v1/completions"
    body = {"model": "sim-model", "prompt": "Tell me about rivers.", "max_tokens": 20,
            "temperature": 0}
    payloads = _stream(url, body)
    events = [json.loads(p) for p in payloads[:-1]]
    assert payloads[-1] == "[DONE]"
    assert all(e["object"] == "text_completion" and e["usage"] is None for e in events)
    streamed = "".join(e["choices"][0]["text"] for e in events)

    response = httpx.post(url, json=body).json()
    assert response["choices"][0]["text"] == streamed
    assert response["choices"][0]["finish_reason"] == "length"
    assert response["usage"]["completion_tokens"] == count_tokens(streamed) == 20


def test_errors_use_openai_error_json(spec_sim: Sim) -> None:
    unknown = httpx.post(spec_sim.url + "/v1/chat/completions",
                         json=_chat_body("hi", 4) | {"model": "other"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "NotFoundError"
    assert unknown.json()["error"]["code"] == 404
    for bad in (b"{not json", b'{"messages": "hi"}', b'{"prompt": "x", "max_tokens": 0}'):
        path = "/v1/completions" if b"prompt" in bad else "/v1/chat/completions"
        response = httpx.post(spec_sim.url + path, content=bad)
        assert response.status_code == 400, bad
        assert response.json()["error"]["code"] == 400


def test_models_version_and_logs(spec_sim: Sim) -> None:
    models = httpx.get(spec_sim.url + "/v1/models").json()
    assert models["data"][0]["id"] == "sim-model"
    assert models["data"][0]["owned_by"] == "benchledger-sim"
    assert models["data"][0]["max_model_len"] == SimConfig().max_model_len  # the default
    assert httpx.get(spec_sim.url + "/version").json() == {"version": "benchledger-sim 0.1.0"}
    httpx.post(spec_sim.url + "/v1/completions", json={"prompt": "def f(x):", "max_tokens": 60,
                                                       "temperature": 0})
    deadline = time.monotonic() + 3
    while "SpecDecoding metrics: Mean acceptance length" not in spec_sim.log():
        assert time.monotonic() < deadline, spec_sim.log()
        time.sleep(0.05)
    log = spec_sim.log()
    assert "speed_factor=" in log and '"speculative": true' in log
    assert "Engine 000: Avg prompt throughput:" in log


def test_client_disconnect_aborts_the_request(spec_sim: Sim) -> None:
    before = _metrics(spec_sim)  # the module's server: other tests' requests count too
    body = _chat_body("Tell me a long story.", 4000) | {"stream": True}
    with httpx.stream("POST", spec_sim.url + "/v1/chat/completions", json=body) as response:
        next(response.iter_text())
    deadline = time.monotonic() + 3
    while _metric(_metrics(spec_sim), "vllm:num_requests_running") != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    samples = _metrics(spec_sim)
    aborts = [_metric(m, "vllm:request_success_total", finished_reason="abort")
              for m in (before, samples)]
    assert aborts[1] == aborts[0] + 1  # this request, and only it, was aborted
    assert httpx.get(spec_sim.url + "/health").status_code == 200


def test_no_usage_server_never_reports_usage_and_sigterm_exits_cleanly(no_usage_sim: Sim) -> None:
    url = no_usage_sim.url + "/v1/chat/completions"
    payloads = _stream(url, _chat_body("hello there", 10, stream_options={"include_usage": True}))
    assert payloads[-1] == "[DONE]"
    events = [json.loads(p) for p in payloads[:-1]]
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert count_tokens(streamed) == 10  # the whole answer came, only its usage is missing
    assert all("usage" not in e for e in events)
    assert "usage" not in httpx.post(url, json=_chat_body("hello there", 10)).json()
    samples = _metrics(no_usage_sim)
    assert _metric(samples, "vllm:spec_decode_num_drafts_total") == 0  # not speculative

    # SIGTERM with a stream in flight: the stream is cut (no [DONE]) and the exit is clean
    long_body = _chat_body("Tell me a long story.", 4000) | {"stream": True}
    with httpx.stream("POST", url, json=long_body, timeout=10) as response:
        chunks = response.iter_text()
        next(chunks)
        no_usage_sim.proc.send_signal(signal.SIGTERM)
        rest = "".join(chunks)
    assert "[DONE]" not in rest
    assert no_usage_sim.proc.wait(timeout=5) == 0
    assert "Traceback" not in no_usage_sim.log()


@pytest.mark.parametrize(("flags", "path"), [((), "/health"),
                                             (("--no-health",), "/v1/models")])
def test_startup_delay_reports_503_until_ready(tmp_path: Path, flags, path) -> None:
    """Loading answers 503 at the path readiness is probed on: /health, or /v1/models for a
    server without /health (which must not look ready before the model is)."""
    port = _free_port()
    proc = _spawn(port, ("--startup-delay-s", "1.5", *flags), subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}{path}"
        statuses = []
        deadline = time.monotonic() + 10
        while 200 not in statuses and time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                statuses.append(httpx.get(url, timeout=1).status_code)
            time.sleep(0.05)
        assert 503 in statuses and statuses[-1] == 200
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_repeated_chat_prompt_hits_the_prefix_cache(spec_sim: Sim) -> None:
    url = spec_sim.url + "/v1/chat/completions"
    prompt = ("Describe, in some detail, how a lighthouse keeper spends a long winter night "
              "on a small rocky island far from the coast, and what the keeper hears.")
    before = _metrics(spec_sim)
    usages = []
    for _ in range(2):
        payloads = _stream(url, _chat_body(prompt, 8, stream_options={"include_usage": True}))
        usages.append(json.loads(payloads[-2])["usage"])
    usages.append(httpx.post(url, json=_chat_body(prompt, 8)).json()["usage"])
    prompt_tokens = usages[0]["prompt_tokens"]
    assert prompt_tokens > 32
    assert usages[0]["prompt_tokens_details"] == {"cached_tokens": 0}
    cached = usages[1]["prompt_tokens_details"]["cached_tokens"]
    assert cached == (prompt_tokens - 1) // 16 * 16  # full blocks, never the last token
    assert usages[2]["prompt_tokens_details"] == {"cached_tokens": cached}  # non-streaming

    after = _metrics(spec_sim)
    queries = (_metric(after, "vllm:prefix_cache_queries_total")
               - _metric(before, "vllm:prefix_cache_queries_total"))
    hits = (_metric(after, "vllm:prefix_cache_hits_total")
            - _metric(before, "vllm:prefix_cache_hits_total"))
    assert (queries, hits) == (3 * prompt_tokens, 2 * cached)
    deadline = time.monotonic() + 3
    while not re.search(r"Prefix cache hit rate: (?!0\.0%)[0-9.]+%", spec_sim.log()):
        assert time.monotonic() < deadline, spec_sim.log()
        time.sleep(0.05)


def test_stalled_request_hangs_after_its_first_chunk(stall_sim: Sim) -> None:
    # a ~24K-token prompt fits, and its repeat is served from the prefix cache
    completions = stall_sim.url + "/v1/completions"
    long_body = {"prompt": " ".join(["lorem"] * 24_000), "max_tokens": 1}  # 1 token: no stall
    usages = [httpx.post(completions, json=long_body, timeout=10).json()["usage"]
              for _ in range(2)]
    assert [u["prompt_tokens"] for u in usages] == [24_000, 24_000]
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in usages] == [0, 23_984]

    before = _metrics(stall_sim)
    body = _chat_body("Tell me a long story.", 50) | {"stream": True}
    with httpx.stream("POST", stall_sim.url + "/v1/chat/completions", json=body,
                      timeout=httpx.Timeout(10, read=1.0)) as response:
        events = _sse_events(response.iter_text())
        # the role event and one content event ...
        assert list(next(events)["choices"][0]["delta"]) == ["role", "content"]
        first = next(events)["choices"][0]
        assert list(first["delta"]) == ["content"] and first["finish_reason"] is None
        # ... while the request stays running and the server keeps answering ...
        assert httpx.get(stall_sim.url + "/health", timeout=1).status_code == 200
        assert _metric(_metrics(stall_sim), "vllm:num_requests_running") == 1
        # ... and then nothing for the read timeout
        with pytest.raises(httpx.ReadTimeout):
            next(events)
    # leaving the block disconnects: the stalled request is aborted as usual
    deadline = time.monotonic() + 3
    while _metric(_metrics(stall_sim), "vllm:num_requests_running") != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    aborts = [_metric(m, "vllm:request_success_total", finished_reason="abort")
              for m in (before, _metrics(stall_sim))]
    assert aborts[1] == aborts[0] + 1


# --- pretend GPU clocks, miscounting metrics, fractional log interval ---------------------

NO_THROTTLE = "0x0000000000000000"
ENGINE_LINE = re.compile(
    r"\[loggers\.py:123\] Engine 000: Avg prompt throughput: \d+\.\d tokens/s, "
    r"Avg generation throughput: \d+\.\d tokens/s, Running: \d+ reqs, Waiting: \d+ reqs, "
    r"GPU KV cache usage: \d+\.\d%, Prefix cache hit rate: \d+\.\d%$", re.MULTILINE)
SPEC_LINE = re.compile(
    r"\[metrics\.py:97\] SpecDecoding metrics: Mean acceptance length: \d+\.\d\d, "
    r"Accepted throughput: \d+\.\d\d tokens/s, Drafted throughput: \d+\.\d\d tokens/s, "
    r"Accepted: \d+ tokens, Drafted: \d+ tokens, "
    r"Per-position acceptance rate: \d\.\d{3}, \d\.\d{3}, \d\.\d{3}, "
    r"Avg Draft acceptance rate: \d+\.\d%$", re.MULTILINE)


@pytest.fixture(scope="module")
def gpu_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    yield from _start(tmp_path_factory.mktemp("gpu"), "--speculative", "--step-ms", "1",
                      "--num-gpus", "2", "--metrics-generation-scale", "1.1",
                      "--log-interval-s", "0.25")


@pytest.fixture
def low_clock_sim(tmp_path: Path) -> Iterator[Sim]:
    yield from _start(tmp_path, "--low-clock", "--num-gpus", "2", "--step-ms", "1",
                      "--prefill-tok-s", "1000000")


def _clocks(sim: Sim) -> list[dict]:
    return httpx.get(sim.url + "/clocks").json()["gpus"]


def _gpu(index: int, clock: int, pstate: str, utilization: int) -> dict:
    return {"index": index, "sm_clock_mhz": clock, "max_sm_clock_mhz": 2520, "pstate": pstate,
            "throttle_reasons": NO_THROTTLE, "utilization_gpu": utilization}


def _wait_idle(sim: Sim) -> None:
    deadline = time.monotonic() + 3
    while _metric(_metrics(sim), "vllm:num_requests_running") != 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _clocks_during_a_stream(sim: Sim) -> list[dict]:
    """Sample /clocks while a long stream is open (then disconnect, aborting it)."""
    body = _chat_body("Tell me a long story.", 4000) | {"stream": True}
    with httpx.stream("POST", sim.url + "/v1/chat/completions", json=body,
                      timeout=10) as response:
        events = _sse_events(response.iter_text())  # keep it: closing it disconnects
        next(events)
        gpus = _clocks(sim)
        assert _metric(_metrics(sim), "vllm:num_requests_running") == 1
    _wait_idle(sim)
    return gpus


def test_clocks_are_idle_when_idle_and_at_load_clock_during_a_stream(gpu_sim: Sim) -> None:
    assert _clocks(gpu_sim) == [_gpu(0, 210, "P8", 0), _gpu(1, 210, "P8", 0)]
    assert _clocks_during_a_stream(gpu_sim) == [_gpu(0, 2400, "P0", 100),
                                                _gpu(1, 2400, "P0", 100)]
    assert _clocks(gpu_sim) == [_gpu(0, 210, "P8", 0), _gpu(1, 210, "P8", 0)]
    assert "gpu clocks: num_gpus=2 sm_clock_mhz=2400 max_sm_clock_mhz=2520 " \
           "idle_sm_clock_mhz=210 low_clock=off" in gpu_sim.log()


def test_the_dcgm_page_follows_the_load(low_clock_sim: Sim) -> None:
    """GET /dcgm as dcgm-exporter prints it: idle clocks and power while idle, GPU 0 stuck
    at its low clock during a stream, and energy counters that grow, faster under load."""
    from benchledger.server.dcgm import parse_dcgm_page

    def dcgm() -> list[dict]:
        answer = httpx.get(low_clock_sim.url + "/dcgm")
        assert answer.status_code == 200
        return parse_dcgm_page(answer.text, "/dcgm")

    idle = dcgm()
    assert [(g["sm_clock_mhz"], g["power_w"]) for g in idle] == [(210.0, 60.0)] * 2
    body = _chat_body("Tell me a long story.", 4000) | {"stream": True}
    with httpx.stream("POST", low_clock_sim.url + "/v1/chat/completions", json=body,
                      timeout=10) as response:
        events = _sse_events(response.iter_text())
        next(events)
        time.sleep(0.5)
        busy = dcgm()
    _wait_idle(low_clock_sim)
    assert [g["sm_clock_mhz"] for g in busy] == [494.0, 2400.0]
    assert busy[0]["power_w"] < busy[1]["power_w"] == 450.0
    after = dcgm()
    for before, during, then in zip(idle, busy, after, strict=True):
        assert before["energy_j"] < during["energy_j"] <= then["energy_j"]
    # the stuck GPU 0 drew less than GPU 1 while the engine stepped
    assert after[1]["energy_j"] - idle[1]["energy_j"] > after[0]["energy_j"] - idle[0]["energy_j"]


def test_default_server_lists_one_gpu(spec_sim: Sim) -> None:
    gpus = _clocks(spec_sim)
    assert [g["index"] for g in gpus] == [0]
    assert gpus[0]["max_sm_clock_mhz"] == 2520 and gpus[0]["throttle_reasons"] == NO_THROTTLE


def test_low_clock_gpu0_stays_low_under_load_without_a_reason(low_clock_sim: Sim) -> None:
    assert _clocks(low_clock_sim) == [_gpu(0, 210, "P8", 0), _gpu(1, 210, "P8", 0)]
    assert _clocks_during_a_stream(low_clock_sim) == [_gpu(0, 494, "P0", 100),
                                                      _gpu(1, 2400, "P0", 100)]
    assert "low_clock=on (GPU 0 at 494 MHz under load" in low_clock_sim.log()
    # and the engine is slower: 40 steps of ~1 ms each take ~4.9 ms
    start = time.monotonic()
    usage = httpx.post(low_clock_sim.url + "/v1/completions",
                       json={"prompt": "hi", "max_tokens": 40, "temperature": 0}).json()["usage"]
    assert usage["completion_tokens"] == 40
    assert time.monotonic() - start > 0.8 * 40 * 0.001 * 2400 / 494


def test_generation_scale_miscounts_the_counter_but_not_usage(gpu_sim: Sim) -> None:
    before = _metrics(gpu_sim)
    chat, completions = gpu_sim.url + "/v1/chat/completions", gpu_sim.url + "/v1/completions"
    payloads = _stream(chat, _chat_body(CODE_PROMPT, 40, stream_options={"include_usage": True}))
    events = [json.loads(p) for p in payloads[:-1]]
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    usages = [events[-1]["usage"]]
    assert usages[0]["completion_tokens"] == count_tokens(streamed) == 40
    usages.append(httpx.post(chat, json=_chat_body("Tell me about rivers.", 50)).json()["usage"])
    usages.append(httpx.post(completions, json={"prompt": "def f(x):", "max_tokens": 30,
                                                "temperature": 0}).json()["usage"])
    assert [u["completion_tokens"] for u in usages] == [40, 50, 30]  # usage stays exact
    after = _metrics(gpu_sim)
    delta = {name: _metric(after, name) - _metric(before, name)
             for name in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total")}
    assert abs(delta["vllm:generation_tokens_total"] - 1.1 * 120) <= 1  # 132, +-1 rounding
    assert delta["vllm:prompt_tokens_total"] == sum(u["prompt_tokens"] for u in usages)


def test_fractional_log_interval_gives_several_vllm_lines(gpu_sim: Sim) -> None:
    engine_before = len(ENGINE_LINE.findall(gpu_sim.log()))
    spec_before = len(SPEC_LINE.findall(gpu_sim.log()))
    body = _chat_body("Tell me a long story.", 4000) | {"stream": True}
    with httpx.stream("POST", gpu_sim.url + "/v1/chat/completions", json=body,
                      timeout=10) as response:
        start = time.monotonic()
        for _event in _sse_events(response.iter_text()):
            if time.monotonic() - start > 0.8:  # a 0.8 s window spans >= 3 ticks of 0.25 s
                break
    deadline = time.monotonic() + 1
    while len(ENGINE_LINE.findall(gpu_sim.log())) - engine_before < 3:
        assert time.monotonic() < deadline, gpu_sim.log()
        time.sleep(0.02)
    assert len(SPEC_LINE.findall(gpu_sim.log())) - spec_before >= 3
    _wait_idle(gpu_sim)
