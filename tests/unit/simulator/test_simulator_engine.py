"""Engine-only tests of the simulator (no HTTP; the step clock is replaced by a no-op)."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time

import pytest

from benchledger.simulator.clocks import clock_summary, gpu_clocks
from benchledger.simulator.engine import (
    CODE_VOCAB,
    PROSE_VOCAB,
    Chunk,
    Counters,
    Engine,
    SimConfig,
    SimRequest,
    is_code_prompt,
    speed_factor,
)
from benchledger.simulator.metrics import render_metrics
from benchledger.simulator.prefix_cache import block_hashes
from benchledger.simulator.protocol import (
    CHAT_TOKENS_FIXED,
    CHAT_TOKENS_PER_MESSAGE,
    ApiError,
    parse_chat,
    parse_completion,
    render_chat,
)
from benchledger.simulator.tokenizer import count_tokens, tokenize

CODE_PROMPTS = [
    "def fib(n):\n    # return the n-th Fibonacci number\n",
    "Write a Python function that merges two sorted lists.",
    "function add(a, b) { return a + b; }  // translate to Rust",
    "class Stack:\n    def push(self, item): ...\n    def pop(self): ...",
    "for (int i = 0; i < n; i++) { total += values[i]; }",
    "Implement binary search over a sorted array of integers.",
]
PROSE_PROMPTS = [
    "Tell me a short story about a lighthouse keeper.",
    "Describe the history of the city of Lyon in a few sentences.",
    "Why do leaves change colour in autumn?",
    "Summarise the plot of a novel about a long sea voyage.",
    "Write a letter to a friend about a walk in the mountains.",
    "What makes a good breakfast on a cold morning?",
]


async def _no_sleep(_seconds: float) -> None:
    await asyncio.sleep(0)


def _run(config: SimConfig, prompts: list[str], max_tokens: int = 64,
         temperature: float = 0.0, **submit_kw) -> tuple[Engine, list[list[Chunk]]]:
    """Run all prompts concurrently through one engine; return it and each request's chunks."""

    async def go() -> tuple[Engine, list[list[Chunk]]]:
        engine = Engine(config, sleep=_no_sleep, log=lambda *_: None)
        loop_task = asyncio.create_task(engine.run())
        requests = [engine.submit(p, max_tokens, temperature, **submit_kw) for p in prompts]

        async def collect(request):
            return [chunk async for chunk in request.chunks()]

        results = await asyncio.gather(*(collect(r) for r in requests))
        loop_task.cancel()
        return engine, list(results)

    return asyncio.run(go())


def _accept_rate(config: SimConfig, prompts: list[str]) -> float:
    engine, _ = _run(config, prompts, max_tokens=200)
    c = engine.counters
    return c.spec_decode_num_accepted_tokens_total / c.spec_decode_num_draft_tokens_total


SPEC = SimConfig(speculative=True)
PLAIN = SimConfig(speculative=False)


def test_tokenizer_round_trips_and_counts() -> None:
    text = "def f(x):\n    return x_1 + 42  # done!\n"
    assert "".join(tokenize(text)) == text
    assert tokenize("a  b") == ["a", "  b"]
    assert count_tokens("") == 0
    assert count_tokens("hello, world 12") == 4
    assert count_tokens("x_1 ") == 3  # word, digits, trailing whitespace


def test_vocabularies_are_single_tokens_that_never_merge() -> None:
    for vocab in (CODE_VOCAB, PROSE_VOCAB):
        for a, b in itertools.product(vocab, repeat=2):
            assert count_tokens(a) == 1
            assert count_tokens(a + b) == 2, (a, b)


def test_temperature_zero_is_deterministic_per_prompt() -> None:
    _, first = _run(SPEC, CODE_PROMPTS[:2])
    _, second = _run(SPEC, CODE_PROMPTS[:2])
    assert first == second
    assert first[0] != first[1]


def test_temperature_zero_text_is_prefix_stable_across_max_tokens() -> None:
    _, short = _run(PLAIN, PROSE_PROMPTS[:1], max_tokens=10)
    _, long = _run(PLAIN, PROSE_PROMPTS[:1], max_tokens=40)
    short_text = "".join(c.text for c in short[0])
    assert "".join(c.text for c in long[0]).startswith(short_text)


def test_positive_temperature_uses_fresh_randomness() -> None:
    _, first = _run(SPEC, PROSE_PROMPTS[:1], max_tokens=64, temperature=0.7)
    _, second = _run(SPEC, PROSE_PROMPTS[:1], max_tokens=64, temperature=0.7)
    assert [c.text for c in first[0]] != [c.text for c in second[0]]


def _texts(config: SimConfig, prompts: list[str], max_tokens: int = 48) -> list[str]:
    return ["".join(c.text for c in chunks) for chunks in _run(config, prompts, max_tokens)[1]]


def test_speculation_is_lossless_by_default_and_lossy_for_the_share_asked() -> None:
    """Issue #42: at temperature 0 speculation gives the text the model gives without it;
    with lossy_share, that share of the prompts (the same ones on every run and restart,
    whatever the seed) departs from a drawn token on, with the same token count."""
    prompts = [f"{p} (variant {i})" for i in range(40) for p in (CODE_PROMPTS[i % 6],)]
    plain = _texts(PLAIN, prompts)
    assert _texts(SPEC, prompts) == plain
    lossy = SimConfig(speculative=True, lossy_share=0.25)
    changed = _texts(lossy, prompts)
    assert _texts(SimConfig(speculative=True, lossy_share=0.25, seed=9), prompts) == changed
    assert _texts(SimConfig(speculative=False, lossy_share=0.25), prompts) == plain
    differ = [i for i, (a, b) in enumerate(zip(plain, changed, strict=True)) if a != b]
    assert 4 <= len(differ) <= 18, differ  # a quarter of 40, drawn per prompt
    for i in differ:
        a, b = tokenize(plain[i]), tokenize(changed[i])
        assert len(a) == len(b) == 48  # the same speed and counts: only the text moved
        first = next(k for k, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
        assert 1 <= first <= 32 + 1  # from the drawn position on (a token may repeat)


def test_speculation_delivers_several_tokens_per_step() -> None:
    _, spec = _run(SPEC, CODE_PROMPTS, max_tokens=100)
    _, plain = _run(PLAIN, CODE_PROMPTS, max_tokens=100)
    spec_sizes = [c.tokens for chunks in spec for c in chunks]
    assert max(spec_sizes) > 1
    assert statistics.mean(spec_sizes) > 1.5
    assert max(spec_sizes) <= 1 + SPEC.num_speculative_tokens
    assert all(c.tokens == 1 for chunks in plain for c in chunks)
    # the first chunk (end of the prefill step) is always a single token
    assert all(chunks[0].tokens == 1 for chunks in spec)


def test_acceptance_is_higher_on_code_than_prose() -> None:
    assert all(is_code_prompt(p) for p in CODE_PROMPTS)
    assert not any(is_code_prompt(p) for p in PROSE_PROMPTS)
    code, prose = _accept_rate(SPEC, CODE_PROMPTS), _accept_rate(SPEC, PROSE_PROMPTS)
    assert code > prose + 0.15


def test_generated_text_token_count_equals_reported_tokens() -> None:
    _, results = _run(SPEC, CODE_PROMPTS + PROSE_PROMPTS, max_tokens=77)
    for chunks in results:
        assert all(count_tokens(c.text) == c.tokens for c in chunks)
        assert count_tokens("".join(c.text for c in chunks)) == sum(c.tokens for c in chunks)


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 37])
@pytest.mark.parametrize("config", [SPEC, PLAIN], ids=["spec", "plain"])
def test_max_tokens_is_respected(config: SimConfig, max_tokens: int) -> None:
    _, results = _run(config, CODE_PROMPTS, max_tokens=max_tokens)
    for chunks in results:
        assert sum(c.tokens for c in chunks) == max_tokens
        assert [c.finish_reason for c in chunks] == [None] * (len(chunks) - 1) + ["length"]


def test_eos_ends_some_prompts_early_with_stop() -> None:
    config = SimConfig(speculative=True, eos_rate=1.0)
    engine, results = _run(config, PROSE_PROMPTS, max_tokens=1000)
    assert all(chunks[-1].finish_reason == "stop" for chunks in results)
    assert all(16 <= sum(c.tokens for c in chunks) <= 256 for chunks in results)
    assert engine.counters.request_success_total["stop"] == len(PROSE_PROMPTS)
    _, ignored = _run(config, PROSE_PROMPTS[:1], max_tokens=300, ignore_eos=True)
    assert ignored[0][-1].finish_reason == "length"


def test_counters_are_consistent() -> None:
    prompts = CODE_PROMPTS + PROSE_PROMPTS
    engine, results = _run(SPEC, prompts, max_tokens=50)
    c = engine.counters
    delivered = sum(chunk.tokens for chunks in results for chunk in chunks)
    steps = sum(len(chunks) for chunks in results)
    assert c.generation_tokens_total == delivered == 50 * len(prompts)
    assert c.spec_decode_num_accepted_tokens_total == delivered - steps
    assert c.spec_decode_num_drafts_total == steps - len(prompts)  # prefill steps draft nothing
    assert c.spec_decode_num_draft_tokens_total == 3 * c.spec_decode_num_drafts_total
    assert sum(c.accepted_per_position) == c.spec_decode_num_accepted_tokens_total
    assert c.accepted_per_position == sorted(c.accepted_per_position, reverse=True)
    assert c.prompt_tokens_total == sum(count_tokens(p) for p in prompts)
    assert c.request_success_total == {"stop": 0, "length": len(prompts), "abort": 0}
    assert engine.num_running == engine.num_waiting == 0


def test_plain_decoding_counts_no_drafts() -> None:
    engine, _ = _run(PLAIN, PROSE_PROMPTS, max_tokens=20)
    assert engine.counters.spec_decode_num_drafts_total == 0
    assert engine.counters.generation_tokens_total == 20 * len(PROSE_PROMPTS)


def test_step_time_model() -> None:
    spec = Engine(SimConfig(speculative=True, speed_spread=0.0))
    plain = Engine(SimConfig(speculative=False, speed_spread=0.0))
    assert plain.step_duration(1, 0) == pytest.approx(0.004)
    assert spec.step_duration(1, 0) == pytest.approx(0.004 * 1.15)
    assert plain.step_duration(11, 0) == pytest.approx(0.004 * 1.8)
    assert plain.step_duration(1, 2000) == pytest.approx(0.004 + 0.1)


def test_speed_factor_depends_on_seed_only() -> None:
    assert speed_factor(7, 0.03) == speed_factor(7, 0.03)
    assert speed_factor(7, 0.03) != speed_factor(8, 0.03)
    assert speed_factor(1, 0.0) == 1.0
    assert min(speed_factor(s, 5.0) for s in range(50)) == 0.5


def test_max_num_seqs_makes_requests_wait_and_abort_removes_them() -> None:
    async def go() -> None:
        engine = Engine(SimConfig(max_num_seqs=1), sleep=_no_sleep, log=lambda *_: None)
        requests = [engine.submit(p, 8) for p in PROSE_PROMPTS[:3]]
        assert engine.num_waiting == 3
        task = asyncio.create_task(engine.run())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert (engine.num_running, engine.num_waiting) == (1, 2)
        engine.abort(requests[2])
        engine.abort(requests[0])
        assert (engine.num_running, engine.num_waiting) == (0, 1)
        chunks = [c async for c in requests[1].chunks()]
        assert sum(c.tokens for c in chunks) == 8
        assert engine.counters.request_success_total["abort"] == 2
        task.cancel()

    asyncio.run(go())


def test_abort_all_ends_waiting_consumers() -> None:
    async def go() -> None:
        engine = Engine(SPEC, log=lambda *_: None)  # real step clock: requests stay running
        task = asyncio.create_task(engine.run())
        requests = [engine.submit(p, 10_000) for p in CODE_PROMPTS]
        consumers = [asyncio.create_task(_drain(r)) for r in requests]
        await asyncio.sleep(0.05)
        engine.abort_all()
        received = await asyncio.wait_for(asyncio.gather(*consumers), timeout=1)
        assert all(r.aborted for r in requests)
        assert all(0 < n < 10_000 for n in received)
        assert engine.num_running == engine.num_waiting == 0
        assert engine.counters.generation_tokens_total == sum(received)
        task.cancel()

    async def _drain(request) -> int:
        return sum([c.tokens async for c in request.chunks()])

    asyncio.run(go())


def test_log_lines_look_like_vllm() -> None:
    lines: list[tuple[str, str]] = []
    engine = Engine(SPEC, log=lambda source, msg: lines.append((source, msg)))
    before = engine.counters.__class__(3)
    engine.counters.prompt_tokens_total = 1520
    engine.counters.generation_tokens_total = 27
    engine.counters.record_drafts(3, 2)
    engine.counters.record_drafts(3, 0)
    engine.report(before, engine.counters, 1.0)
    assert lines[0] == ("loggers.py:123", (
        "Engine 000: Avg prompt throughput: 1520.0 tokens/s, Avg generation throughput: "
        "27.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, "
        "Prefix cache hit rate: 0.0%"))
    assert lines[1] == ("metrics.py:97", (
        "SpecDecoding metrics: Mean acceptance length: 2.00, Accepted throughput: 2.00 "
        "tokens/s, Drafted throughput: 6.00 tokens/s, Accepted: 2 tokens, Drafted: 6 tokens, "
        "Per-position acceptance rate: 0.500, 0.500, 0.000, Avg Draft acceptance rate: 33.3%"))
    lines.clear()
    engine.report(engine.counters, engine.counters, 1.0)  # idle interval: nothing logged
    assert lines == []


# --- prefix cache -------------------------------------------------------------------------

LONG_PROSE = " ".join(PROSE_PROMPTS) * 2  # some 140 tokens: several 16-token blocks


def _run_one_by_one(config: SimConfig, prompts: list[str], max_tokens: int = 4,
                    tokens: list[list[str]] | None = None
                    ) -> tuple[Engine, list[SimRequest], list[int]]:
    """Run prompts one after another (each finishes before the next is submitted); return
    the engine, the requests and the prefill tokens charged to each prefill step."""

    async def go() -> tuple[Engine, list[SimRequest], list[int]]:
        engine = Engine(config, sleep=_no_sleep, log=lambda *_: None)
        prefills: list[int] = []
        step_duration = engine.step_duration

        def recording(running: int, prefill_tokens: int) -> float:
            if prefill_tokens:
                prefills.append(prefill_tokens)
            return step_duration(running, prefill_tokens)

        engine.step_duration = recording  # type: ignore[method-assign]
        task = asyncio.create_task(engine.run())
        requests = []
        for i, prompt in enumerate(prompts):
            request = engine.submit(prompt, max_tokens, tokens=tokens[i] if tokens else None)
            assert sum([c.tokens async for c in request.chunks()]) == max_tokens
            requests.append(request)
        task.cancel()
        return engine, requests, prefills

    return asyncio.run(go())


def test_prefix_cache_hits_repeats_but_not_cold_prompts() -> None:
    n = count_tokens(LONG_PROSE)
    prompts = [LONG_PROSE, LONG_PROSE, "[cold 7f3a] " + LONG_PROSE, "[cold 02c9] " + LONG_PROSE]
    engine, requests, prefills = _run_one_by_one(SimConfig(), prompts)
    cached = [r.cached_tokens for r in requests]
    assert cached[0] == 0
    assert cached[1] > 0 and cached[1] % 16 == 0
    assert cached[1] == (n - 1) // 16 * 16  # every full block but the one holding the end
    assert cached[2:] == [0, 0]  # same text behind a unique prefix: cold
    # prefill pays for uncached tokens only, so the repeat's prefill step is shorter
    assert prefills == [r.prompt_tokens - r.cached_tokens for r in requests]
    assert engine.step_duration(1, prefills[1]) < engine.step_duration(1, prefills[0])
    c = engine.counters
    assert c.prefix_cache_queries_total == sum(r.prompt_tokens for r in requests)
    assert c.prefix_cache_hits_total == sum(cached)
    assert c.prompt_tokens_total == c.prefix_cache_queries_total  # cached tokens count too


def test_prefix_cache_never_covers_the_whole_prompt() -> None:
    prompt = " w" * 32  # exactly two blocks
    assert count_tokens(prompt) == 32
    _, requests, prefills = _run_one_by_one(SimConfig(), [prompt, prompt])
    assert [r.cached_tokens for r in requests] == [0, 16]
    assert prefills == [32, 16]
    _, requests, _ = _run_one_by_one(SimConfig(prefix_block_tokens=8), [prompt, prompt])
    assert requests[1].cached_tokens == 24


def test_no_prefix_cache_never_hits() -> None:
    config = SimConfig(prefix_cache=False)
    engine, requests, prefills = _run_one_by_one(config, [LONG_PROSE] * 3)
    assert [r.cached_tokens for r in requests] == [0, 0, 0]
    assert prefills == [r.prompt_tokens for r in requests]
    assert engine.counters.prefix_cache_queries_total == 0
    assert engine.counters.prefix_cache_hits_total == 0


def test_concurrent_identical_prompts_do_not_share_an_unfinished_prefill() -> None:
    engine, _ = _run(SimConfig(), [LONG_PROSE, LONG_PROSE], max_tokens=4)
    assert engine.counters.prefix_cache_hits_total == 0


def test_prefix_cache_lru_cap_evicts() -> None:
    config = SimConfig(prefix_cache_max_blocks=4)
    other = " ".join(CODE_PROMPTS)
    _, requests, _ = _run_one_by_one(config, [LONG_PROSE, LONG_PROSE, other, LONG_PROSE])
    # a prompt's head blocks outlive its tail (a block is useless without its parent)
    assert [r.cached_tokens for r in requests] == [0, 4 * 16, 0, 0]


def test_chat_rendering_counts_and_blocks() -> None:
    conversations = [
        (["user"], ["hello"]),
        (["system", "user"], ["Be brief.", "Why is the sky blue?"]),
        (["user", "assistant", "user"], ["a \n", "", "  b\n\n"]),
        (["user"], [""]),
    ]
    for roles, contents in conversations:
        expected = (count_tokens("\n".join(contents)) + CHAT_TOKENS_PER_MESSAGE * len(roles)
                    + CHAT_TOKENS_FIXED)
        assert len(render_chat(roles, contents)) == expected, contents
    warm = render_chat(["user"], [LONG_PROSE])
    cold = render_chat(["user"], ["[cold 7f3a] " + LONG_PROSE])
    assert warm.index("Tell") < 16  # the user text starts inside the first block
    assert block_hashes(warm, 16)[0] != block_hashes(cold, 16)[0]
    # a follow-up turn extends the rendered prompt, so it hits the first turn's blocks
    follow_up = render_chat(["user", "assistant", "user"], [LONG_PROSE, "Sure.", "More?"])
    assert follow_up[:len(warm)] == warm


def _chat_tokens(*contents: str) -> list[str]:
    roles = ["user", "assistant"] * len(contents)
    body = {"messages": [{"role": role, "content": content}
                         for role, content in zip(roles, contents, strict=False)]}
    return list(parse_chat(body, SimConfig()).tokens)


def test_chat_prompts_are_cached_on_rendered_tokens() -> None:
    prompts = [LONG_PROSE, LONG_PROSE, "[cold 7f3a] " + LONG_PROSE,
               LONG_PROSE + "\nSure.\nMore?"]
    tokens = [_chat_tokens(LONG_PROSE), _chat_tokens(LONG_PROSE),
              _chat_tokens("[cold 7f3a] " + LONG_PROSE),
              _chat_tokens(LONG_PROSE, "Sure.", "More?")]
    _, requests, _ = _run_one_by_one(SimConfig(), prompts, tokens=tokens)
    assert [r.prompt_tokens for r in requests] == [len(t) for t in tokens]
    cached = [r.cached_tokens for r in requests]
    assert cached[0] == 0 and cached[2] == 0
    assert cached[1] == (len(tokens[1]) - 1) // 16 * 16
    # the follow-up's rendering starts with the whole first turn, so it hits every block
    # the first turn filled; the first turn's last, partial block was never cached
    assert tokens[3][:len(tokens[0])] == tokens[0]
    assert cached[3] == len(tokens[0]) // 16 * 16


def test_long_prompt_fits_and_prefill_scales_with_uncached_tokens() -> None:
    long_prompt = " ".join(["lorem"] * 24_000)
    assert count_tokens(long_prompt) == 24_000
    parsed = parse_completion({"prompt": long_prompt, "max_tokens": 8192}, SimConfig())
    assert parsed.prompt_tokens == 24_000
    assert SimConfig().max_model_len >= 32_768 + 8192
    with pytest.raises(ApiError):
        parse_completion({"prompt": long_prompt, "max_tokens": 8192},
                         SimConfig(max_model_len=8192))
    engine, requests, prefills = _run_one_by_one(SimConfig(speed_spread=0.0),
                                                 [long_prompt, long_prompt], max_tokens=1)
    assert prefills == [24_000, 24_000 - requests[1].cached_tokens] == [24_000, 16]
    assert engine.step_duration(1, prefills[0]) == pytest.approx(0.004 + 24_000 / 20_000)


def test_log_line_reports_the_interval_prefix_hit_rate() -> None:
    lines: list[tuple[str, str]] = []
    engine = Engine(PLAIN, log=lambda source, msg: lines.append((source, msg)))
    before, after = Counters(3), Counters(3)
    before.prefix_cache_queries_total, before.prefix_cache_hits_total = 1000, 1000
    after.prefix_cache_queries_total, after.prefix_cache_hits_total = 1200, 1150
    after.prompt_tokens_total = 200
    engine.report(before, after, 1.0)
    assert lines[0][1].endswith("Prefix cache hit rate: 75.0%")


# --- stalled requests ---------------------------------------------------------------------


def test_stalled_request_emits_one_chunk_while_others_flow() -> None:
    async def go() -> None:
        engine = Engine(SimConfig(stall_every=2), sleep=_no_sleep, log=lambda *_: None)
        batch_sizes: list[int] = []
        step_duration = engine.step_duration

        def recording(running: int, prefill_tokens: int) -> float:
            batch_sizes.append(running)
            return step_duration(running, prefill_tokens)

        engine.step_duration = recording  # type: ignore[method-assign]
        task = asyncio.create_task(engine.run())
        first, second = engine.submit(PROSE_PROMPTS[0], 30), engine.submit(PROSE_PROMPTS[1], 30)
        received: list[Chunk] = []

        async def consume() -> None:
            async for chunk in second.chunks():
                received.append(chunk)

        consumer = asyncio.create_task(consume())
        assert sum([c.tokens async for c in first.chunks()]) == 30
        steps = len(batch_sizes)
        for _ in range(20):
            await asyncio.sleep(0)
        assert [c.tokens for c in received] == [1]
        assert (engine.num_running, second.done, consumer.done()) == (1, False, False)
        assert len(batch_sizes) == steps  # the engine idles instead of stepping
        assert batch_sizes[1:] == [1] * (steps - 1)  # the stalled request is not batched
        engine.abort(second)  # a client disconnect during the stall
        await asyncio.wait_for(consumer, timeout=1)
        assert second.aborted and engine.num_running == 0
        assert engine.counters.request_success_total["abort"] == 1
        task.cancel()

    asyncio.run(go())


def test_stalled_request_resumes_after_stall_s() -> None:
    config = SimConfig(stall_every=1, stall_s=0.05)
    start = time.monotonic()
    _, results = _run(config, PROSE_PROMPTS[:1], max_tokens=5)
    assert time.monotonic() - start >= 0.05
    assert sum(c.tokens for c in results[0]) == 5
    assert results[0][-1].finish_reason == "length"


# --- pretend GPU clocks -------------------------------------------------------------------


def _step_durations(config: SimConfig, prompts: list[str], max_tokens: int = 20) -> list[float]:
    """Durations of every step the engine takes to run `prompts` concurrently."""

    async def go() -> list[float]:
        engine = Engine(config, sleep=_no_sleep, log=lambda *_: None)
        durations: list[float] = []
        step_duration = engine.step_duration

        def recording(running: int, prefill_tokens: int) -> float:
            durations.append(step_duration(running, prefill_tokens))
            return durations[-1]

        engine.step_duration = recording  # type: ignore[method-assign]
        task = asyncio.create_task(engine.run())
        requests = [engine.submit(p, max_tokens) for p in prompts]
        for request in requests:
            assert sum([c.tokens async for c in request.chunks()]) == max_tokens
        task.cancel()
        return durations

    return asyncio.run(go())


def test_low_clock_mode_slows_steps_by_the_clock_ratio() -> None:
    ratio = 2400 / 494
    normal = Engine(SimConfig(speed_spread=0.0))
    low = Engine(SimConfig(speed_spread=0.0, low_clock=True))
    assert SimConfig().clock_slowdown == 1.0
    assert low.config.clock_slowdown == pytest.approx(ratio) == pytest.approx(4.858, abs=1e-3)
    assert low.step_duration(1, 0) == pytest.approx(0.004 * ratio)  # decode
    assert low.step_duration(1, 2000) == pytest.approx((0.004 + 0.1) * ratio)  # and prefill
    for running, prefill in ((1, 0), (5, 0), (3, 4000)):
        assert low.step_duration(running, prefill) == pytest.approx(
            normal.step_duration(running, prefill) * ratio)
    custom = SimConfig(low_clock=True, sm_clock_mhz=2000, low_clock_mhz=500)
    assert custom.clock_slowdown == 4.0
    # the engine loop pays the slowdown on every step it takes (same steps, same seed)
    plain = _step_durations(SimConfig(), PROSE_PROMPTS[:3])
    slow = _step_durations(SimConfig(low_clock=True), PROSE_PROMPTS[:3])
    assert len(slow) == len(plain)
    assert sum(slow) == pytest.approx(sum(plain) * ratio)


def test_clock_config_is_validated() -> None:
    for field, bad in (("num_gpus", dict(num_gpus=0)), ("sm_clock_mhz", dict(sm_clock_mhz=2600)),
                       ("idle_sm_clock_mhz", dict(idle_sm_clock_mhz=0)),
                       ("low_clock_mhz", dict(low_clock=True, low_clock_mhz=2450)),
                       ("low_clock_mhz", dict(low_clock_mhz=0)),
                       ("metrics_generation_scale", dict(metrics_generation_scale=-0.1))):
        # the error names the one bad field, not merely any ValueError
        with pytest.raises(ValueError, match=rf"invalid simulator config value\(s\): {field}$"):
            SimConfig(**bad)
    SimConfig(sm_clock_mhz=2600, max_sm_clock_mhz=2700)
    SimConfig(low_clock_mhz=2450)  # only checked against the load clock in low-clock mode


def _gpu(index: int, clock: int, pstate: str, utilization: int) -> dict:
    return {"index": index, "sm_clock_mhz": clock, "max_sm_clock_mhz": 2520, "pstate": pstate,
            "throttle_reasons": "0x0000000000000000", "utilization_gpu": utilization}


def test_gpu_clocks_idle_versus_under_load() -> None:
    assert gpu_clocks(SimConfig(), under_load=False) == {"gpus": [_gpu(0, 210, "P8", 0)]}
    assert gpu_clocks(SimConfig(), under_load=True) == {"gpus": [_gpu(0, 2400, "P0", 100)]}
    two = SimConfig(num_gpus=2)
    assert gpu_clocks(two, under_load=True) == {
        "gpus": [_gpu(0, 2400, "P0", 100), _gpu(1, 2400, "P0", 100)]}
    # low clock: only GPU 0 under load is stuck low, still with no throttle reason
    low = SimConfig(num_gpus=2, low_clock=True)
    assert gpu_clocks(low, under_load=True) == {
        "gpus": [_gpu(0, 494, "P0", 100), _gpu(1, 2400, "P0", 100)]}
    assert gpu_clocks(low, under_load=False) == {
        "gpus": [_gpu(0, 210, "P8", 0), _gpu(1, 210, "P8", 0)]}
    assert "low_clock=off" in clock_summary(SimConfig())
    assert "low_clock=on (GPU 0 at 494 MHz" in clock_summary(low)
    assert "steps 4.858x slower" in clock_summary(low)


def test_engine_is_under_load_while_requests_are_in_it() -> None:
    async def go() -> None:
        engine = Engine(SimConfig(max_num_seqs=1), sleep=_no_sleep, log=lambda *_: None)
        assert not engine.under_load
        requests = [engine.submit(p, 6) for p in PROSE_PROMPTS[:2]]
        assert engine.under_load  # waiting counts: the GPUs are about to be busy
        task = asyncio.create_task(engine.run())
        assert sum([c.tokens async for c in requests[0].chunks()]) == 6
        assert engine.under_load  # the second one is still in the engine
        assert sum([c.tokens async for c in requests[1].chunks()]) == 6
        assert not engine.under_load
        third = engine.submit(PROSE_PROMPTS[2], 10_000)
        await asyncio.sleep(0)
        assert engine.under_load
        engine.abort(third)
        assert not engine.under_load
        task.cancel()

    asyncio.run(go())


# --- miscounting metrics ------------------------------------------------------------------


def _metric_value(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + "{")]
    return float(line.rsplit(" ", 1)[1])


def test_generation_scale_applies_only_to_the_metrics_text() -> None:
    for scale, expected in ((1.1, 660), (0.9, 540), (1.0, 600)):
        lines: list[tuple[str, str]] = []
        config = SimConfig(speculative=True, metrics_generation_scale=scale)
        engine, results = _run(config, CODE_PROMPTS + PROSE_PROMPTS, max_tokens=50)
        delivered = sum(c.tokens for chunks in results for c in chunks)
        assert delivered == engine.counters.generation_tokens_total == 600  # truth kept
        text = render_metrics(engine)
        assert _metric_value(text, "vllm:generation_tokens_total") == expected
        assert _metric_value(text, "vllm:prompt_tokens_total") == \
            engine.counters.prompt_tokens_total
        assert _metric_value(text, "vllm:spec_decode_num_accepted_tokens_total") == \
            engine.counters.spec_decode_num_accepted_tokens_total
        # log lines stay true
        logger = Engine(config, log=lambda source, msg, lines=lines: lines.append((source, msg)))
        logger.report(Counters(3), engine.counters, 1.0)
        assert "Avg generation throughput: 600.0 tokens/s" in lines[0][1]
    engine = Engine(SimConfig(metrics_generation_scale=1.1))
    engine.counters.generation_tokens_total = 7
    assert _metric_value(render_metrics(engine), "vllm:generation_tokens_total") == 8  # 7.7


def test_the_stats_logger_outlives_a_stall_longer_than_its_interval() -> None:
    """Under uvloop (uvicorn's loop) loop.time() counts whole milliseconds, read once per
    loop iteration: after a stall past one interval, the catch-up tick used to measure an
    interval of 0.0 and die dividing by it, silently, and the server logged nothing more
    (CI, stop 53). The logger must go on logging after the stall."""
    uvloop = pytest.importorskip("uvloop")
    lines: list[str] = []

    async def go() -> None:
        engine = Engine(SimConfig(log_interval_s=0.02), log=lambda _source, msg: lines.append(msg))
        runner, logger = asyncio.create_task(engine.run()), asyncio.create_task(engine.log_loop())
        request = engine.submit(PROSE_PROMPTS[0], 100_000)
        await asyncio.sleep(0.1)
        before = len(lines)
        assert before > 0
        time.sleep(0.2)  # the whole process stalls for ten intervals
        await asyncio.sleep(0.2)
        assert not logger.done(), logger.exception()
        assert len(lines) >= before + 3, lines[before:]
        engine.abort(request)
        for task in (runner, logger):
            task.cancel()
        await asyncio.gather(runner, logger, return_exceptions=True)

    uvloop.run(go())


def test_a_dead_background_task_is_logged(capsys: pytest.CaptureFixture[str]) -> None:
    from benchledger.simulator.app import _log_death

    async def fail() -> None:
        raise ZeroDivisionError("float division by zero")

    async def go() -> None:
        task = asyncio.create_task(fail(), name="stats logger")
        await asyncio.gather(task, return_exceptions=True)
        _log_death(task)

    asyncio.run(go())
    err = capsys.readouterr().err
    assert "ERROR the stats logger task died: Traceback" in err
    assert "ZeroDivisionError: float division by zero" in err
