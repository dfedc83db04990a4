"""Engine model of the simulator (pure asyncio, no HTTP).

One engine loop steps every running request together (continuous batching), like vLLM:
each step costs a base decode time (longer with speculation and with more running
requests) plus the prefill time of requests admitted in that step. At the end of a step
every running request receives one chunk: 1 token after prefill, then 1 + accepted draft
tokens per step with speculative decoding (1 without). Counters mirror vLLM's metrics.

A reasoning model (``reasoning_tokens`` > 0, chat requests only: the app decides) spends the
first tokens of each request thinking: they are generated, timed and counted like any other
token, and each chunk says how many of its first tokens are reasoning (``Chunk.reasoning``);
an answer that ends by itself (EOS) ends that many tokens after its reasoning.

Automatic prefix caching (on by default, as in vLLM v1) makes a request's prefill cost
only its uncached prompt tokens. For drain tests every Nth admitted request can stall
(``stall_every``): it stays running but skips steps, emitting nothing, for ``stall_s``.

Pretend GPU clocks (see clocks.py) only change timing in ``low_clock`` mode: GPU
``low_clock_gpu`` is stuck at ``low_clock_mhz`` under load, so every step (decode and
prefill) takes sm_clock_mhz / low_clock_mhz times longer. The head of a deployment of
pretend nodes (nodes.py) steps at the pace of its slowest node's GPU (``node_slowdown``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import itertools
import random
import re
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from benchledger.simulator.options import SimConfig
from benchledger.simulator.prefix_cache import PrefixCache, block_hashes
from benchledger.simulator.tokenizer import tokenize

VERSION = "benchledger-sim 0.1.0"


def speed_factor(seed: int, spread: float) -> float:
    """Per-process step-time multiplier: two seeds behave like two real instances."""
    return max(0.5, random.Random(seed).gauss(1.0, spread))


def log_line(source: str, message: str) -> None:
    """Write one vLLM-style log line (``INFO mm-dd HH:MM:SS [file.py:N] msg``) to stderr,
    flushed at once: a harness reads the log file while the server runs."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    sys.stderr.write(f"INFO {stamp} [{source}] {message}\n")
    sys.stderr.flush()


# --- what a request generates -------------------------------------------------------------

# Every entry is exactly one tokenizer token and no two entries merge when concatenated
# (words and numbers carry their leading whitespace), so the token count of generated text
# always equals the number of generated tokens.
CODE_VOCAB = (
    " def", " return", " if", " else", " for", " in", " while", " self", " value",
    " result", " items", " index", " count", " data", " key", " x", " y", " i", " n",
    " None", " True", " False", "\n    return", "\n    if", "\n    for", "\n        x",
    "(", ")", "[", "]", "{", "}", ":", ",", ".", ";", " =", " +", " -", " *", " <", " >",
    " 0", " 1", " 2", " 10",
)
PROSE_VOCAB = (
    " the", " a", " of", " and", " to", " in", " is", " was", " that", " it", " with",
    " for", " as", " on", " by", " people", " city", " river", " history", " light",
    " water", " time", " world", " small", " great", " early", " often", " because",
    " however", " through", " between", " village", " morning", " story", " music",
    " season", ",", ".", ";", "\nThe", "\nIn",
)

_CODE_CHARS = frozenset("{}()[];=<>:_")
_CODE_WORDS = re.compile(
    r"\b(def|return|function|class|import|lambda|const|struct|void|fn|python|javascript"
    r"|typescript|rust|golang|java|sql|code|implement|algorithm|program)\b",
    re.IGNORECASE,
)


def is_code_prompt(text: str) -> bool:
    """Code-like prompts get the higher draft acceptance (speculation wins on code)."""
    if not text:
        return False
    code_chars = sum(ch in _CODE_CHARS for ch in text) / len(text)
    return code_chars >= 0.03 or _CODE_WORDS.search(text) is not None


def acceptance_probability(text: str, config: SimConfig) -> float:
    """Per-position draft acceptance p, jittered by +-0.05 from a hash of the prompt."""
    base = config.acceptance_code if is_code_prompt(text) else config.acceptance_prose
    jitter = (_digest(text)[0] / 255.0 - 0.5) * 0.1
    return min(0.99, max(0.0, base + jitter))


def natural_length(text: str, eos_rate: float) -> int | None:
    """Token count after which the prompt's answer ends by itself (EOS), or None.

    A prompt property (hash-derived), so it is deterministic even at temperature > 0.
    """
    digest = _digest(text)
    if digest[1] / 256.0 >= eos_rate:
        return None
    return 16 + int.from_bytes(digest[2:4], "big") % 241


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


@dataclass
class Chunk:
    """What one request receives at the end of one engine step."""

    text: str
    tokens: int
    accepted: int  # draft tokens accepted (and delivered) in this step
    finish_reason: str | None = None  # "length"/"stop" on the request's last chunk
    # The text of each token, in order ("".join(pieces) == text): streamed logprobs list
    # one entry per token, several per chunk under speculation.
    pieces: tuple[str, ...] = ()
    # How many of its first tokens are reasoning (a reasoning model's thinking, streamed
    # apart from the content); 0 outside reasoning mode.
    reasoning: int = 0


class SimRequest:
    """One request inside the engine; consumers iterate ``chunks()``."""

    def __init__(self, request_id: int, prompt: str, prompt_tokens: int, max_tokens: int,
                 temperature: float, config: SimConfig, ignore_eos: bool = False,
                 reasoning_tokens: int = 0) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        # temperature 0: text and acceptance are a function of the prompt (prefix-stable
        # across max_tokens); otherwise fresh randomness on every request.
        digest = _digest(prompt)
        greedy = temperature == 0
        self._text_rng = random.Random(digest) if greedy else random.Random()
        # lossy speculation (lossy_share): the prompts it changes, and from which token, are
        # drawn from the prompt alone; the text after that token comes from another stream
        self._digest = digest
        self._texts = 0  # tokens whose text was drawn
        self._diverge_at: int | None = None
        if greedy and config.speculative and config.lossy_share > 0:
            draw = random.Random(digest + b"lossy")
            if draw.random() < config.lossy_share:
                self._diverge_at = draw.randint(1, 32)
        self._accept_rng = random.Random(digest + b"accept") if greedy else random.Random()
        self._vocab = CODE_VOCAB if is_code_prompt(prompt) else PROSE_VOCAB
        self.p_accept = acceptance_probability(prompt, config)
        # the first tokens generated are reasoning (0: not a reasoning request)
        self.reasoning_limit = min(max(0, reasoning_tokens), max_tokens)
        natural = None if ignore_eos else natural_length(prompt, config.eos_rate)
        if natural is not None and self.reasoning_limit + natural <= max_tokens:
            # the answer after the reasoning ends by itself
            self.limit, self._final_reason = self.reasoning_limit + natural, "stop"
        else:
            self.limit, self._final_reason = max_tokens, "length"
        self.generated = 0
        self.steps = 0
        self.block_hashes: list[bytes] = []  # set by the engine when prefix caching is on
        self.cached_tokens = 0  # prompt tokens served from the prefix cache (set at admission)
        self.stall_pending = False  # stalls after its first chunk (set at admission)
        self.resume_at = 0.0  # loop time until which a stalled request emits nothing
        self.finish_reason: str | None = None
        self.aborted = False
        self._queue: asyncio.Queue[Chunk | None] = asyncio.Queue()  # None: aborted

    @property
    def reasoning_generated(self) -> int:
        """How many of the tokens generated so far are reasoning (`generated` counts them
        too: they are generated tokens, as vLLM's counters count them)."""
        return min(self.reasoning_limit, self.generated)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.aborted

    def stalled(self, now: float) -> bool:
        return now < self.resume_at

    def draw_accepted(self, k: int) -> int:
        """Accept each of k draft positions with probability p until the first rejection."""
        accepted = 0
        while accepted < k and self._accept_rng.random() < self.p_accept:
            accepted += 1
        return accepted

    def _next_text(self) -> str:
        if self._texts == self._diverge_at:  # a lossy speculation changes the rest
            self._text_rng = random.Random(self._digest + b"diverged")
        self._texts += 1
        return self._text_rng.choice(self._vocab)

    def produce(self, accepted: int) -> Chunk:
        """Generate 1 + accepted tokens (already capped by the caller) as one chunk."""
        n = 1 + accepted
        reasoning_before = self.reasoning_generated
        self.generated += n
        self.steps += 1
        pieces = tuple(self._next_text() for _ in range(n))
        if self.generated >= self.limit:
            self.finish_reason = self._final_reason
        chunk = Chunk("".join(pieces), n, accepted, self.finish_reason, pieces,
                      self.reasoning_generated - reasoning_before)
        self._queue.put_nowait(chunk)
        return chunk

    def mark_aborted(self) -> None:
        self.aborted = True
        self._queue.put_nowait(None)  # wakes a consumer blocked in chunks()

    async def chunks(self) -> AsyncIterator[Chunk]:
        """Yield chunks as the engine produces them, ending after the final one (or early,
        with ``aborted`` set, when the request is aborted)."""
        while True:
            chunk = await self._queue.get()
            if chunk is None:
                return
            yield chunk
            if chunk.finish_reason is not None:
                return


# --- counters -----------------------------------------------------------------------------


@dataclass
class Counters:
    """Cumulative since process start; names follow vLLM's Prometheus metrics."""

    num_speculative_tokens: int = 3
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    prefix_cache_queries_total: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits_total: int = 0  # of those, tokens found cached
    spec_decode_num_drafts_total: int = 0
    spec_decode_num_draft_tokens_total: int = 0
    spec_decode_num_accepted_tokens_total: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    request_success_total: dict[str, int] = field(
        default_factory=lambda: {"stop": 0, "length": 0, "abort": 0}
    )

    def __post_init__(self) -> None:
        if not self.accepted_per_position:
            self.accepted_per_position = [0] * self.num_speculative_tokens

    def record_drafts(self, proposed: int, accepted: int) -> None:
        self.spec_decode_num_drafts_total += 1
        self.spec_decode_num_draft_tokens_total += proposed
        self.spec_decode_num_accepted_tokens_total += accepted
        for position in range(accepted):
            self.accepted_per_position[position] += 1


# --- the engine ---------------------------------------------------------------------------

Sleep = Callable[[float], Awaitable[None]]
Log = Callable[[str, str], None]


class Engine:
    """Continuous-batching engine; run ``run()`` (and ``log_loop()``) as asyncio tasks."""

    def __init__(self, config: SimConfig, sleep: Sleep = asyncio.sleep,
                 log: Log = log_line) -> None:
        self.config = config
        self.speed_factor = speed_factor(config.seed, config.speed_spread)
        self.counters = Counters(config.num_speculative_tokens)
        self._sleep = sleep
        self._log = log
        self._ids = itertools.count()
        self._waiting: deque[SimRequest] = deque()
        self._running: list[SimRequest] = []
        self._wake = asyncio.Event()
        self.prefix_cache = (PrefixCache(config.prefix_block_tokens,
                                         config.prefix_cache_max_blocks)
                             if config.prefix_cache else None)
        self._admitted_total = 0  # since process start; picks the requests that stall
        self.busy_s = 0.0  # seconds spent stepping since start: the pretend GPUs' load
        # Set by the head of a deployment (nodes.Head): the slowest pretend node's
        # sm_clock / load_clock, since a distributed engine steps at its slowest GPU's pace.
        self.node_slowdown = 1.0

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def slowdown(self) -> float:
        """Step-time multiplier from the clocks: this server's own GPUs' or its slowest
        pretend node's, whichever is slower."""
        return max(self.config.clock_slowdown, self.node_slowdown)

    @property
    def under_load(self) -> bool:
        """Whether any request is in the engine (running or waiting): the GPUs are busy."""
        return bool(self._running or self._waiting)

    def submit(self, prompt: str, max_tokens: int, temperature: float = 0.0,
               prompt_tokens: int | None = None, ignore_eos: bool = False,
               tokens: Sequence[str] | None = None, reasoning_tokens: int = 0) -> SimRequest:
        """Queue a request; it is admitted at the start of the next step with a free slot.

        `tokens` is the prompt as the model sees it (a rendered chat prompt), which is what
        the prefix cache keys on; by default the tokens of `prompt` itself.
        `reasoning_tokens`: how many of its first generated tokens are reasoning (at most
        max_tokens; the app passes the config's for chat requests only)."""
        if tokens is None:
            tokens = tokenize(prompt)
        if prompt_tokens is None:
            prompt_tokens = len(tokens)
        request = SimRequest(next(self._ids), prompt, prompt_tokens, max_tokens, temperature,
                             self.config, ignore_eos, reasoning_tokens)
        if self.prefix_cache is not None:
            request.block_hashes = block_hashes(tokens, self.prefix_cache.block_tokens)
        self._waiting.append(request)
        self._wake.set()
        return request

    def abort(self, request: SimRequest) -> None:
        """Drop an unfinished request (client went away, server shutting down); a no-op
        once it finished."""
        if request.done:
            return
        request.mark_aborted()
        if request in self._waiting:
            self._waiting.remove(request)
        if request in self._running:
            self._running.remove(request)
            self._wake.set()  # the loop may be idling through a stall: a slot is free now
        self.counters.request_success_total["abort"] += 1

    def abort_all(self) -> None:
        """Abort everything (shutdown), so open streams end instead of holding the server."""
        for request in [*self._waiting, *self._running]:
            self.abort(request)

    def step_duration(self, running: int, prefill_tokens: int) -> float:
        """Seconds one step takes with `running` requests and `prefill_tokens` to prefill
        (both parts stretched by the clock slowdown: low-clock mode, or a slow node)."""
        c = self.config
        decode = c.step_ms / 1000.0 * (1.0 + c.batch_penalty * max(0, running - 1))
        if c.speculative:
            decode *= c.spec_step_overhead
        return ((decode + prefill_tokens / c.prefill_tok_s) * self.speed_factor
                * self.slowdown)

    async def run(self) -> None:
        """Step forever. Oversleeping is paid back on the next step (at most one step's
        worth), so the mean step time matches the model despite timer granularity."""
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self._can_admit() and not self._active(loop.time()):
                await self._idle(loop)
                continue
            admitted = self._admit()
            # cached prompt tokens cost nothing; stalled requests sit out the step
            prefill = sum(r.prompt_tokens - r.cached_tokens for r in admitted)
            active = len(self._active(loop.time()))
            step_s = self.step_duration(active, prefill)
            deadline = max(deadline, loop.time()) + step_s
            await self._sleep(max(0.0, deadline - loop.time()))
            self.busy_s += step_s
            self._finish_step(admitted, loop.time())

    def _can_admit(self) -> bool:
        return bool(self._waiting) and len(self._running) < self.config.max_num_seqs

    def _active(self, now: float) -> list[SimRequest]:
        """Running requests that take part in a step (all but the stalled ones)."""
        return [r for r in self._running if not r.stalled(now)]

    async def _idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Nothing to step: sleep until a submit or abort, or until the first stalled
        request is due to resume, instead of spinning empty steps through a long stall."""
        self._wake.clear()
        resumes = [r.resume_at for r in self._running]
        timeout = max(0.0, min(resumes) - loop.time()) if resumes else None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _admit(self) -> list[SimRequest]:
        admitted = []
        while self._can_admit():
            request = self._waiting.popleft()
            self._running.append(request)
            admitted.append(request)
            self._admitted_total += 1
            every = self.config.stall_every
            request.stall_pending = every > 0 and self._admitted_total % every == 0
            self._lookup_prefix(request)
        return admitted

    def _lookup_prefix(self, request: SimRequest) -> None:
        """At admission, like vLLM's scheduler: blocks cached by prompts whose prefill has
        completed count as hits (requests prefilled in the same step do not share)."""
        if self.prefix_cache is None:
            return
        request.cached_tokens = self.prefix_cache.lookup(request.block_hashes,
                                                         request.prompt_tokens)
        self.counters.prefix_cache_queries_total += request.prompt_tokens
        self.counters.prefix_cache_hits_total += request.cached_tokens

    def _finish_step(self, admitted: list[SimRequest], now: float) -> None:
        """Emit one chunk to every request still running (aborts may have removed some),
        except stalled ones."""
        prefilled = {id(r) for r in admitted}
        for request in list(self._running):
            if request.stalled(now):
                continue
            if id(request) in prefilled:
                self.counters.prompt_tokens_total += request.prompt_tokens
                if self.prefix_cache is not None:
                    self.prefix_cache.insert(request.block_hashes)
                chunk = request.produce(0)  # the prefill step samples 1 token, no drafts
                if request.stall_pending and chunk.finish_reason is None:
                    request.resume_at = now + self.config.stall_s  # a hung request
            else:
                chunk = request.produce(self._accepted_this_step(request))
            self.counters.generation_tokens_total += chunk.tokens
            if chunk.finish_reason is not None:
                self._running.remove(request)
                self.counters.request_success_total[chunk.finish_reason] += 1

    def _accepted_this_step(self, request: SimRequest) -> int:
        """Draft tokens delivered this step; capped so max_tokens is never exceeded. The
        accepted counter counts delivered tokens only, so accepted == delivered - steps."""
        if not self.config.speculative:
            return 0
        k = self.config.num_speculative_tokens
        accepted = min(request.draw_accepted(k), request.limit - request.generated - 1)
        self.counters.record_drafts(k, accepted)
        return accepted

    # --- periodic logging, formatted like vLLM v1's LoggingStatLogger ----------------------

    async def log_loop(self) -> None:
        """Every log_interval_s (fractions allowed, e.g. 0.25), log throughput lines if
        anything happened. Ticks follow a fixed cadence, so sleep overshoot does not add up
        (rates use the measured interval either way).

        The interval is measured with time.monotonic(), not loop.time(): under uvloop (which
        uvicorn picks) loop.time() counts whole milliseconds and is read once per loop
        iteration, so after a stall longer than one interval the catch-up tick woke in the
        same millisecond it started and divided by an interval of 0.0. That killed this task
        without a word and the server logged no throughput line for the rest of its life (CI,
        stop 53: one demo restart's windows held no log lines). An interval too short to
        measure is folded into the next."""
        loop = asyncio.get_running_loop()
        previous, since = copy.deepcopy(self.counters), time.monotonic()
        tick = loop.time()
        while True:
            tick = max(tick + self.config.log_interval_s, loop.time())
            await asyncio.sleep(tick - loop.time())
            current, now = copy.deepcopy(self.counters), time.monotonic()
            if now <= since:
                continue
            self.report(previous, current, now - since)
            previous, since = current, now

    def report(self, previous: Counters, current: Counters, elapsed: float) -> None:
        """Log one interval (skipped when idle): the engine line and the spec line."""
        prompt = current.prompt_tokens_total - previous.prompt_tokens_total
        generated = current.generation_tokens_total - previous.generation_tokens_total
        if not (prompt or generated or self._running or self._waiting):
            return
        queries = current.prefix_cache_queries_total - previous.prefix_cache_queries_total
        hits = current.prefix_cache_hits_total - previous.prefix_cache_hits_total
        self._log("loggers.py:123", engine_log_message(
            prompt / elapsed, generated / elapsed, self.num_running, self.num_waiting,
            self._kv_cache_usage(), hits / queries if queries else 0.0))
        drafts = current.spec_decode_num_drafts_total - previous.spec_decode_num_drafts_total
        if drafts:
            self._log("metrics.py:97", spec_log_message(previous, current, elapsed))

    def _kv_cache_usage(self) -> float:
        """Cosmetic: fraction of a max_num_seqs * max_model_len token cache in use."""
        used = sum(r.prompt_tokens + r.generated for r in self._running)
        return used / (self.config.max_num_seqs * self.config.max_model_len)


def engine_log_message(prompt_tok_s: float, gen_tok_s: float, running: int, waiting: int,
                       kv_usage: float, prefix_hit_rate: float = 0.0) -> str:
    """vLLM's engine line; the prefix cache hit rate is hit/queried prompt tokens of the
    interval (0 when nothing was queried)."""
    return (
        f"Engine 000: Avg prompt throughput: {prompt_tok_s:.1f} tokens/s, "
        f"Avg generation throughput: {gen_tok_s:.1f} tokens/s, "
        f"Running: {running} reqs, Waiting: {waiting} reqs, "
        f"GPU KV cache usage: {kv_usage * 100:.1f}%, "
        f"Prefix cache hit rate: {prefix_hit_rate * 100:.1f}%"
    )


def spec_log_message(previous: Counters, current: Counters, elapsed: float) -> str:
    drafts = current.spec_decode_num_drafts_total - previous.spec_decode_num_drafts_total
    drafted = (current.spec_decode_num_draft_tokens_total
               - previous.spec_decode_num_draft_tokens_total)
    accepted = (current.spec_decode_num_accepted_tokens_total
                - previous.spec_decode_num_accepted_tokens_total)
    per_position = ", ".join(
        f"{(now - before) / drafts:.3f}"
        for now, before in zip(current.accepted_per_position, previous.accepted_per_position,
                               strict=True)
    )
    return (
        f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
        f"Accepted throughput: {accepted / elapsed:.2f} tokens/s, "
        f"Drafted throughput: {drafted / elapsed:.2f} tokens/s, "
        f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
        f"Per-position acceptance rate: {per_position}, "
        f"Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%"
    )
