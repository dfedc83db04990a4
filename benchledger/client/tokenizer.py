"""token_count = "server_tokenizer": the received text of each request, counted by the
server's own tokenizer endpoint after the window (never while requests are timed), and
calibrated per window against the usage of non-streamed requests."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import httpx

from benchledger.client.endpoint import Endpoint, ReadCounted
from benchledger.client.record import (
    RequestRecord,
    WindowSpec,
    calibration_request_id,
    new_record,
)
from benchledger.client.request import exception_text, request_body, request_headers
from benchledger.client.tally import Tally, TextTally, UsageTally
from benchledger.client.target import TOKEN_COUNTS, Target, TokenCounter, WindowCount
from benchledger.client.text import show
from benchledger.client.usage import read_usage

# Tokenize requests in flight at once after a window (a window of 10^5 requests is counted
# in seconds, without flooding the server).
TOKENIZE_CONCURRENCY = 8


class CalibrationSample(TypedDict):
    """One calibration request, as the manifest keeps it."""

    prompt_id: str
    usage_output_tokens: int | None
    tokenizer_tokens: int | None
    error: str | None


def tokenize_body(target: Target, text: str) -> dict[str, Any]:
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


def _without_special(count: int | None, special: int) -> int | None:
    """A tokenizer count of a text, less the special tokens the endpoint adds to any."""
    return None if count is None else max(0, count - special)


async def _special_tokens(http: httpx.AsyncClient, target: Target, timeout_s: float) -> int:
    """Tokens the endpoint adds to any text (a BOS it puts in front regardless): its count
    of the empty text; 0 when it cannot count that (the calibration still checks)."""
    count, _ = await tokenizer_count(http, target, "", timeout_s)
    return count or 0


def _text_tally(record: RequestRecord) -> TextTally:
    """The record's TextTally: a server_tokenizer window makes every record with one."""
    tally = record.tally
    assert isinstance(tally, TextTally), f"{record.request_id}: {tally!r}"
    return tally


async def count_received_text(http: httpx.AsyncClient, target: Target,
                              records: list[RequestRecord], special: int,
                              timeout_s: float) -> None:
    """Count each completed request's received text with the server's tokenizer (at most
    TOKENIZE_CONCURRENCY at once), then let go of the text."""
    gate = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

    async def one(tally: TextTally) -> None:
        async with gate:
            count, error = await tokenizer_count(http, target, "".join(tally.text_parts),
                                                 timeout_s)
        tally.tokenizer_tokens = _without_special(count, special)
        tally.tokenizer_error = error
        tally.text_parts = []

    await asyncio.gather(*(one(_text_tally(r)) for r in records if r.status == "completed"))


async def _calibration_one(http: httpx.AsyncClient, target: Target, record: RequestRecord,
                           special: int, timeout_s: float) -> CalibrationSample:
    """One non-streamed request: its usage's output tokens beside the tokenizer's count of
    the very text it returned."""
    out: CalibrationSample = {"prompt_id": record.prompt.id, "usage_output_tokens": None,
                              "tokenizer_tokens": None, "error": None}
    path, body = request_body(target, record, stream=False)
    try:
        async with asyncio.timeout(timeout_s):
            response = await http.post(target.base_url.rstrip("/") + path, json=body,
                                       headers=request_headers(target, record.request_id))
        payload = response.json() if response.status_code == 200 else None
    except (TimeoutError, httpx.HTTPError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200] or 'no answer'}"
        return out
    if not isinstance(payload, dict):
        out["error"] = f"HTTP {response.status_code}: {response.text[:200]}"
        return out
    out["usage_output_tokens"] = read_usage(payload.get("usage")).output_tokens
    text = target.endpoint.answer_text(payload)
    if text is None:
        out["error"] = "the answer has no text"
        return out
    count, error = await tokenizer_count(http, target, text, timeout_s)
    out["tokenizer_tokens"] = _without_special(count, special)
    out["error"] = error if error else (None if out["usage_output_tokens"] is not None
                                        else "the non-streamed answer has no usage")
    return out


def calibration_summary(samples: list[CalibrationSample]) -> dict[str, Any]:
    """How the tokenizer's counts compare with usage on the calibration requests: the
    relative error of the totals (what the rule judges) and the worst single request."""
    pairs = [(t, u) for s in samples
             if (t := s["tokenizer_tokens"]) is not None
             and (u := s["usage_output_tokens"]) is not None]
    summary: dict[str, Any] = {
        "calibration_requests": len(samples), "calibration_compared": len(pairs),
        "calibration_rel_error": None, "calibration_max_rel_error": None}
    if not pairs:
        errors = sorted({error for s in samples if (error := s["error"])})
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
                    special: int) -> dict[str, Any]:
    """spec.calibration_requests non-streamed requests with the window's first prompts
    (at most `concurrency` at once); their summary and each sample, for the manifest."""
    gate = asyncio.Semaphore(spec.concurrency)
    # A calibration answer is not streamed: its count is its usage.
    records = [new_record(spec, False, i, UsageTally())
               for i in range(spec.calibration_requests)]
    for i, record in enumerate(records):  # its own id: measured request i is another request
        record.request_id = calibration_request_id(spec.window_id, i)

    async def one(record: RequestRecord) -> CalibrationSample:
        async with gate:
            return await _calibration_one(http, target, record, special,
                                          spec.request_timeout_s)

    samples = list(await asyncio.gather(*(one(r) for r in records)))
    return {**calibration_summary(samples), "calibration": samples}


class TokenizerWindowCount(WindowCount):
    """A window's texts counted by the server's tokenizer, part by part, then calibrated."""

    def __init__(self, http: httpx.AsyncClient, target: Target, spec: WindowSpec,
                 special: int) -> None:
        self._http, self._target, self._spec, self._special = http, target, spec, special

    async def count(self, records: list[RequestRecord]) -> None:
        await count_received_text(self._http, self._target, records, self._special,
                                  self._spec.request_timeout_s)

    async def accounting(self) -> dict[str, Any]:
        calibration = await calibrate(self._http, self._target, self._spec, self._special)
        return {**calibration, "tokenizer_special_tokens": self._special}


@TOKEN_COUNTS.register
class ServerTokenizerCounter(TokenCounter):
    """The received text, counted by the server's tokenizer endpoint (tokenize_path)."""

    name = "server_tokenizer"
    counted_by_the_stream = False  # counted after the window, by the tokenizer endpoint

    def event_reader(self, endpoint: Endpoint) -> ReadCounted:
        return endpoint.streamed_text

    def new_tally(self) -> Tally:
        return TextTally()

    def nothing_counted(self, completed: list[RequestRecord]) -> str:
        n = len(completed)
        first = next((error for r in completed if (error := _text_tally(r).tokenizer_error)),
                     "no count")
        return (f"the server's tokenizer endpoint counted none of the {n} completed warm-up "
                f"requests ({first}); set tokenize_path to the server's endpoint (vLLM, "
                "llama.cpp's server: /tokenize; llama-cpp-python: /extras/tokenize) or use "
                'token_count = "logprobs" or "usage"')

    async def window_count(self, http: httpx.AsyncClient, target: Target,
                           spec: WindowSpec) -> WindowCount:
        special = await _special_tokens(http, target, spec.request_timeout_s)
        return TokenizerWindowCount(http, target, spec, special)
