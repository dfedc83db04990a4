"""The measurement client: the only code that speaks HTTP to a model server under test.

It streams OpenAI-compatible completions (vLLM, SGLang, llama.cpp's server, the built-in
simulator: one code path for all) and records one raw row per request. It never counts
chunks as tokens (docs/protocol.md, trap T1): output tokens come from the usage the server
reports for that request, chunks are counted separately, and a request without usage is
recorded with token_source = 'missing' instead of being guessed.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from httpx_sse import aconnect_sse

from benchledger.prompts import Prompt, cold_prefix, shape_prompt


@dataclass(frozen=True)
class Target:
    """Where and what to measure."""

    base_url: str
    model: str
    endpoint: str = "chat"  # "chat" -> /v1/chat/completions, "completions" -> /v1/completions
    # Sent as `Authorization: Bearer <api_key>`; kept out of repr, rows, errors and logs.
    api_key: str | None = field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def redact(text: str | None, secret: str | None) -> str | None:
    """`text` with every occurrence of `secret` replaced (a server may echo the key back)."""
    if text is None or not secret:
        return text
    return text.replace(secret, "<redacted>")


@dataclass(frozen=True)
class WindowSpec:
    """One measurement window: warm-up, then `requests` measured requests."""

    window_id: str
    prompts: list[Prompt]
    requests: int
    warmup: int
    concurrency: int
    max_tokens: int
    temperature: float
    drain_timeout_s: float
    request_timeout_s: float
    arrival: str = "closed"  # closed | poisson (open loop, capped at `concurrency`)
    rate_rps: float | None = None  # poisson: the requested arrival rate
    prompt_cache: str = "warm"  # cold: a unique seeded prefix on every prompt
    input_tokens: int | None = None  # filler words in front of each prompt (long inputs)
    seed: int = 0


@dataclass
class RequestRecord:
    """A request as it happens; becomes one raw row whatever its outcome."""

    request_id: str
    window_id: str
    seq: int
    is_warmup: bool
    prompt: Prompt
    max_tokens: int
    temperature: float
    prompt_prefix: str | None = None
    status: str = "unresolved"  # until the stream ends, the outcome is unknown
    http_status: int | None = None
    error: str | None = None
    usage: dict | None = None
    chunks: int = 0
    finish_reason: str | None = None
    t_submit_ns: int = 0
    t_done_ns: int | None = None
    content_event_ns: list[int] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.status = "failed"
        self.error = message[:2000]

    def row(self) -> dict:
        usage = self.usage or {}
        output_tokens = usage.get("completion_tokens")
        has_usage = isinstance(output_tokens, int)
        details = usage.get("prompt_tokens_details") or {}
        events = self.content_event_ns
        return {
            "request_id": self.request_id,
            "window_id": self.window_id,
            "seq": self.seq,
            "is_warmup": self.is_warmup,
            "status": self.status,
            "http_status": self.http_status,
            "error": self.error,
            "prompt_id": self.prompt.id,
            "prompt_sha256": self.prompt.sha256,
            "prompt_prefix": self.prompt_prefix,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "prompt_tokens": usage.get("prompt_tokens") if has_usage else None,
            "output_tokens": output_tokens if has_usage else None,
            "cached_tokens": details.get("cached_tokens") if has_usage else None,
            "token_source": "usage" if has_usage else "missing",
            "chunks": self.chunks,
            "finish_reason": self.finish_reason,
            "t_submit_ns": self.t_submit_ns,
            "t_first_ns": events[0] if events else None,
            "t_last_ns": events[-1] if events else None,
            "t_done_ns": self.t_done_ns,
            "content_event_ns": list(events),
        }


@dataclass
class WindowResult:
    rows: list[dict]
    accounting: dict


def request_body(target: Target, record: RequestRecord) -> tuple[str, dict]:
    """The OpenAI-compatible request: streamed, asking for per-request usage."""
    body = {
        "model": target.model,
        "max_tokens": record.max_tokens,
        "temperature": record.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if target.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": record.prompt.text}]
        return "/v1/chat/completions", body
    body["prompt"] = record.prompt.text
    return "/v1/completions", body


def _content_of(choice: dict, endpoint: str) -> str | None:
    if endpoint == "chat":
        return (choice.get("delta") or {}).get("content")
    return choice.get("text")


async def _stream_one(http: httpx.AsyncClient, target: Target, record: RequestRecord) -> None:
    """Send one request and fill `record` as events arrive (it may be cancelled midway)."""
    path, body = request_body(target, record)
    saw_done = False
    record.t_submit_ns = time.perf_counter_ns()
    try:
        async with aconnect_sse(http, "POST", target.base_url.rstrip("/") + path,
                                json=body) as source:
            response = source.response
            record.http_status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                record.fail(f"HTTP {response.status_code}: {text.strip()[:500]}")
                return
            async for event in source.aiter_sse():
                now = time.perf_counter_ns()
                if event.data.strip() == "[DONE]":
                    saw_done = True
                    break
                payload = json.loads(event.data)
                if payload.get("error"):
                    record.fail(f"error event: {json.dumps(payload['error'])[:500]}")
                    return
                if payload.get("usage"):
                    record.usage = payload["usage"]
                for choice in payload.get("choices") or []:
                    if _content_of(choice, target.endpoint):
                        record.chunks += 1
                        record.content_event_ns.append(now)
                    if choice.get("finish_reason"):
                        record.finish_reason = choice["finish_reason"]
    except (httpx.HTTPError, json.JSONDecodeError, ValueError) as exc:
        record.fail(f"{type(exc).__name__}: {exc}")
        return
    finally:
        record.t_done_ns = time.perf_counter_ns()
    if saw_done or record.finish_reason:
        record.status = "completed"
    else:
        record.fail("stream ended without [DONE] or a finish_reason")


def poisson_offsets(count: int, rate_rps: float, seed: int) -> list[float]:
    """Seeded open-loop arrival times (seconds from the first): exponential gaps."""
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for i in range(count):
        if i:
            t += rng.expovariate(rate_rps)
        offsets.append(t)
    return offsets


async def _drive(http: httpx.AsyncClient, target: Target, records: list[RequestRecord],
                 concurrency: int, drain_timeout_s: float,
                 offsets: list[float] | None = None) -> int | None:
    """Submit every record, then drain; returns the drain deadline if it was hit.

    Closed loop (offsets None): a new request as soon as fewer than `concurrency` are
    outstanding. Open loop: each request at its scheduled offset, still capped at
    `concurrency` outstanding (a late submission shows in the achieved rate). After the
    last submission the window waits at most `drain_timeout_s`; requests still running
    then are cancelled and stay `unresolved` rows (docs/protocol.md, trap T14).
    """
    in_flight: dict[asyncio.Task, RequestRecord] = {}
    start = time.perf_counter()
    for i, record in enumerate(records):
        while len(in_flight) >= concurrency:
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                in_flight.pop(task)
        if offsets is not None and (delay := start + offsets[i] - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        in_flight[asyncio.create_task(_stream_one(http, target, record))] = record
    deadline_ns = time.perf_counter_ns() + int(drain_timeout_s * 1e9)
    if not in_flight:
        return None
    _, pending = await asyncio.wait(in_flight, timeout=drain_timeout_s)
    if not pending:
        return None
    for task in pending:
        task.cancel()
        in_flight[task].error = f"still running at the drain deadline ({drain_timeout_s:g} s)"
    await asyncio.gather(*pending, return_exceptions=True)
    for task in pending:
        # Cancellation must not turn it into a failure: its outcome is unknown.
        in_flight[task].status = "unresolved"
        in_flight[task].t_done_ns = None
    return deadline_ns


def _records(spec: WindowSpec, is_warmup: bool, count: int) -> list[RequestRecord]:
    kind = "w" if is_warmup else "m"
    records = []
    for i in range(count):
        request_id = f"{spec.window_id}/{kind}{i:04d}"
        prefix = cold_prefix(spec.seed, request_id) if spec.prompt_cache == "cold" else None
        records.append(RequestRecord(
            request_id=request_id,
            window_id=spec.window_id,
            seq=i,
            is_warmup=is_warmup,
            prompt=shape_prompt(spec.prompts[i % len(spec.prompts)], prefix, spec.input_tokens),
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            prompt_prefix=prefix,
        ))
    return records


def _achieved_rate(measured: list[RequestRecord]) -> float | None:
    """Submissions per second over the submission span (n - 1 gaps)."""
    submits = sorted(r.t_submit_ns for r in measured if r.t_submit_ns)
    if len(submits) < 2 or submits[-1] == submits[0]:
        return None
    return (len(submits) - 1) / ((submits[-1] - submits[0]) / 1e9)


def _accounting(spec: WindowSpec, measured: list[RequestRecord], warmup: list[RequestRecord],
                anchor: tuple[int, int], drain_deadline_ns: int | None) -> dict:
    """The window's bookkeeping (docs/protocol.md, definitions): counts, drain status,
    denominator."""
    counts = {s: sum(r.status == s for r in measured)
              for s in ("completed", "failed", "unresolved")}
    wall_ns, perf_ns = anchor
    start_ns = min((r.t_submit_ns for r in measured), default=perf_ns)
    finished = [r.t_done_ns for r in measured if r.status != "unresolved" and r.t_done_ns]
    end_ns = drain_deadline_ns if counts["unresolved"] else max(finished, default=start_ns)
    return {
        "window_id": spec.window_id,
        "concurrency": spec.concurrency,
        "submitted": len(measured),
        **counts,
        "warmup_submitted": len(warmup),
        "warmup_completed": sum(r.status == "completed" for r in warmup),
        "drain_status": "complete" if counts["unresolved"] == 0 else "incomplete",
        "drain_timeout_s": spec.drain_timeout_s,
        "anchor_wall_ns": wall_ns,
        "anchor_perf_ns": perf_ns,
        "window_start_ns": start_ns,
        "window_end_ns": end_ns,
        "window_start_wall_ns": wall_ns + (start_ns - perf_ns),
        "window_end_wall_ns": wall_ns + (end_ns - perf_ns),
        "elapsed_s": (end_ns - start_ns) / 1e9,
        "denominator": ("first measured submission to the drain deadline"
                        if counts["unresolved"] else
                        "first measured submission to the last completion"),
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "arrival": spec.arrival,
        "requested_rate_rps": spec.rate_rps,
        "achieved_rate_rps": _achieved_rate(measured),
        "prompt_cache": spec.prompt_cache,
        "input_tokens_target": spec.input_tokens,
        "seed": spec.seed,
    }


async def measure_window_async(target: Target, spec: WindowSpec,
                               on_start: Callable[[], None] | None = None,
                               on_stop: Callable[[], None] | None = None) -> WindowResult:
    """Warm-up, then the measured window; on_start/on_stop bracket only the measured part
    (counter scrapes, log slices and clock sampling must not include warm-up)."""
    warmup = _records(spec, True, spec.warmup)
    measured = _records(spec, False, spec.requests)
    timeout = httpx.Timeout(spec.request_timeout_s, connect=30.0)
    limits = httpx.Limits(max_connections=spec.concurrency + 4)
    async with httpx.AsyncClient(timeout=timeout, limits=limits,
                                 headers=target.headers()) as http:
        # Warm-up runs first and outside the window; its rows are kept, flagged is_warmup.
        await _drive(http, target, warmup, spec.concurrency, spec.request_timeout_s)
        offsets = (poisson_offsets(len(measured), spec.rate_rps, spec.seed)
                   if spec.arrival == "poisson" else None)
        if on_start:
            await asyncio.to_thread(on_start)
        anchor = (time.time_ns(), time.perf_counter_ns())
        deadline = await _drive(http, target, measured, spec.concurrency,
                                spec.drain_timeout_s, offsets)
        if on_stop:
            await asyncio.to_thread(on_stop)
    rows = [r.row() for r in warmup + measured]
    for row in rows:
        row["error"] = redact(row["error"], target.api_key)
    return WindowResult(rows=rows, accounting=_accounting(spec, measured, warmup, anchor, deadline))


def measure_window(target: Target, spec: WindowSpec,
                   on_start: Callable[[], None] | None = None,
                   on_stop: Callable[[], None] | None = None) -> WindowResult:
    """Run one window to the end (synchronous entry point for tasks and tests)."""
    return asyncio.run(measure_window_async(target, spec, on_start, on_stop))
