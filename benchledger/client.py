"""The measurement client: the only code that speaks HTTP to a model server under test.

It streams OpenAI-compatible completions (vLLM, SGLang, llama.cpp's server, the built-in
simulator: one code path for all) and records one raw row per request. It never counts
chunks as tokens (docs/protocol.md, trap T1): output tokens come from where the arm's
`token_count` says, each named in the row's token_source: the usage the server reports for
that request (`usage`), the tokens listed in its streamed logprobs, counted per event
(`logprobs`), or the received text counted by the server's own tokenizer endpoint after the
window, calibrated against non-streamed usage (`server_tokenizer`). Chunks are counted
separately, and a request whose count cannot be had is recorded with token_source =
'missing' instead of being guessed. When the warm-up shows that the arm's source gives no
count at all, the window stops there (TokenCountUnavailable), naming the alternatives.

Nothing a server sends can lose a window. The stream is split into events by a small SSE
reader of our own (`SSEReader`) rather than httpx-sse, which would decode bytes with
replacement characters and skip lines that are not SSE fields (where llama.cpp's server puts
its errors) without a word, has no bound on an event's size, and stamps an event when the
parser gets to it rather than when the network read delivered it. Each event is read by
`parse_event`, a pure function that never raises: an
event of an unexpected shape (not UTF-8, not JSON, not an object, `choices` that are not
objects, ...) fails only its own request, with an error naming the event and what was wrong.
Usage is read by `read_usage` when the row is built: integer counts are recorded exactly as
reported (a gate rule, not the client, judges negative or absurd counts); a count that is not
an integer in int64 range is NULL and the row's error names the field and its raw value.

Every wait is bounded: a request has a total deadline (`request_timeout_s`, not httpx's
per-read timeout), and both the warm-up and the measured part of a window wait at most
`drain_timeout_s` after their last submission; requests still running then are cancelled and
recorded as `unresolved` rows.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import NamedTuple

import httpx

from benchledger.progress import DEFAULT_INTERVAL_S, PartCounter, Snapshot, reporter
from benchledger.prompts import Prompt, cold_prefix, shape_prompt
from benchledger.redaction import redact
from benchledger.rules import TOKEN_SOURCE_IS_USAGE

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# An event (or an unterminated line) larger than this fails its request: a server that never
# ends a line must not grow the measuring process without bound.
MAX_EVENT_BYTES = 16 * 1024 * 1024
ERROR_BODY_BYTES = 4096  # how much of a non-200 answer's body an error row keeps
CONNECT_TIMEOUT_S = 30.0
# After cancelling the requests still running at a drain deadline, how long to wait for
# them to unwind (closing their connections) before going on regardless.
CANCEL_GRACE_S = 5.0
# token_count = "server_tokenizer": tokenize requests in flight at once after a window (a
# window of 10^5 requests is counted in seconds, without flooding the server).
TOKENIZE_CONCURRENCY = 8


@dataclass(frozen=True)
class Target:
    """Where and what to measure."""

    base_url: str
    model: str
    endpoint: str = "chat"  # "chat" -> /v1/chat/completions, "completions" -> /v1/completions
    # Sent as `Authorization: Bearer <api_key>`; kept out of repr, rows, errors and logs.
    api_key: str | None = field(default=None, repr=False)
    token_count: str = "usage"  # usage | logprobs | server_tokenizer (the arm's key)
    tokenize_path: str = "/tokenize"  # server_tokenizer: the tokenizer endpoint

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


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
    # server_tokenizer: non-streamed requests after the window whose usage checks the
    # tokenizer's counts
    calibration_requests: int = 0


# --- reading what the server sent (pure functions, property-tested) -------------------------


def show(value: object, limit: int = 200) -> str:
    """A JSON value as the server spelled it (true, "7", 1.5), cut to `limit` characters;
    never raises (a value too deep to print is named by its type)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def safe_text(text: str) -> str:
    """`text` as valid UTF-8: a lone surrogate (JSON allows "\\ud800") cannot be written to
    Parquet, so it is escaped instead of failing the window's file."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class Event(NamedTuple):
    """What one SSE event said, read without trusting its shape."""

    done: bool = False  # the [DONE] sentinel
    content: int = 0  # choices carrying output text: chunks, never tokens (trap T1)
    finish_reason: str | None = None
    usage: object = None  # the usage value as sent (read_usage judges it); None: none sent
    problem: str | None = None  # why this event fails its request (server error, bad shape)
    # Read only when the arm asks (parse_event's `count`): the tokens the event's logprobs
    # list (None: it carried no logprobs), and its output text.
    tokens: int | None = None
    text: str | None = None


DONE = Event(done=True)


def _read_choices(choices: object, chat: bool) -> tuple[int, str | None, str | None]:
    """(content-bearing choices, finish_reason, problem) of an event's `choices`."""
    if choices is None:
        return 0, None, None
    if not isinstance(choices, list):
        return 0, None, f"choices is not a list: {show(choices)}"
    content, finish = 0, None
    field_name = "delta.content" if chat else "text"
    for index, choice in enumerate(choices):
        if not isinstance(choice, dict):
            return 0, None, f"choices[{index}] is not an object: {show(choice)}"
        if chat:  # (inline: this runs for every event of every stream)
            delta = choice.get("delta")
            if type(delta) is dict:
                text = delta.get("content")
            elif delta is None:
                text = None
            else:
                return 0, None, f"choices[{index}].delta is not an object: {show(delta)}"
        else:
            text = choice.get("text")
        if text is not None and not isinstance(text, str):
            return 0, None, f"choices[{index}].{field_name} is not a string: {show(text)}"
        if text:
            content += 1
        reason = choice.get("finish_reason")
        if reason is not None and not isinstance(reason, str):
            return 0, None, f"choices[{index}].finish_reason is not a string: {show(reason)}"
        if reason:
            finish = safe_text(reason)
    return content, finish, None


def _read_logprobs(choice: dict, index: int, chat: bool) -> tuple[int | None, str | None]:
    """(tokens listed, problem) of one choice's logprobs: chat `logprobs.content` (OpenAI's
    list of {token, logprob, bytes, top_logprobs}), completions `logprobs.tokens`; one
    entry per token. None: the choice carried no logprobs."""
    logprobs = choice.get("logprobs")
    if logprobs is None:
        return None, None
    if not isinstance(logprobs, dict):
        return None, f"choices[{index}].logprobs is not an object: {show(logprobs)}"
    key = "content" if chat else "tokens"
    entries = logprobs.get(key)
    if entries is None:
        return None, None
    if not isinstance(entries, list):
        return None, f"choices[{index}].logprobs.{key} is not a list: {show(entries)}"
    return len(entries), None


def _read_counted(choices: list, chat: bool, count: str
                  ) -> tuple[int | None, str | None, str | None]:
    """(tokens in logprobs, output text, problem) of choices _read_choices accepted: what
    token_count = "logprobs" or "server_tokenizer" needs from an event."""
    if count == "logprobs":
        total = None
        for index, choice in enumerate(choices):
            tokens, problem = _read_logprobs(choice, index, chat)
            if problem:
                return None, None, problem
            if tokens is not None:
                total = (total or 0) + tokens
        return total, None, None
    if chat:
        parts = [(c.get("delta") or {}).get("content") for c in choices]
    else:
        parts = [c.get("text") for c in choices]
    text = "".join(part for part in parts if part)
    return None, safe_text(text) if text else None, None


def parse_event(data: bytes, chat: bool = True, count: str = "usage") -> Event:
    """Read one SSE event's data. Total: any bytes give an Event, never an exception; an
    event that cannot be trusted has `problem` set, which fails (only) its request. With
    `count` "logprobs" the tokens its logprobs list are read too, with "server_tokenizer"
    its text."""
    if len(data) < 16 and data.strip() == b"[DONE]":
        return DONE
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Event(problem=f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})")
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return Event(problem=f"not JSON ({type(exc).__name__}: {str(exc)[:200]}): "
                             f"{show(text, 120)}")
    if not isinstance(payload, dict):
        return Event(problem=f"not a JSON object: {show(payload)}")
    if payload.get("error"):
        return Event(problem=f"error event: {show(payload['error'], 500)}")
    content, finish, problem = _read_choices(payload.get("choices"), chat)
    if problem:
        return Event(problem=problem)
    usage = payload.get("usage")
    if usage == {}:  # an empty usage object reports nothing; it must not hide an earlier one
        usage = None
    if count == "usage" or not isinstance(payload.get("choices"), list):
        return Event(False, content, finish, usage, None)  # positional: cheaper per event
    tokens, text, problem = _read_counted(payload["choices"], chat, count)
    if problem:
        return Event(problem=problem)
    return Event(False, content, finish, usage, None, tokens, text)


class Usage(NamedTuple):
    prompt_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    token_source: str  # usage | missing (docs/protocol.md)
    notes: tuple[str, ...]  # what could not be used, naming the field and the raw value


def _count(container: dict, key: str, where: str, notes: list[str]) -> int | None:
    """A token count as reported, or None (with a note) when it is not an int64 integer.
    Negative or absurd integers are recorded as they are: a gate rule blocks them."""
    if key not in container:
        return None
    value = container[key]
    if type(value) is not int:  # bool is an int subclass, and `true` is not a count
        notes.append(f"{where}.{key} is not an integer: {show(value)}")
        return None
    if not INT64_MIN <= value <= INT64_MAX:
        notes.append(f"{where}.{key} does not fit in int64: {show(value)}")
        return None
    return value


def read_usage(usage: object) -> Usage:
    """The row's token counts from the usage a request's stream reported (None: none)."""
    if usage is None:
        return Usage(None, None, None, "missing", ())
    if not isinstance(usage, dict):
        return Usage(None, None, None, "missing", (f"usage is not an object: {show(usage)}",))
    notes: list[str] = []
    output = _count(usage, "completion_tokens", "usage", notes)
    if "completion_tokens" not in usage:
        notes.append("usage has no completion_tokens")
    prompt = _count(usage, "prompt_tokens", "usage", notes)
    if "prompt_tokens" not in usage:
        notes.append("usage has no prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = None
    if isinstance(details, dict):
        cached = _count(details, "cached_tokens", "usage.prompt_tokens_details", notes)
    elif details is not None:
        notes.append(f"usage.prompt_tokens_details is not an object: {show(details)}")
    return Usage(prompt, output, cached, "usage" if output is not None else "missing",
                 tuple(notes))


class SSEReader:
    """Splits a byte stream into the data of its server-sent events (the WHATWG format:
    lines end in LF, CRLF or CR; `data:` lines accumulate until a blank line; `event`, `id`,
    `retry` and `:` comment lines are allowed). What fails the request sets `fault` and stops
    the reading: an `event: error` event, a line that is not an SSE field (plain text,
    llama.cpp's `error: {...}`), or an event larger than MAX_EVENT_BYTES."""

    __slots__ = ("_tail", "_after_cr", "_data", "_pending", "_event_type", "events", "fault")

    def __init__(self) -> None:
        self._tail = b""  # an unfinished line
        self._after_cr = False  # the last chunk ended in CR: an LF opening the next is its pair
        self._data: list[bytes] = []
        self._pending = 0  # bytes in _data
        self._event_type = b""
        self.events = 0  # events dispatched so far
        self.fault: str | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event that `chunk` completes, in order (up to a fault)."""
        if self._after_cr:
            self._after_cr = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        buffer = self._tail + chunk if self._tail else chunk
        if b"\r" in buffer:
            self._after_cr = buffer.endswith(b"\r")
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buffer.split(b"\n")
        self._tail = lines.pop()
        out: list[bytes] = []
        for line in lines:
            if line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                self._data.append(value)
                self._pending += len(value)
                if self._pending > MAX_EVENT_BYTES:
                    self.fault = f"an event longer than {MAX_EVENT_BYTES} bytes"
                    return out
            elif not line:
                if self._data:
                    if self._event_type == b"error":
                        self.fault = f"error event: {self._show_data()}"
                        return out
                    out.append(self._dispatch())
            elif not self._field(line):
                return out
        if len(self._tail) > MAX_EVENT_BYTES:
            self.fault = f"a line longer than {MAX_EVENT_BYTES} bytes"
        return out

    def _dispatch(self) -> bytes:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        self._data, self._pending, self._event_type = [], 0, b""
        self.events += 1
        return data

    def _show_data(self) -> str:
        return show(b"\n".join(self._data)[:500].decode("utf-8", "backslashreplace"), 500)

    def _field(self, line: bytes) -> bool:
        """A line other than data or blank: True if the format allows it."""
        if line.startswith(b":"):
            return True  # a comment (keep-alive)
        name, _, value = line.partition(b":")
        if name == b"event":
            self._event_type = value.strip()
            return True
        if name in (b"id", b"retry"):
            return True
        if name == b"data":  # "data" without a colon: an empty data line
            self._data.append(b"")
            return True
        shown = show(line[:200].decode("utf-8", "backslashreplace"))
        self.fault = f"a line that is not an SSE field after event {self.events}: {shown}"
        return False

    def leftover(self) -> str | None:
        """What the stream left unfinished when it ended (for the error row)."""
        if not self._data and not self._tail:
            return None
        head = b"\n".join([*self._data, self._tail])[:120]
        return f"an unfinished event at the end: {show(head.decode('utf-8', 'backslashreplace'))}"


# --- one request ----------------------------------------------------------------------------


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
    token_count: str = "usage"  # where output_tokens come from (the arm's token_count)
    # token_count = "logprobs": the tokens listed per content-bearing event (parallel to
    # content_event_ns), their sum, tokens listed by events without text (credited to the
    # next text-bearing event) and text-bearing events that listed none.
    event_tokens: list[int] = field(default_factory=list)
    logprob_tokens: int = 0
    pending_tokens: int = 0
    unlogged_events: int = 0
    # token_count = "server_tokenizer": the received text (until counted), and the count.
    text_parts: list[str] = field(default_factory=list)
    tokenizer_tokens: int | None = None
    tokenizer_error: str | None = None

    def fail(self, message: str) -> None:
        self.status = "failed"
        self.error = safe_text(message[:2000])

    def tally(self, event: Event) -> None:
        """What token_count = "logprobs" or "server_tokenizer" keeps of one event."""
        if self.token_count != "logprobs":
            if event.text:
                self.text_parts.append(event.text)
            return
        if event.tokens is None:
            self.unlogged_events += event.content > 0
            return
        self.logprob_tokens += event.tokens
        if not event.content:
            self.pending_tokens += event.tokens
            return
        self.event_tokens.append(event.tokens + self.pending_tokens)
        self.event_tokens.extend([0] * (event.content - 1))  # n > 1 choices: on the first
        self.pending_tokens = 0

    def counted(self, usage: Usage) -> tuple[int | None, str, tuple[str, ...]]:
        """(output_tokens, token_source, notes): the count the arm's token_count names, or
        None with token_source 'missing' and why."""
        if self.token_count == "logprobs":
            if self.unlogged_events:
                return None, "missing", (f"{self.unlogged_events} of {self.chunks} "
                                         "text-bearing events listed no logprobs",)
            return self.logprob_tokens, "logprobs", ()
        if self.token_count == "server_tokenizer":
            if self.tokenizer_tokens is None:
                return None, "missing", (f"not counted by the server's tokenizer: "
                                         f"{self.tokenizer_error or 'no count'}",)
            return self.tokenizer_tokens, "server_tokenizer", ()
        return usage.output_tokens, usage.token_source, ()

    def per_event_tokens(self) -> list[int] | None:
        """Tokens of each text-bearing event, where the logprobs gave all of them."""
        if self.token_count != "logprobs" or self.unlogged_events \
                or len(self.event_tokens) != len(self.content_event_ns):
            return None
        tokens = list(self.event_tokens)
        if tokens and self.pending_tokens:  # listed after the last text: that event's
            tokens[-1] += self.pending_tokens
        return tokens

    def row(self) -> dict:
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
            "chunks": self.chunks,
            "finish_reason": self.finish_reason,
            "t_submit_ns": self.t_submit_ns,
            "t_first_ns": events[0] if events else None,
            "t_last_ns": events[-1] if events else None,
            "t_done_ns": self.t_done_ns,
            "content_event_ns": list(events),
            "content_event_tokens": self.per_event_tokens(),
        }


@dataclass
class WindowResult:
    rows: list[dict]
    accounting: dict


def request_body(target: Target, record: RequestRecord, stream: bool = True
                 ) -> tuple[str, dict]:
    """The OpenAI-compatible request: streamed, asking for per-request usage (and for
    token_count = "logprobs", for the logprobs of every token). Not streamed (a
    calibration request), usage comes with the answer."""
    body: dict = {
        "model": target.model,
        "max_tokens": record.max_tokens,
        "temperature": record.temperature,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if target.token_count == "logprobs":
        # chat: a boolean, and no top alternatives asked for by name: llama-cpp-python's
        # server streams no chat logprobs at all unless top_logprobs is given (0 is valid
        # in OpenAI's API, vLLM and SGLang). completions: the alternatives per token.
        if target.endpoint == "chat":
            body |= {"logprobs": True, "top_logprobs": 0}
        else:
            body["logprobs"] = 1
    if target.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": record.prompt.text}]
        return "/v1/chat/completions", body
    body["prompt"] = record.prompt.text
    return "/v1/completions", body


async def _body_head(response: httpx.Response) -> str:
    """The start of an answer's body (an error page may be large, or never end)."""
    head = b""
    async for part in response.aiter_bytes():
        head += part
        if len(head) >= ERROR_BODY_BYTES:
            break
    return head[:ERROR_BODY_BYTES].decode("utf-8", "replace").strip()


async def _read_stream(response: httpx.Response, record: RequestRecord, chat: bool) -> None:
    """Fill `record` from a 200 answer's event stream, then set its outcome."""
    content_type = response.headers.get("content-type", "")
    if not content_type.lower().startswith("text/event-stream"):  # media types ignore case
        record.fail(f"HTTP 200 but Content-Type {content_type!r}, not text/event-stream: "
                    f"{(await _body_head(response))[:500]}")
        return
    reader = SSEReader()
    stamps = record.content_event_ns
    count = record.token_count
    async for chunk in response.aiter_bytes():
        now = time.perf_counter_ns()  # every event in this chunk arrived now
        seen = reader.events
        for number, data in enumerate(reader.feed(chunk), seen + 1):
            event = parse_event(data, chat, count)
            if event.done:
                record.status = "completed"
                return
            if event.problem:
                record.fail(f"event {number}: {event.problem}")
                return
            if event.content == 1:
                record.chunks += 1
                stamps.append(now)
            elif event.content:
                record.chunks += event.content
                stamps.extend([now] * event.content)
            if event.usage is not None:
                record.usage = event.usage
            if event.finish_reason:
                record.finish_reason = event.finish_reason
            if count != "usage":
                record.tally(event)
        if reader.fault:
            record.fail(f"malformed stream: {reader.fault}")
            return
    if record.finish_reason:
        record.status = "completed"
        return
    unfinished = reader.leftover()
    record.fail("stream ended without [DONE] or a finish_reason"
                + (f" ({unfinished})" if unfinished else ""))


def exception_text(exc: BaseException, http_status: int | None) -> str:
    """What an exception that ended a request says, for the row's error. Some say nothing
    (httpx's ReadError for a connection reset mid-stream has an empty message, which would
    leave a bare `ReadError: `): then what happened is named from the exception's kind and
    how far the request had got (`http_status`: None before the answer's status line)."""
    message = str(exc)
    if message.strip():
        return message
    if http_status is None:
        where = "before the server answered"
    elif http_status == 200:
        where = "mid-stream"
    else:
        where = f"while its HTTP {http_status} answer was read"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out {where}"
    if isinstance(exc, httpx.ConnectError):
        return "no connection to the server could be made"
    if isinstance(exc, (httpx.NetworkError, httpx.RemoteProtocolError)):
        return f"the connection was closed or reset by the server {where}"
    return f"no message given ({where})"


async def _stream_one(http: httpx.AsyncClient, target: Target, record: RequestRecord,
                      request_timeout_s: float) -> None:
    """Send one request and fill `record` as events arrive. Any outcome is recorded on the
    record; only cancellation (a drain deadline) leaves it, still `unresolved`."""
    path, body = request_body(target, record)
    url = target.base_url.rstrip("/") + path
    record.t_submit_ns = time.perf_counter_ns()
    try:
        async with asyncio.timeout(request_timeout_s), \
                http.stream("POST", url, json=body) as response:
            record.http_status = response.status_code
            if response.status_code != 200:
                record.fail(f"HTTP {response.status_code}: {(await _body_head(response))[:500]}")
            else:
                await _read_stream(response, record, target.endpoint == "chat")
    except TimeoutError:
        record.fail(f"no complete answer within request_timeout_s ({request_timeout_s:g} s)")
    except httpx.HTTPError as exc:
        record.fail(f"{type(exc).__name__}: {exception_text(exc, record.http_status)}")
    except Exception as exc:  # noqa: BLE001 (whatever one request hits must not end the window)
        record.fail(f"unexpected {type(exc).__name__} while streaming: "
                    f"{exception_text(exc, record.http_status)}")
    finally:
        record.t_done_ns = time.perf_counter_ns()


# --- counting with the server's tokenizer (token_count = "server_tokenizer") ----------------


class TokenCountUnavailable(RuntimeError):
    """The warm-up showed that the arm's token_count gets no count from this server: the
    window stops there (measuring it would only produce requests no rule lets through)."""


def tokenize_body(target: Target, text: str) -> dict:
    """One body every known tokenizer endpoint reads, each its own fields, ignoring the
    others': vLLM `/tokenize` (`prompt`, `add_special_tokens`), llama.cpp's server
    `/tokenize` (`content`, `add_special`), llama-cpp-python `/extras/tokenize` (`input`),
    TGI `/tokenize` (`inputs`). Special tokens are asked to be left out; where a server
    adds them anyway (llama-cpp-python's BOS), the count of the empty text is subtracted."""
    return {"model": target.model, "prompt": text, "add_special_tokens": False,
            "content": text, "add_special": False, "input": text, "inputs": text}


def read_token_count(payload: object) -> int | None:
    """The token count of a tokenizer answer: vLLM's `count`, else the length of `tokens`
    (vLLM, llama.cpp, llama-cpp-python), else of the answer itself (TGI's list)."""
    if isinstance(payload, dict):
        count = payload.get("count")
        if type(count) is int and count >= 0:
            return count
        payload = payload.get("tokens")
    return len(payload) if isinstance(payload, list) else None


async def tokenizer_count(http: httpx.AsyncClient, target: Target, text: str,
                          timeout_s: float) -> tuple[int | None, str | None]:
    """(tokens, None) or (None, why): the server's tokenizer's count of `text`."""
    url = target.base_url.rstrip("/") + target.tokenize_path
    try:
        async with asyncio.timeout(timeout_s):
            response = await http.post(url, json=tokenize_body(target, text))
    except TimeoutError:
        return None, f"{target.tokenize_path}: no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return None, f"{target.tokenize_path}: {type(exc).__name__}: {exception_text(exc, None)}"
    if response.status_code != 200:
        return None, (f"{target.tokenize_path}: HTTP {response.status_code}: "
                      f"{response.text[:200]}")
    try:
        count = read_token_count(response.json())
    except ValueError:
        count = None
    if count is None:
        return None, f"{target.tokenize_path}: no token count in {show(response.text, 200)}"
    return count, None


async def _special_tokens(http: httpx.AsyncClient, target: Target, timeout_s: float) -> int:
    """Tokens the endpoint adds to any text (a BOS it puts in front regardless): its count
    of the empty text; 0 when it cannot count that (the calibration still checks)."""
    count, _ = await tokenizer_count(http, target, "", timeout_s)
    return count or 0


async def count_received_text(http: httpx.AsyncClient, target: Target,
                              records: list[RequestRecord], special: int,
                              timeout_s: float) -> None:
    """Count each completed request's received text with the server's tokenizer (at most
    TOKENIZE_CONCURRENCY at once), then let go of the text."""
    gate = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

    async def one(record: RequestRecord) -> None:
        async with gate:
            count, error = await tokenizer_count(http, target, "".join(record.text_parts),
                                                 timeout_s)
        record.tokenizer_tokens = None if count is None else max(0, count - special)
        record.tokenizer_error = error
        record.text_parts = []

    await asyncio.gather(*(one(r) for r in records if r.status == "completed"))


def _answer_text(payload: dict, chat: bool) -> str | None:
    """The text of a non-streamed answer's first choice."""
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    if chat:
        message = choices[0].get("message")
        text = message.get("content") if isinstance(message, dict) else None
    else:
        text = choices[0].get("text")
    return text if isinstance(text, str) else None


async def _calibration_one(http: httpx.AsyncClient, target: Target, record: RequestRecord,
                           special: int, timeout_s: float) -> dict:
    """One non-streamed request: its usage's output tokens beside the tokenizer's count of
    the very text it returned."""
    out = {"prompt_id": record.prompt.id, "usage_output_tokens": None,
           "tokenizer_tokens": None, "error": None}
    path, body = request_body(target, record, stream=False)
    try:
        async with asyncio.timeout(timeout_s):
            response = await http.post(target.base_url.rstrip("/") + path, json=body)
        payload = response.json() if response.status_code == 200 else None
    except (TimeoutError, httpx.HTTPError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200] or 'no answer'}"
        return out
    if not isinstance(payload, dict):
        out["error"] = f"HTTP {response.status_code}: {response.text[:200]}"
        return out
    out["usage_output_tokens"] = read_usage(payload.get("usage")).output_tokens
    text = _answer_text(payload, target.endpoint == "chat")
    if text is None:
        out["error"] = "the answer has no text"
        return out
    count, error = await tokenizer_count(http, target, text, timeout_s)
    out["tokenizer_tokens"] = None if count is None else max(0, count - special)
    out["error"] = error if error else (None if out["usage_output_tokens"] is not None
                                        else "the non-streamed answer has no usage")
    return out


def calibration_summary(samples: list[dict]) -> dict:
    """How the tokenizer's counts compare with usage on the calibration requests: the
    relative error of the totals (what the rule judges) and the worst single request."""
    pairs = [(s["tokenizer_tokens"], s["usage_output_tokens"]) for s in samples
             if s["tokenizer_tokens"] is not None and s["usage_output_tokens"] is not None]
    summary = {"calibration_requests": len(samples), "calibration_compared": len(pairs),
               "calibration_rel_error": None, "calibration_max_rel_error": None}
    if not pairs:
        errors = sorted({s["error"] for s in samples if s["error"]})
        summary["calibration_detail"] = (f"0 of {len(samples)} calibration requests had both "
                                         f"counts: {'; '.join(errors)[:500] or 'none sent'}")
        return summary
    counted, usage = (sum(column) for column in zip(*pairs, strict=True))
    total = abs(counted - usage) / max(usage, 1)
    worst = max(abs(t - u) / max(u, 1) for t, u in pairs)
    summary.update(calibration_rel_error=total, calibration_max_rel_error=worst,
                   calibration_detail=(
                       f"{len(pairs)} of {len(samples)} calibration requests: tokenizer "
                       f"{counted} vs usage {usage} output tokens "
                       f"({(counted - usage) / max(usage, 1):+.2%}); worst request "
                       f"{worst:.2%}"))
    return summary


async def calibrate(http: httpx.AsyncClient, target: Target, spec: WindowSpec,
                    special: int) -> dict:
    """spec.calibration_requests non-streamed requests with the window's first prompts
    (at most `concurrency` at once); their summary and each sample, for the manifest."""
    gate = asyncio.Semaphore(spec.concurrency)
    records = [_record(spec, False, i) for i in range(spec.calibration_requests)]

    async def one(record: RequestRecord) -> dict:
        async with gate:
            return await _calibration_one(http, target, record, special,
                                          spec.request_timeout_s)

    samples = list(await asyncio.gather(*(one(r) for r in records)))
    return {**calibration_summary(samples), "calibration": samples}


# --- what the warm-up shows ------------------------------------------------------------------


def warmup_problem(token_count: str, warmup: list[RequestRecord],
                   tokenize_path: str = "/tokenize") -> str | None:
    """Why the arm's token_count gets no count from this server, when not one completed
    warm-up request got one (None: some did, or no warm-up request completed)."""
    completed = [r for r in warmup if r.status == "completed"]
    if not completed or any(r.counted(read_usage(r.usage))[1] != "missing" for r in completed):
        return None
    n = len(completed)
    if token_count == "usage":
        return (f"the server reported no usage for any of the {n} completed warm-up "
                "requests (it ignores stream_options.include_usage), so every entry would "
                f"be blocked by {TOKEN_SOURCE_IS_USAGE.name}. Set the arm's token_count = "
                '"logprobs" (the tokens listed in the streamed logprobs of each event) or '
                'token_count = "server_tokenizer" (the received text counted by the '
                "server's tokenizer endpoint, tokenize_path)")
    if token_count == "logprobs":
        return (f"the server streamed no logprobs with the text of any of the {n} completed "
                'warm-up requests (asked for with "logprobs"), so token_count = "logprobs" '
                'counts nothing here; try token_count = "server_tokenizer" or "usage"')
    first = next((r.tokenizer_error for r in completed if r.tokenizer_error), "no count")
    return (f"the server's tokenizer endpoint counted none of the {n} completed warm-up "
            f"requests ({first}); set tokenize_path to the server's endpoint (vLLM, "
            "llama.cpp's server: /tokenize; llama-cpp-python: /extras/tokenize) or use "
            'token_count = "logprobs" or "usage"')


# --- a window -------------------------------------------------------------------------------


def poisson_arrivals(rate_rps: float, seed: int) -> Iterator[float]:
    """Seeded open-loop arrival times (seconds from the first): exponential gaps, lazily
    (a window of 10^9 requests must not build its schedule before sending anything)."""
    rng = random.Random(seed)
    t = 0.0
    yield t
    while True:
        t += rng.expovariate(rate_rps)
        yield t


def poisson_offsets(count: int, rate_rps: float, seed: int) -> list[float]:
    """The first `count` arrival times of poisson_arrivals."""
    return list(islice(poisson_arrivals(rate_rps, seed), count))


async def _drain(in_flight: dict[asyncio.Task, RequestRecord], drain_timeout_s: float,
                 what: str) -> int | None:
    """Wait at most `drain_timeout_s` for the running requests; cancel the rest, which stay
    `unresolved` rows (docs/protocol.md, trap T14). Returns the deadline if it was hit."""
    deadline_ns = time.perf_counter_ns() + int(drain_timeout_s * 1e9)
    if not in_flight:
        return None
    _, pending = await asyncio.wait(in_flight, timeout=drain_timeout_s)
    if not pending:
        return None
    for task in pending:
        task.cancel()
    # Bounded too: a request that does not unwind in time is left to the loop's shutdown.
    await asyncio.wait(pending, timeout=CANCEL_GRACE_S)
    for task in pending:
        # Cancellation must not turn it into a failure: its outcome is unknown.
        record = in_flight[task]
        record.status = "unresolved"
        record.error = f"{what} still running at the drain deadline ({drain_timeout_s:g} s)"
        record.t_done_ns = None
    return deadline_ns


async def _drive(http: httpx.AsyncClient, target: Target, spec: WindowSpec, is_warmup: bool,
                 records: list[RequestRecord], offsets: Iterator[float] | None = None,
                 progress: PartCounter | None = None) -> int | None:
    """Submit the part's requests (creating each record as it is submitted, into
    `records`), then drain; returns the drain deadline if it was hit.

    Closed loop (offsets None): a new request as soon as fewer than `concurrency` are
    outstanding. Open loop: each request at its scheduled offset, still capped at
    `concurrency` outstanding (a late submission shows in the achieved rate). After the
    last submission the part waits at most `drain_timeout_s`, warm-up included.
    """
    total = spec.warmup if is_warmup else spec.requests
    in_flight: dict[asyncio.Task, RequestRecord] = {}
    start = time.perf_counter()
    schedule = offsets if offsets is not None else iter(())
    for i in range(total):
        while len(in_flight) >= spec.concurrency:
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                in_flight.pop(task)
        if offsets is not None and (delay := start + next(schedule) - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        record = _record(spec, is_warmup, i, target.token_count)
        records.append(record)
        task = asyncio.create_task(_stream_one(http, target, record, spec.request_timeout_s))
        in_flight[task] = record
        if progress is not None:
            progress.submitted(task, record)
    if progress is not None:
        progress.draining(spec.drain_timeout_s)
    return await _drain(in_flight, spec.drain_timeout_s,
                        "warm-up request" if is_warmup else "request")


def _record(spec: WindowSpec, is_warmup: bool, i: int, token_count: str = "usage"
            ) -> RequestRecord:
    request_id = f"{spec.window_id}/{'w' if is_warmup else 'm'}{i:04d}"
    prefix = cold_prefix(spec.seed, request_id) if spec.prompt_cache == "cold" else None
    return RequestRecord(
        request_id=request_id,
        window_id=spec.window_id,
        seq=i,
        is_warmup=is_warmup,
        prompt=shape_prompt(spec.prompts[i % len(spec.prompts)], prefix, spec.input_tokens),
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        prompt_prefix=prefix,
        token_count=token_count,
    )


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
        **{f"warmup_{s}": sum(r.status == s for r in warmup)
           for s in ("completed", "failed", "unresolved")},
        "drain_status": "complete" if counts["unresolved"] == 0 else "incomplete",
        "drain_timeout_s": spec.drain_timeout_s,
        "request_timeout_s": spec.request_timeout_s,
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


def _delivered_tokens(record: RequestRecord) -> int | None:
    """A completed request's output tokens as its row will count them (for progress; the
    server's tokenizer counts only after the window, so until then there are none)."""
    return record.counted(read_usage(record.usage))[0]


async def measure_window_async(target: Target, spec: WindowSpec,
                               on_start: Callable[[], None] | None = None,
                               on_stop: Callable[[], None] | None = None,
                               on_progress: Callable[[Snapshot], None] | None = None,
                               progress_interval_s: float = DEFAULT_INTERVAL_S
                               ) -> WindowResult:
    """Warm-up, then the measured window; on_start/on_stop bracket only the measured part
    (counter scrapes, log slices and clock sampling must not include warm-up). on_progress
    gets a snapshot of the running part every progress_interval_s, and the measured
    part's last one (benchledger.progress).

    token_count = "server_tokenizer": the received texts are counted with the server's
    tokenizer after the measured part (outside the counters' bracket, never while requests
    are timed), then the calibration requests run. Raises TokenCountUnavailable, before
    the measured part, when no completed warm-up request got a count of the arm's kind."""
    warmup: list[RequestRecord] = []
    measured: list[RequestRecord] = []
    # httpx's read timeout is per read; the total deadline is asyncio.timeout in _stream_one.
    timeout = httpx.Timeout(spec.request_timeout_s,
                            connect=min(CONNECT_TIMEOUT_S, spec.request_timeout_s))
    limits = httpx.Limits(max_connections=spec.concurrency + 4)
    async with httpx.AsyncClient(timeout=timeout, limits=limits,
                                 headers=target.headers()) as http, \
            reporter(on_progress, progress_interval_s, _delivered_tokens) as progress:
        # Warm-up runs first and outside the window; its rows are kept, flagged is_warmup.
        await _drive(http, target, spec, True, warmup,
                     progress=progress.part(spec.window_id, "warm-up", spec.warmup))
        special = 0
        if target.token_count == "server_tokenizer":
            special = await _special_tokens(http, target, spec.request_timeout_s)
            await count_received_text(http, target, warmup, special, spec.request_timeout_s)
        problem = warmup_problem(target.token_count, warmup, target.tokenize_path)
        if problem:
            raise TokenCountUnavailable(problem)
        offsets = (poisson_arrivals(spec.rate_rps, spec.seed)
                   if spec.arrival == "poisson" else None)
        if on_start:
            await asyncio.to_thread(on_start)
        anchor = (time.time_ns(), time.perf_counter_ns())
        deadline = await _drive(http, target, spec, False, measured, offsets,
                                progress.part(spec.window_id, "measuring", spec.requests))
        await progress.finish()
        if on_stop:
            await asyncio.to_thread(on_stop)
        counting: dict = {"token_count": target.token_count}
        if target.token_count == "server_tokenizer":
            await count_received_text(http, target, measured, special, spec.request_timeout_s)
            counting.update(await calibrate(http, target, spec, special),
                            tokenizer_special_tokens=special)
    rows = [r.row() for r in warmup + measured]
    if target.api_key:  # the texts a server controls: it may echo the key back
        for row in rows:
            row["error"] = redact(row["error"], target.api_key)
            row["finish_reason"] = redact(row["finish_reason"], target.api_key)
    accounting = _accounting(spec, measured, warmup, anchor, deadline)
    return WindowResult(rows=rows, accounting={**accounting, **counting})


def measure_window(target: Target, spec: WindowSpec,
                   on_start: Callable[[], None] | None = None,
                   on_stop: Callable[[], None] | None = None,
                   on_progress: Callable[[Snapshot], None] | None = None,
                   progress_interval_s: float = DEFAULT_INTERVAL_S) -> WindowResult:
    """Run one window to the end (synchronous entry point for tasks and tests)."""
    return asyncio.run(measure_window_async(target, spec, on_start, on_stop, on_progress,
                                            progress_interval_s))
