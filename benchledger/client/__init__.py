"""The measurement client: the only code that speaks HTTP to a model server under test.

It streams OpenAI-compatible completions (vLLM, SGLang, llama.cpp's server, the built-in
simulator: one code path for all) and records one raw row per request. It never counts
chunks as tokens (docs/protocol.md, trap T1): output tokens come from where the arm's
`token_count` says, each named in the row's token_source. Chunks are counted separately,
and a request whose count cannot be had is recorded with token_source = 'missing' instead
of being guessed. When the warm-up shows that the arm's source gives no count at all, the
window stops there (TokenCountUnavailable), naming the alternatives. Nothing a server sends
can lose a window, and every wait is bounded.

The arm's two choices are strategies, picked once by name when the Target is made:
its endpoint (`endpoint.py`: chat or completions) and its token count (`target.py`, with
the variants in `counting.py` and `tokenizer.py`: usage, logprobs or server_tokenizer).

    text.py       how a server's values are quoted in errors and kept writable
    registry.py   named strategy variants
    sse.py        SSEReader: a byte stream -> the data of its events
    endpoint.py   Endpoint: chat or completions (request fields, where events carry text)
    events.py     parse_event: one event's data -> Event, never an exception
    usage.py      read_usage: a request's reported usage -> the row's counts
    tally.py      what a request's token count keeps of its events
    record.py     WindowSpec, RequestRecord (one raw row each)
    target.py     Target, TokenCounter (the token count's strategy)
    counting.py   the usage and logprobs counts
    request.py    one streamed request (aiohttp), its reads stamped as they come
    ruler.py      the client's measure of its own error: loop lag, CPU share, bunching
    streams.py    one event loop's share of a part: submit, read, drain
    workers.py    the streams spread over worker processes, one event loop each
    tokenizer.py  the count by the server's tokenizer, and its calibration
    window.py     a window: warm-up, measured part, accounting, rows
"""

from __future__ import annotations

from benchledger.client import counting, tokenizer  # noqa: F401 (they register their counts)
from benchledger.client.endpoint import CHAT, COMPLETIONS, ENDPOINTS, Endpoint, EndpointName
from benchledger.client.events import DONE, Event, parse_event
from benchledger.client.record import RequestRecord, WindowSpec
from benchledger.client.request import exception_text, request_body
from benchledger.client.sse import MAX_EVENT_BYTES, SSEReader
from benchledger.client.streams import poisson_arrivals
from benchledger.client.target import TOKEN_COUNTS, Target, TokenCounter, TokenCountName
from benchledger.client.tokenizer import (
    calibration_summary,
    read_token_count,
    tokenize_body,
    tokenizer_count,
)
from benchledger.client.usage import INT64_MAX, INT64_MIN, Usage, read_usage
from benchledger.client.window import (
    TokenCountUnavailable,
    WindowResult,
    measure_window,
    measure_window_async,
    warmup_problem,
)
from benchledger.client.workers import worker_count

__all__ = [
    "CHAT", "COMPLETIONS", "DONE", "ENDPOINTS", "INT64_MAX", "INT64_MIN", "MAX_EVENT_BYTES",
    "TOKEN_COUNTS", "Endpoint", "EndpointName", "Event", "RequestRecord", "SSEReader",
    "Target", "TokenCountName", "TokenCountUnavailable", "TokenCounter", "Usage",
    "WindowResult", "WindowSpec", "calibration_summary", "exception_text", "measure_window",
    "measure_window_async", "parse_event", "poisson_arrivals", "read_token_count",
    "read_usage", "request_body", "tokenize_body", "tokenizer_count", "warmup_problem",
    "worker_count",
]
