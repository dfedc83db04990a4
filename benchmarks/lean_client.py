"""A lean streaming client: the yardstick benchmarks/client_capacity.py holds
benchledger.client against (the "60-line httpx client" of issue #10).

It does the least a benchmark client must: a closed loop of `concurrency` workers, one
streamed OpenAI chat request each at a time, a perf_counter_ns stamp per content event,
and the usage event kept. No SSE library (lines of the response, `data: ` prefix), no
per-request bookkeeping beyond that.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx


async def _one(http: httpx.AsyncClient, url: str, body: dict) -> tuple[int, list[int], dict]:
    t_submit = time.perf_counter_ns()
    events: list[int] = []
    usage: dict = {}
    async with http.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}")
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            now = time.perf_counter_ns()
            data = line[6:]
            if data == "[DONE]":
                break
            payload = json.loads(data)
            if payload.get("usage"):
                usage = payload["usage"]
            for choice in payload.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    events.append(now)
    return t_submit, events, usage


async def run(base_url: str, model: str, prompts: list[tuple[str, str]], concurrency: int,
              max_tokens: int) -> dict[str, tuple[int, list[int], dict]]:
    """Send every (key, text) prompt once, `concurrency` at a time; results by key."""
    url = base_url.rstrip("/") + "/v1/chat/completions"
    pending = iter(prompts)
    results: dict[str, tuple[int, list[int], dict]] = {}
    limits = httpx.Limits(max_connections=concurrency + 4)
    timeout = httpx.Timeout(600.0, connect=30.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:

        async def worker() -> None:
            for key, text in pending:  # one shared iterator: each prompt is sent once
                body = {"model": model, "messages": [{"role": "user", "content": text}],
                        "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                        "stream_options": {"include_usage": True}}
                results[key] = await _one(http, url, body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results
