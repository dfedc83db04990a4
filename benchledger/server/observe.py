"""What the server says while a window is measured (docs/protocol.md: T2, T3).

Two observers bracket the measured window (warm-up stays outside), beside the GPU
telemetry of every node of the deployment (benchledger.server.telemetry):

- MetricsScrape: the server's Prometheus text right before and right after the window,
  kept raw; the warehouse parses it and reconciles the counters' deltas with what the
  client received.
- LogSlice: the server log lines written during the window (by byte offset, so no clock
  guessing), kept raw; the warehouse parses vLLM's periodic throughput lines.

Observers never raise into the measurement: what failed is recorded in their result, and
every wait is bounded (bounded_get for HTTP).

Once a server is ready, `server_family` says whose counters its /metrics carries (vLLM,
SGLang, llama.cpp's server or TGI, by their metric-name prefixes), unless the arm says so
itself (arms.server_family); the warehouse reconciles that family's own counters.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchledger.client.tls import tls_context
from benchledger.rules.core import COUNTER_UNREADABLE
from benchledger.sweep.spec import DEFAULT_METRICS_TIMEOUT_S, SERVER_FAMILIES

LOG_SLICE_LIMIT = 4_000_000  # bytes of server log kept per window
METRICS_LIMIT = 16_000_000  # bytes of one /metrics answer kept (vLLM's is ~100 kB)
METRICS_TIMEOUT_S = DEFAULT_METRICS_TIMEOUT_S  # the arm's metrics_timeout_s by default
# Why a scrape kept no counters, as its recorded error says (after the phase and the URL;
# warehouse/reconcile.py reads the words): the server has no such endpoint (it answered
# that there is no route), or it has one that could not be read (a timeout, an error
# status, a cut or oversized answer, text that is not Prometheus', a dropped connection).
# The first is a server without counters; the second hides counters that may be there
# (COUNTER_UNREADABLE: the same words as the reconciliation and the rule that read it).
NO_ENDPOINT = "no endpoint"
NO_ROUTE_STATUSES = frozenset({404, 410})
MAX_RECORDED_ERRORS = 20  # per observer and window: a broken endpoint must not grow the file
# How each server family names its /metrics (tests/fixtures/metrics/<family>.txt cite the
# sources): vLLM "vllm:", SGLang "sglang:", llama.cpp's server "llamacpp:", TGI "tgi_".
FAMILY_PREFIXES = dict(zip(SERVER_FAMILIES, ("vllm:", "sglang:", "llamacpp:", "tgi_"),
                           strict=True))


def _now() -> str:
    return datetime.now(UTC).isoformat()


class AnswerTooSlow(httpx.TimeoutException):
    """The whole answer did not arrive within the bound (a server trickling bytes)."""


@dataclass(frozen=True)
class Answer:
    """A GET's status and body (the body cut at the caller's limit)."""

    status_code: int
    body: bytes
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


async def _get(url: str, headers: dict[str, str] | None, timeout_s: float,
               max_bytes: int) -> Answer:
    async with (httpx.AsyncClient(timeout=timeout_s, verify=tls_context()) as client,
                client.stream("GET", url, headers=headers) as response):
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) >= max_bytes:
                return Answer(response.status_code, bytes(body[:max_bytes]), truncated=True)
        return Answer(response.status_code, bytes(body))


def bounded_get(url: str, timeout_s: float, headers: dict[str, str] | None = None,
                max_bytes: int = 1_000_000) -> Answer:
    """GET `url` with the WHOLE answer (connect, headers, body) bounded by `timeout_s`.

    httpx's timeouts bound each network operation, not their sum: a server that sends a
    byte every few seconds never trips them. Raises httpx.HTTPError (AnswerTooSlow past
    the bound). Call it from synchronous code (it runs its own event loop)."""
    try:
        return asyncio.run(asyncio.wait_for(_get(url, headers, timeout_s, max_bytes),
                                            timeout_s))
    except TimeoutError:
        raise AnswerTooSlow(f"no complete answer from {url} within {timeout_s:g} s") from None


def error_text(exc: BaseException) -> str:
    """`Type: message` of an exception, one line (httpx's ConnectError has no type in it)."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def same_origin(url: str | None, base_url: str) -> bool:
    """Whether `url` is served by the server at `base_url` (same scheme, host and port):
    only then may the server's API key go with a request to it."""
    if not url:
        return False
    a, b = urlsplit(url), urlsplit(base_url)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


def _record_error(result: dict, message: str) -> None:
    if len(result["errors"]) < MAX_RECORDED_ERRORS:
        result["errors"].append(message)


def _metrics_problem(answer: Answer) -> str | None:
    """Why a /metrics answer cannot be kept as counters, or None: NO_ENDPOINT or
    COUNTER_UNREADABLE, then what was wrong."""
    if answer.status_code in NO_ROUTE_STATUSES:
        return f"{NO_ENDPOINT}: HTTP {answer.status_code}"
    if answer.status_code != 200:
        return f"{COUNTER_UNREADABLE}: HTTP {answer.status_code}"
    if answer.truncated:
        return f"{COUNTER_UNREADABLE}: answer larger than {METRICS_LIMIT} bytes, not kept"
    try:
        for family in text_string_to_metric_families(answer.text):
            for sample in family.samples:
                float(sample.value)
    except Exception as exc:
        return f"{COUNTER_UNREADABLE}: not Prometheus text ({error_text(exc)[:300]})"
    return None


class MetricsScrape:
    """Prometheus text before and after the window. A scrape that kept none records why
    (an error naming NO_ENDPOINT or COUNTER_UNREADABLE) and says which in `status`."""

    def __init__(self, url: str | None, headers: dict[str, str] | None = None,
                 timeout_s: float = METRICS_TIMEOUT_S):
        self.url = url
        self.headers = headers  # the server's API key, if it has one: never recorded
        self.timeout_s = timeout_s
        self.result: dict = {"url": url, "before": None, "after": None, "errors": [],
                             "status": {}}

    def _fetch(self, phase: str) -> None:
        if not self.url:
            return
        try:
            answer = bounded_get(self.url, self.timeout_s, self.headers, METRICS_LIMIT)
        except Exception as exc:  # recorded: a failed scrape leaves the counters unchecked
            # The server is up (it serves the window), so its endpoint did not answer in
            # time or dropped the connection: counters that may be there were not read.
            self._failed(phase, f"{COUNTER_UNREADABLE}: {error_text(exc)}")
            return
        problem = _metrics_problem(answer)
        if problem:  # kept out: the warehouse could not parse it, and must not try
            self._failed(phase, problem)
            return
        self.result[phase] = {"scraped_at": _now(), "text": answer.text}
        self.result["status"][phase] = "read"

    def _failed(self, phase: str, problem: str) -> None:
        self.result["status"][phase] = problem.split(":", 1)[0]
        _record_error(self.result, f"{phase}: {self.url}: {problem}")

    def start(self) -> None:
        self._fetch("before")

    def stop(self) -> None:
        self._fetch("after")


def families_named(text: str) -> list[str]:
    """The server families whose metric-name prefix appears in a Prometheus text page
    (families without samples count: SGLang declares its counters before any request)."""
    names = [family.name for family in text_string_to_metric_families(text)]
    return [family for family, prefix in FAMILY_PREFIXES.items()
            if any(name.startswith(prefix) for name in names)]


def detect_family(url: str, headers: dict[str, str] | None = None,
                  timeout_s: float = METRICS_TIMEOUT_S) -> tuple[str | None, str]:
    """Whose counters the /metrics at `url` carries: (family or None, how that was found
    or why not). Never raises: a server without /metrics is simply of no known family."""
    try:
        answer = bounded_get(url, timeout_s, headers, METRICS_LIMIT)
    except Exception as exc:
        return None, f"{url}: {error_text(exc)}"
    problem = _metrics_problem(answer)
    if problem:
        return None, f"{url}: {problem}"
    found = families_named(answer.text)
    if len(found) == 1:
        return found[0], f"{url}: {FAMILY_PREFIXES[found[0]]}* metric names"
    if found:
        return None, (f"{url}: metric names of several families ({', '.join(found)}); set "
                      "arms.server_family")
    return None, (f"{url}: no metric name of a known family "
                  f"({', '.join(p + '*' for p in FAMILY_PREFIXES.values())})")


def server_family(declared: str, url: str, headers: dict[str, str] | None = None,
                  timeout_s: float = METRICS_TIMEOUT_S) -> tuple[str | None, str]:
    """The arm's own arms.server_family, or (for "auto") the family its /metrics names
    (read within timeout_s, the arm's metrics_timeout_s)."""
    if declared != "auto":
        return declared, "arms.server_family"
    return detect_family(url, headers, timeout_s)


class LogSlice:
    """The lines the server logged during the window."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self.start_offset = 0
        self.result: dict = {"path": path, "lines": [], "errors": []}

    def start(self) -> None:
        if not self.path:
            return
        try:
            self.start_offset = self.path.stat().st_size
        except FileNotFoundError:
            self.start_offset = 0  # nothing logged yet: the slice starts at the beginning
        except OSError as exc:
            _record_error(self.result, f"cannot stat {self.path}: {error_text(exc)}")

    def stop(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path, "rb") as log:
                log.seek(self.start_offset)
                data = log.read(LOG_SLICE_LIMIT)
        except OSError as exc:
            _record_error(self.result, f"cannot read {self.path}: {error_text(exc)}")
            return
        text = data.decode("utf-8", errors="replace")
        self.result.update(from_offset=self.start_offset,
                           lines=text.splitlines(), truncated=len(data) == LOG_SLICE_LIMIT)


class Observer(Protocol):
    """What observe_all runs around a window (a `result` dict with an `errors` list, where
    there is one, records what start or stop raised)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


def _guarded(observer: Observer, step: Literal["start", "stop"]) -> None:
    """Run one observer's start or stop; whatever it raises is recorded, not raised."""
    try:
        getattr(observer, step)()
    except Exception as exc:
        result = getattr(observer, "result", None)
        if isinstance(result, dict) and isinstance(result.get("errors"), list):
            _record_error(result, f"{step}: {error_text(exc)}")


def observe_all(observers: Sequence[Observer]
                ) -> tuple[Callable[[], None], Callable[[], None]]:
    """Start/stop callables that run every observer (for measure_window's hooks); an
    observer that fails is recorded in its result and never stops the window."""

    def start() -> None:
        for observer in observers:
            _guarded(observer, "start")

    def stop() -> None:
        for observer in observers:
            _guarded(observer, "stop")

    return start, stop
