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
the request's content events, never per-token latencies. docs/imports.md has the table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

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
    requests = _requests(window_id, lists)
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


def _label(doc: dict) -> str:
    rate, cap = doc.get("request_rate"), doc.get("max_concurrency")
    return f"rate@{rate}" + (f",max_concurrency@{cap}" if cap is not None else "")


def _infinite(rate: Any) -> bool:
    return rate == "inf" or isinstance(rate, float) and math.isinf(rate)


def _requests(window_id: str, lists: dict[str, list]):
    n = len(lists["errors"])
    failed = [bool(e) for e in lists["errors"]]
    ok = pa.array([not bad for bad in failed])
    starts = lists.get("start_times")
    # without start_times (older vLLM) each request's clock starts at its own submission
    submit = seconds_to_ns(starts) if starts else pa.array([0] * n, pa.int64())
    first = pc.if_else(ok, pc.add(submit, seconds_to_ns(lists["ttfts"])), None)
    events, last, chunks = content_events(first, lists_to_ns(lists["itls"]))
    latencies = lists.get("latencies")
    done = (pc.if_else(ok, pc.add(submit, seconds_to_ns(latencies)), None) if latencies
            else pa.nulls(n, pa.int64()))
    return request_table({
        "request_id": [f"{window_id}/m{i:05d}" for i in range(n)],
        "window_id": [window_id] * n, "seq": list(range(n)),
        "is_warmup": [False] * n,
        "status": ["failed" if bad else "completed" for bad in failed],
        "error": [e or None for e in lists["errors"]],
        "prompt_tokens": lists["input_lens"],
        # a failed request's 0 in output_lens is a placeholder, not a count
        "output_tokens": pc.if_else(ok, pa.array(lists["output_lens"], pa.int64()), None),
        "chunks": chunks, "t_submit_ns": submit, "t_first_ns": first, "t_last_ns": last,
        "t_done_ns": done, "content_event_ns": events,
    })


def _window(path: Path, doc: dict, window_id: str, label: str, status: list[str]) -> dict:
    completed, failed = status.count("completed"), status.count("failed")
    if isinstance(doc.get("completed"), int) and doc["completed"] != completed:
        raise EvidenceFileError(path, f"completed says {doc['completed']}, but the "
                                      f"per-request lists hold {completed} successful "
                                      "requests (truncated or edited)")
    rate, cap = doc.get("request_rate"), doc.get("max_concurrency")
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
        "elapsed_s": float(need(path, doc, "duration", (int, float), "duration")),
        "denominator": DENOMINATOR, "min_requests": MIN_REQUESTS_PLAIN,
        "warmup_submitted": None,  # --num-warmups is not written to the result
        "max_tokens": None, "temperature": None,  # not written to the result
        "reported_output_tok_s": doc.get("output_throughput"),
        "reported_total_tok_s": doc.get("total_token_throughput"),
    }
