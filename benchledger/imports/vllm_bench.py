"""The result file of `vllm bench serve --save-result --save-detailed`, as evidence.

Read as vLLM's vllm/benchmarks/serve.py writes it: a summary (duration, completed, failed,
total_input_tokens, total_output_tokens, output_throughput, total_token_throughput,
request_rate, burstiness, max_concurrency, model_id, ...) and, with --save-detailed, one
list per request field: input_lens, output_lens, ttfts, itls, errors, and in newer
versions latencies and start_times (perf_counter seconds). One window, one request row per
list position; a non-empty error marks a failed request.

vLLM counts each request's output tokens from the server's usage when the stream reported
it and otherwise with its own tokenizer, and the file does not say which: token_source
stays NULL (not recorded). Its itls are the gaps between streamed chunks, so they become
the request's content events, never per-token latencies. Every value is range-checked
(checks.py) before anything is loaded. docs/imports.md has the table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.imports.checks import (
    DUPLICATE,
    MAX_SECONDS,
    RATE,
    count,
    counts,
    first_duplicate,
    number,
    number_lists,
    numbers,
    refuse,
)
from benchledger.imports.evidence import (
    Evidence,
    EvidenceFileError,
    SourceFile,
    content_events,
    lists_to_ns,
    need,
    read_json,
    request_table,
    seconds_to_ns,
    window_id_for,
)
from benchledger.imports.tools import Importer, register
from benchledger.rules import MIN_REQUESTS_PLAIN

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "errors")
OPTIONAL_PER_REQUEST = ("latencies", "start_times")
DENOMINATOR = ("vllm bench serve's benchmark duration (perf_counter from the first request "
               "sent to the last answer), the denominator of its own token rates")


def parse(path: Path, sha256: str, run_id: str, name: str) -> Evidence:
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise EvidenceFileError(path, "not a vllm bench serve result (a JSON object)")
    missing = [key for key in PER_REQUEST if key not in doc]
    if missing:
        raise EvidenceFileError(path, f"no per-request lists {missing}: written without "
                                      "--save-detailed, so it holds no request records")
    lists = {key: need(path, doc, key, list, key) for key in PER_REQUEST}
    lists |= {key: doc[key] for key in OPTIONAL_PER_REQUEST if isinstance(doc.get(key), list)}
    lengths = {key: len(values) for key, values in lists.items()}
    if len(set(lengths.values())) != 1:
        raise EvidenceFileError(path, f"per-request lists of different lengths {lengths} "
                                      "(truncated or edited)")
    label = _label(doc)
    window_id = window_id_for(run_id, 0, label)
    requests = _requests(path, window_id, lists)
    window = _window(path, doc, window_id, label, requests.column("status").to_pylist())
    evidence = Evidence(
        tool="vllm-bench", run_id=run_id, name=name,
        files=[SourceFile(path, sha256, "vllm-bench-result", requests.num_rows)],
        tool_version=None, command=None, model=doc.get("model_id"),
        windows=[window], requests=requests)
    if "start_times" not in lists:
        evidence.flags.append("no start_times (an older vllm bench): each request's times "
                              "count from its own submission (t_submit_ns = 0)")
    return evidence


@register
class VllmBenchImporter(Importer):
    """The result file of `vllm bench serve --save-result --save-detailed`."""

    name = "vllm-bench"

    def parse(self, path: Path, sha256: str, run_id: str, name: str) -> Evidence:
        return parse(path, sha256, run_id, name)


def _label(doc: dict) -> str:
    rate, cap = doc.get("request_rate"), doc.get("max_concurrency")
    return f"rate@{rate}" + (f",max_concurrency@{cap}" if cap is not None else "")


def _infinite(rate: Any) -> bool:
    return rate == "inf" or isinstance(rate, float) and math.isinf(rate)


def _request(i: int) -> str:
    return f"request {i}"


def _requests(path: Path, window_id: str, lists: dict[str, list[Any]]) -> pa.Table:
    n = len(lists["errors"])
    errors = lists["errors"]
    if not set(map(type, errors)) <= {str, type(None)}:
        i = next(i for i, e in enumerate(errors) if type(e) not in (str, type(None)))
        raise refuse(path, _request(i), f"errors[{i}]", errors[i], "a text (empty: success)")

    def checked(key: str, minimum: float = 0.0) -> pa.Array:
        return numbers(path, lists[key], lambda i: f"{key}[{i}]", _request, minimum=minimum,
                       maximum=MAX_SECONDS, nullable=False)

    def tokens(key: str) -> pa.Array:
        return counts(path, lists[key], lambda i: f"{key}[{i}]", _request, nullable=False)

    input_lens, output_lens = tokens("input_lens"), tokens("output_lens")
    ttfts = checked("ttfts")
    itls = number_lists(path, lists["itls"], lambda i: f"itls[{i}]", _request)
    starts = checked("start_times") if "start_times" in lists else None
    latencies = checked("latencies") if "latencies" in lists else None
    _refuse_repeats(path, starts, ttfts, latencies, input_lens, output_lens)
    failed = [bool(e) for e in errors]
    ok = pa.array([not bad for bad in failed])
    # without start_times (older vLLM) each request's clock starts at its own submission
    submit = seconds_to_ns(starts) if starts is not None else pa.array([0] * n, pa.int64())
    first = pc.if_else(ok, pc.add(submit, seconds_to_ns(ttfts)), None)
    events, last, chunks = content_events(first, lists_to_ns(itls))
    done = (pc.if_else(ok, pc.add(submit, seconds_to_ns(latencies)), None)
            if latencies is not None else pa.nulls(n, pa.int64()))
    return request_table({
        "request_id": [f"{window_id}/m{i:05d}" for i in range(n)],
        "window_id": [window_id] * n, "seq": list(range(n)),
        "is_warmup": [False] * n,
        "status": ["failed" if bad else "completed" for bad in failed],
        "error": [e or None for e in errors],
        "prompt_tokens": input_lens,
        # a failed request's 0 in output_lens is a placeholder, not a count
        "output_tokens": pc.if_else(ok, output_lens, None),
        "chunks": chunks, "t_submit_ns": submit, "t_first_ns": first, "t_last_ns": last,
        "t_done_ns": done, "content_event_ns": events,
    })


def _refuse_repeats(path: Path, starts: pa.Array | None, *others: pa.Array | None) -> None:
    """A request repeated in every per-request list (its perf_counter start time too: no
    two requests are sent at the same instant) is a duplicated record. Without
    start_times (older files) a repeat cannot be told from two alike requests."""
    if starts is None:
        return
    keys = pd.DataFrame({f"k{i}": a.to_pandas() for i, a in enumerate((starts, *others))
                         if a is not None})
    pair = first_duplicate(keys)
    if pair is not None:
        raise EvidenceFileError(path, f"request {pair[1]} repeats request {pair[0]} (every "
                                      "per-request list holds the same values at both "
                                      "positions): a request record " + DUPLICATE)


def _window(path: Path, doc: dict, window_id: str, label: str, status: list[str]) -> dict:
    completed, failed = status.count("completed"), status.count("failed")
    if isinstance(doc.get("completed"), int) and doc["completed"] != completed:
        raise EvidenceFileError(path, f"completed says {doc['completed']}, but the "
                                      f"per-request lists hold {completed} successful "
                                      "requests (truncated or edited)")
    where = "summary"
    rate = doc.get("request_rate")
    if not _infinite(rate):  # inf: every request sent at once (JSON Infinity or "inf")
        rate = number(path, rate, where, "request_rate", above=0,
                      expected="a finite rate > 0, or inf")
    cap = count(path, doc.get("max_concurrency"), where, "max_concurrency", minimum=1)
    number(path, doc.get("burstiness"), where, "burstiness", above=0,
           expected="a finite number > 0")
    closed = _infinite(rate) and cap is not None
    return {
        "window_id": window_id, "workload": label, "load_pattern": label,
        # every request sent at once, at most max_concurrency in flight: a closed loop
        "concurrency": cap if closed else None,
        "arrival": "closed" if closed else (
            "poisson" if not _infinite(rate) and doc.get("burstiness") == 1.0 else None),
        "requested_rate_rps": None if _infinite(rate) or rate is None else float(rate),
        "submitted": len(status), "completed": completed, "failed": failed, "unresolved": 0,
        "drain_status": "complete",  # vllm bench waits for every request it sent
        "window_start": None, "window_end": None,
        "elapsed_s": number(path, need(path, doc, "duration", (int, float), "duration"),
                            where, "duration", above=0, maximum=MAX_SECONDS,
                            expected="a finite number of seconds > 0"),
        "denominator": DENOMINATOR, "min_requests": MIN_REQUESTS_PLAIN,
        "warmup_submitted": None,  # --num-warmups is not written to the result
        "max_tokens": None, "temperature": None,  # not written to the result
        "reported_output_tok_s": _rate(path, doc, "output_throughput"),
        "reported_total_tok_s": _rate(path, doc, "total_token_throughput"),
    }


def _rate(path: Path, doc: dict, key: str) -> float | None:
    value = doc.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return number(path, value, "summary", key, expected=RATE)
