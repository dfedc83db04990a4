"""A window's requests: what a window asks for (WindowSpec), and each request as it happens
(RequestRecord), which becomes one raw row whatever its outcome."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from benchledger.client.items import Items, item_request
from benchledger.client.tally import Count, Tally, UsageTally
from benchledger.client.text import safe_text
from benchledger.client.usage import Usage, read_usage
from benchledger.prompts import Prompt, cold_prefix, shape_prompt


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
    # closed | poisson | constant (open loops capped at `concurrency` outstanding)
    arrival: str = "closed"
    rate_rps: float | None = None  # an open loop's requested arrival rate
    prompt_cache: str = "warm"  # cold: a unique seeded prefix on every prompt
    input_tokens: int | None = None  # filler words in front of each prompt (long inputs)
    seed: int = 0
    # server_tokenizer: non-streamed requests after the window whose usage checks the
    # tokenizer's counts
    calibration_requests: int = 0
    # Client worker processes the streams are spread over (None: one per core, at most
    # one per 64 streams; benchledger.client.workers.worker_count)
    workers: int | None = None
    # A prepared workload (issue #26: a dataset, synthetic lengths, shared prefixes,
    # sessions, a trace): its requests come from there instead of `prompts`.
    items: Items | None = None
    # An open-loop window: the p99 of how late requests may be sent (arrivals_on_schedule).
    max_arrival_lag_ms: float | None = None
    # Keep each answer's text (and reasoning text) in its row, beside their digests
    # ([defaults] keep_output_text; off: a user's prompts and answers may be private).
    keep_output_text: bool = False


class Received:
    """One kind of text a request got back (its answer, or its reasoning), read as the
    events arrive: digested (sha256 of its UTF-8) and measured (characters) at once, so a
    row never holds a long answer as hundreds of small strings; kept whole only where
    asked (keep_output_text, or a multi-turn session that sends the answer back).

    A worker process sends its records to the parent pickled: the digest is finished
    then (a hash object cannot be pickled, and nothing arrives after the stream ended)."""

    __slots__ = ("_hash", "_digest", "chars", "parts")

    def __init__(self, keep: bool = False) -> None:
        self._hash: Any = hashlib.sha256()
        self._digest: str | None = None
        self.chars = 0  # code points, as the server's text has them
        self.parts: list[str] | None = [] if keep else None

    def add(self, text: str) -> None:
        # surrogatepass: JSON may carry a lone surrogate ("\ud800"); digested as sent
        self._hash.update(text.encode("utf-8", "surrogatepass"))
        self.chars += len(text)
        if self.parts is not None:
            self.parts.append(text)

    @property
    def sha256(self) -> str:
        return self._digest if self._digest is not None else self._hash.hexdigest()

    @property
    def text(self) -> str | None:
        """The text, where kept (as valid UTF-8: safe_text)."""
        return None if self.parts is None else safe_text("".join(self.parts))

    def __getstate__(self) -> tuple[str, int, list[str] | None]:
        return self.sha256, self.chars, self.parts

    def __setstate__(self, state: tuple[str, int, list[str] | None]) -> None:
        self._hash = None
        self._digest, self.chars, self.parts = state


# The start of the error of a stream that a server ended with [DONE] but no finish_reason:
# llama-cpp-python, by default, ends the stream in progress that way when another request
# arrives. Whatever it delivered is not an answer (T14): the request failed, and the
# progress line counts it apart (RequestRecord.cut).
STREAM_CUT = "stream cut"


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
    usage: object = None  # the last usage value the stream reported, unjudged
    chunks: int = 0
    finish_reason: str | None = None
    t_submit_ns: int = 0
    t_done_ns: int | None = None
    content_event_ns: list[int] = field(default_factory=list)
    # A reasoning model's thinking, stamped like content but kept apart from it (its events
    # are never content events, so never the TTFT): the reasoning-bearing events, and the
    # first and last of their stamps (None: no reasoning event).
    reasoning_chunks: int = 0
    t_first_reasoning_ns: int | None = None
    t_last_reasoning_ns: int | None = None
    # The longest lag of the client's event loop while the decode span ran (the measured
    # part only; benchledger.client.ruler.lag_during): its stamps were late by up to this.
    client_lag_ns: int | None = None
    # What the arm's token count keeps of the events; it gives the row's output_tokens.
    tally: Tally = field(default_factory=UsageTally)
    # A prepared workload's request (issue #26; None for the built-in prompt sets): the chat
    # messages it sends instead of prompt.text, its session and turn, its shared-prefix
    # group, the input length asked for, the dataset's reply of this turn, and when an
    # open-loop schedule had it due (perf_counter_ns, like t_submit_ns).
    messages: list[dict[str, str]] | None = None
    session: int | None = None
    turn: int | None = None
    prefix_group: int | None = None
    requested_input_tokens: int | None = None
    dataset_answer: str | None = None
    t_scheduled_ns: int | None = None
    # What came back: the answer and the reasoning, digested as they arrive; their text is
    # kept where the sweep asks (keep_output_text) or a multi-turn session sends the
    # server's answer back (its next turn's history).
    keep_answer: bool = False
    keep_text: bool = False
    received: Received = field(init=False)
    reasoning_received: Received | None = None  # made at the first reasoning event
    # The stream ended without a finish_reason ([DONE] too early, or no [DONE] at all): a
    # failed request the progress line counts as cut.
    cut: bool = False

    def __post_init__(self) -> None:
        self.received = Received(keep=self.keep_answer or self.keep_text)

    def add_reasoning(self, text: str) -> None:
        if self.reasoning_received is None:
            self.reasoning_received = Received(keep=self.keep_text)
        self.reasoning_received.add(text)

    @property
    def answer(self) -> str:
        """The answer's text (kept: keep_answer or keep_text; else empty)."""
        return self.received.text or ""

    def answered(self) -> dict[str, Any]:
        """The row's columns of what came back. NULL where nothing could have: no 200
        answer (an error page is not an answer), or no reasoning event for the reasoning."""
        answer, thought = self.received, self.reasoning_received
        streamed = self.http_status == 200
        return {
            "answer_sha256": answer.sha256 if streamed else None,
            "answer_chars": answer.chars if streamed else None,
            "reasoning_sha256": thought.sha256 if thought is not None else None,
            "reasoning_chars": thought.chars if thought is not None else None,
            "answer_text": answer.text if streamed and self.keep_text else None,
            "reasoning_text": thought.text if thought is not None and self.keep_text
            else None,
        }

    def sent_messages(self) -> list[dict[str, str]]:
        """The chat messages this request sent (a plain prompt as one user message)."""
        return self.messages if self.messages is not None else \
            [{"role": "user", "content": self.prompt.text}]

    def fail(self, message: str) -> None:
        self.status = "failed"
        self.error = safe_text(message[:2000])

    def cut_short(self, message: str) -> None:
        """The stream ended before a finish_reason said the answer was whole."""
        self.fail(message)
        self.cut = True

    def counted(self, usage: Usage) -> Count:
        """(output_tokens, token_source, notes): the count the arm's token_count names, or
        None with token_source 'missing' and why."""
        return self.tally.counted(usage, self.chunks)

    def row(self) -> dict[str, Any]:
        usage = read_usage(self.usage)
        output_tokens, token_source, count_notes = self.counted(usage)
        error = "; ".join(filter(None, (self.error, *usage.notes, *count_notes))) or None
        events = self.content_event_ns
        return {
            "request_id": self.request_id,
            "window_id": self.window_id,
            "seq": self.seq,
            "is_warmup": self.is_warmup,
            "status": self.status,
            "http_status": self.http_status,
            "error": safe_text(error[:2000]) if error else None,
            "prompt_id": self.prompt.id,
            "prompt_sha256": self.prompt.sha256,
            "prompt_prefix": self.prompt_prefix,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "prompt_tokens": usage.prompt_tokens,
            "output_tokens": output_tokens,
            "cached_tokens": usage.cached_tokens,
            "token_source": token_source,
            "usage_output_tokens": usage.output_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "chunks": self.chunks,
            "reasoning_chunks": self.reasoning_chunks,
            "finish_reason": self.finish_reason,
            "t_submit_ns": self.t_submit_ns,
            "t_first_ns": events[0] if events else None,
            "t_last_ns": events[-1] if events else None,
            "t_done_ns": self.t_done_ns,
            "t_first_reasoning_ns": self.t_first_reasoning_ns,
            "t_last_reasoning_ns": self.t_last_reasoning_ns,
            "content_event_ns": list(events),
            "client_lag_ms": None if self.client_lag_ns is None else self.client_lag_ns / 1e6,
            "content_event_tokens": self.tally.per_event_tokens(len(events)),
            "session": self.session,
            "turn": self.turn,
            "prefix_group": self.prefix_group,
            "requested_input_tokens": self.requested_input_tokens,
            "t_scheduled_ns": self.t_scheduled_ns,
            **self.answered(),
        }


def calibration_request_id(window_id: str, i: int) -> str:
    """The id a window's calibration request `i` is sent with (never a row's: a calibration
    sample lives in the window's manifest)."""
    return f"{window_id}/c{i:04d}"


def new_record(spec: WindowSpec, is_warmup: bool, i: int, tally: Tally,
               history: list[dict[str, str]] | None = None,
               keep_answer: bool = False) -> RequestRecord:
    """The window's request number `i` of its warm-up or measured part. `history`: a
    multi-turn session's earlier messages, sent before this turn's own."""
    request_id = f"{spec.window_id}/{'w' if is_warmup else 'm'}{i:04d}"
    prefix = cold_prefix(spec.seed, request_id) if spec.prompt_cache == "cold" else None
    if spec.items is not None:
        item = item_request(spec.items, i, history, prefix)
        return RequestRecord(
            request_id=request_id, window_id=spec.window_id, seq=i, is_warmup=is_warmup,
            prompt=item.prompt, max_tokens=item.max_tokens or spec.max_tokens,
            temperature=spec.temperature, tally=tally, messages=item.messages,
            session=item.session, turn=item.turn, prefix_group=item.prefix_group,
            requested_input_tokens=item.requested_input_tokens, dataset_answer=item.answer,
            keep_answer=keep_answer, keep_text=spec.keep_output_text, prompt_prefix=prefix)
    return RequestRecord(
        request_id=request_id,
        window_id=spec.window_id,
        seq=i,
        is_warmup=is_warmup,
        prompt=shape_prompt(spec.prompts[i % len(spec.prompts)], prefix, spec.input_tokens),
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        prompt_prefix=prefix,
        tally=tally,
        keep_text=spec.keep_output_text,
    )
