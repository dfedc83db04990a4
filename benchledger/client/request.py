"""One request: its body, sending it, and reading its stream into its record as the events
arrive. Any outcome is recorded on the record; whatever one request hits never ends the
window.

The stream is read with aiohttp (its HTTP parser is C, llhttp) on the worker's uvloop:
per network read the client pays tens of microseconds where httpx's pure-Python stack
paid over a hundred, which is what decides how late events are stamped once hundreds of
streams share one core (benchmarks/client_fidelity.py). Each read is stamped the moment
the stream's task gets it, before any of it is parsed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from benchledger.client.endpoint import Endpoint, ReadCounted
from benchledger.client.events import parse_event
from benchledger.client.record import STREAM_CUT, RequestRecord
from benchledger.client.sse import SSEReader
from benchledger.client.target import Target

ERROR_BODY_BYTES = 4096  # how much of a non-200 answer's body an error row keeps
# Names each request to the server as the row names it (its request_id: run, arm, restart,
# window and sequence, so unique across runs and the same when a window is retried). vLLM
# takes it as its own request id (chatcmpl-<id> in its request log, its answer and its
# traces); SGLang and most gateways log it. docs/protocol.md, "Request ids: finding a
# request in the server's records".
REQUEST_ID_HEADER = "X-Request-Id"


def request_headers(target: Target, request_id: str) -> dict[str, str]:
    """The headers a request carries beside the target's own (its API key): its id, unless
    the arm says the server refuses it (request_id_header = false)."""
    return {REQUEST_ID_HEADER: request_id} if target.request_id_header else {}


def request_body(target: Target, record: RequestRecord, stream: bool = True
                 ) -> tuple[str, dict[str, Any]]:
    """The OpenAI-compatible request: streamed, asking for per-request usage (and for
    token_count = "logprobs", for the logprobs of every token). Not streamed (a
    calibration request), usage comes with the answer."""
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": record.max_tokens,
        "temperature": record.temperature,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    body |= target.token_count.request_fields(target.endpoint)
    if record.messages is not None:  # a dataset's messages, a session's history (chat only)
        body["messages"] = record.messages
    else:
        body |= target.endpoint.prompt_fields(record.prompt.text)
    return target.endpoint.path, body


def _empty_body(status: int, headers: dict[str, str]) -> str:
    """What an error answer with no body is said as: for a 400 to a request that carried
    its id, that header, the likeliest thing refused (llama-cpp-python's server answers so
    to any X-Request-Id that is not a UUID)."""
    if status == 400 and REQUEST_ID_HEADER in headers:
        return (f"(an empty body; the request carried {REQUEST_ID_HEADER}: "
                f"{headers[REQUEST_ID_HEADER]}: a server that refuses it, as "
                "llama-cpp-python's does any id that is not a UUID, needs the arm's "
                "request_id_header = false)")
    return "(an empty body)"


async def _body_head(response: aiohttp.ClientResponse) -> str:
    """The start of an answer's body (an error page may be large, or never end)."""
    head = b""
    async for part in response.content.iter_any():
        head += part
        if len(head) >= ERROR_BODY_BYTES:
            break
    return head[:ERROR_BODY_BYTES].decode("utf-8", "replace").strip()


async def _read_stream(response: aiohttp.ClientResponse, record: RequestRecord,
                       endpoint: Endpoint,
                       counted: ReadCounted | None) -> None:
    """Fill `record` from a 200 answer's event stream, then set its outcome. `counted`:
    what the arm's token count reads of each event, for the record's tally to keep."""
    content_type = response.headers.get("content-type", "")
    if not content_type.lower().startswith("text/event-stream"):  # media types ignore case
        record.fail(f"HTTP 200 but Content-Type {content_type!r}, not text/event-stream: "
                    f"{(await _body_head(response))[:500]}")
        return
    reader = SSEReader()
    stamps = record.content_event_ns
    keep = record.tally.add
    body = response.content
    async for first in body.iter_any():
        now = time.perf_counter_ns()  # every event in this chunk arrived by now
        # What else is buffered came in before this moment too (aiohttp hands out one
        # network read at a time): one stamp for all of it, so that the events a late
        # loop finds waiting show as bunched, not as spread over microseconds.
        chunk = first + rest if (rest := body.read_nowait()) else first
        seen = reader.events
        for number, data in enumerate(reader.feed(chunk), seen + 1):
            event = parse_event(data, endpoint, counted)
            if event.done:
                if record.finish_reason:
                    record.status = "completed"
                else:  # [DONE] before the answer finished: a cut stream, never an answer
                    record.cut_short(f"{STREAM_CUT}: [DONE] arrived without a finish_reason "
                                     f"after {record.chunks} content event(s): the server "
                                     "ended the stream before the answer was finished")
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
            if event.answer:  # what came back, digested (its text kept where asked)
                record.received.add(event.answer)
            if event.thought:
                record.add_reasoning(event.thought)
            if event.reasoning:  # a reasoning model's thinking: stamped apart from content
                record.reasoning_chunks += event.reasoning
                if record.t_first_reasoning_ns is None:
                    record.t_first_reasoning_ns = now
                record.t_last_reasoning_ns = now
            if event.usage is not None:
                record.usage = event.usage
            if event.finish_reason:
                record.finish_reason = event.finish_reason
            if counted is not None:  # the usage's path reads nothing more, keeps nothing
                keep(event)
        if reader.fault:
            record.fail(f"malformed stream: {reader.fault}")
            return
    if record.finish_reason:
        record.status = "completed"
        return
    unfinished = reader.leftover()
    record.cut_short("stream ended without [DONE] or a finish_reason"
                     + (f" ({unfinished})" if unfinished else ""))


def _reset(exc: BaseException) -> bool:
    """Whether a connection reset is behind `exc` (aiohttp wraps it in a payload error)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionResetError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def exception_text(exc: BaseException, http_status: int | None) -> str:
    """What an exception that ended a request says, for the row's error: what happened,
    named from the exception's kind and how far the request had got (`http_status`: None
    before the answer's status line), then what the library said, if anything. Library
    texts alone are terse ("Server disconnected") or empty."""
    if http_status is None:
        where = "before the server answered"
    elif http_status == 200:
        where = "mid-stream"
    else:
        where = f"while its HTTP {http_status} answer was read"
    message = str(exc).strip()
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError is one
        what = f"timed out {where}"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        what = "no connection to the server could be made"
    elif _reset(exc) or isinstance(exc, (aiohttp.ClientConnectionError, ConnectionError)):
        what = f"the connection was closed or reset by the server {where}"
    elif isinstance(exc, aiohttp.ClientPayloadError):
        what = f"the answer's body was cut short or malformed {where}"
    else:
        return message or f"no message given ({where})"
    return f"{what} ({message})" if message else what


async def stream_one(http: aiohttp.ClientSession, target: Target, record: RequestRecord,
                     request_timeout_s: float) -> None:
    """Send one request and fill `record` as events arrive. Any outcome is recorded on the
    record; only cancellation (a drain deadline) leaves it, still `unresolved`."""
    path, body = request_body(target, record)
    url = target.base_url.rstrip("/") + path
    counted = target.token_count.event_reader(target.endpoint)
    headers = request_headers(target, record.request_id)
    record.t_submit_ns = time.perf_counter_ns()
    try:
        async with asyncio.timeout(request_timeout_s), \
                http.post(url, json=body, headers=headers) as response:
            record.http_status = response.status
            if response.status != 200:
                said = (await _body_head(response))[:500] or _empty_body(response.status,
                                                                          headers)
                record.fail(f"HTTP {response.status}: {said}")
            else:
                await _read_stream(response, record, target.endpoint, counted)
    except aiohttp.ClientError as exc:  # before TimeoutError: a connect timeout is both
        record.fail(f"{type(exc).__name__}: {exception_text(exc, record.http_status)}")
    except TimeoutError:  # the request's own total deadline (asyncio.timeout)
        record.fail(f"no complete answer within request_timeout_s ({request_timeout_s:g} s)")
    except Exception as exc:  # noqa: BLE001 (whatever one request hits must not end the window)
        record.fail(f"unexpected {type(exc).__name__} while streaming: "
                    f"{exception_text(exc, record.http_status)}")
    finally:
        record.t_done_ns = time.perf_counter_ns()
