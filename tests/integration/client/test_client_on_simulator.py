"""The measurement client against the real simulator process: long inputs, cold vs warm
prompts and speculative chunks, as a real server would be measured."""

from __future__ import annotations

import pytest

from benchledger.client import Target, WindowSpec, measure_window
from benchledger.prompts import load_prompt_set

pytestmark = pytest.mark.integration


def window(base: str, **overrides):
    values = dict(window_id="run/arm/r0/prose-c1", prompts=load_prompt_set("prose"),
                  requests=3, warmup=1, concurrency=1, max_tokens=16, temperature=0.0,
                  drain_timeout_s=60.0, request_timeout_s=60.0)
    values.update(overrides)
    result = measure_window(Target(base, "sim-model"), WindowSpec(**values))
    return [r for r in result.rows if not r["is_warmup"]], result.accounting


def test_long_inputs_reach_the_asked_length_and_cold_ones_skip_the_cache(simulator_factory):
    base = simulator_factory()
    cold, _ = window(base, input_tokens=8000, prompt_cache="cold")
    warm, _ = window(base, input_tokens=8000, prompt_cache="warm")
    assert all(8000 <= r["prompt_tokens"] <= 8100 for r in cold + warm)
    assert [r["cached_tokens"] for r in cold] == [0, 0, 0]
    assert all(r["cached_tokens"] > 7000 for r in warm)  # the filler prefix was reused
    ttft = [(r["t_first_ns"] - r["t_submit_ns"]) / 1e9 for r in cold + warm]
    assert min(ttft[:3]) > 2 * max(ttft[3:])  # prefill of uncached tokens costs time


def test_speculative_chunks_carry_several_tokens(simulator_factory):
    base = simulator_factory("--speculative")
    rows, acc = window(base, prompts=load_prompt_set("code"), max_tokens=64)
    assert acc["completed"] == 3
    assert all(r["output_tokens"] == 64 and r["chunks"] < 40 for r in rows)
