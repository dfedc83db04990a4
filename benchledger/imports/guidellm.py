"""GuideLLM's benchmarks report (`guidellm run --output kind=json,path=F`), as evidence.

Read as GuideLLM 0.8 writes it (metadata.version 2): one window per entry of `benchmarks`,
one request row per record of its `requests.successful`, `.errored` and `.incomplete`
lists. Times are GuideLLM's own epoch seconds per request (request_start, the first and
last token iterations, request_end), so TTFT keeps its definition (first token iteration
minus request start). GuideLLM does not keep each streamed iteration's time, so
content_event_ns stays NULL; its per-iteration count is `chunks`.

Output tokens: GuideLLM takes the server's usage when the stream reported it
(output_metrics.text_tokens) and otherwise counts stream iterations as tokens; the rows say
which (token_source 'usage' or 'chunks'). docs/imports.md has the field table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchledger.imports.evidence import (
    CHUNKS,
    Evidence,
    EvidenceFileError,
    SourceFile,
    epoch_ns,
    from_epoch,
    need,
    read_json,
    request_table,
    single,
    window_id_for,
)
from benchledger.rules import MIN_REQUESTS_PLAIN

# GuideLLM's request lists -> the status of a request row.
STATUSES = (("successful", "completed"), ("errored", "failed"), ("incomplete", "unresolved"))
DENOMINATOR = ("GuideLLM's benchmark duration (end_time - start_time of the benchmark), "
               "the denominator of its own token rates")


def parse(path: Path, sha256: str, run_id: str, name: str) -> Evidence:
    doc = read_json(path)
    need(path, doc, "metadata", dict, "metadata")
    benchmarks = need(path, doc, "benchmarks", list, "benchmarks")
    if not benchmarks:
        raise EvidenceFileError(path, "benchmarks: empty (no benchmark to import)")
    windows, tables = [], []
    for index, benchmark in enumerate(benchmarks):
        window, requests = _benchmark(path, run_id, index, benchmark)
        windows.append(window)
        tables.append(requests)
    requests = pa.concat_tables(tables)
    return Evidence(
        tool="guidellm", run_id=run_id, name=name,
        files=[SourceFile(path, sha256, "guidellm-report", requests.num_rows)],
        tool_version=doc["metadata"].get("guidellm_version"), command=None,
        model=single([w.pop("model") for w in windows]),
        started_at=min(w["window_start"] for w in windows),
        windows=windows, requests=requests)


def _benchmark(path: Path, run_id: str, index: int, benchmark: Any) -> tuple[dict, pa.Table]:
    where = f"benchmarks[{index}]"
    need(path, benchmark, "config", dict, f"{where}.config")
    strategy = need(path, benchmark["config"], "strategy", dict, f"{where}.config.strategy")
    lists = need(path, benchmark, "requests", dict, f"{where}.requests")
    totals = need(path, need(path, benchmark, "metrics", dict, f"{where}.metrics"),
                  "request_totals", dict, f"{where}.metrics.request_totals")
    records = {}
    for key, _ in STATUSES:
        records[key] = need(path, lists, key, list, f"{where}.requests.{key}")
        counted = need(path, totals, key, int, f"{where}.metrics.request_totals.{key}")
        if len(records[key]) != counted:
            raise EvidenceFileError(path, (
                f"{where}: {len(records[key])} {key} request records, but its request_totals "
                f"count {counted} (a sampled or truncated report; benchledger imports "
                "complete reports only)"))
    label = _label(strategy)
    window_id = window_id_for(run_id, index, label)
    requests = _requests(path, window_id, records)
    duration = need(path, benchmark, "duration", (int, float), f"{where}.duration")
    start = need(path, benchmark, "start_time", (int, float), f"{where}.start_time")
    end = need(path, benchmark, "end_time", (int, float), f"{where}.end_time")
    metrics = benchmark["metrics"]
    completed, failed, unresolved = (len(records[key]) for key, _ in STATUSES)
    window = {
        "model": (benchmark["config"].get("backend") or {}).get("model") or None,
        "window_id": window_id, "workload": label, "load_pattern": label,
        "concurrency": _concurrency(strategy), "arrival": _arrival(strategy),
        "requested_rate_rps": strategy.get("rate"),
        "submitted": completed + failed + unresolved, "completed": completed,
        "failed": failed, "unresolved": unresolved,
        "drain_status": "incomplete" if unresolved else "complete",
        "window_start": from_epoch(start), "window_end": from_epoch(end),
        "elapsed_s": float(duration), "denominator": DENOMINATOR,
        "min_requests": MIN_REQUESTS_PLAIN,
        "warmup_submitted": _warmup_submitted(benchmark["config"]),
        "max_tokens": single(requests.column("max_tokens").to_pylist()),
        "temperature": single(requests.column("temperature").to_pylist()),
        "reported_output_tok_s": _successful_mean(metrics, "output_tokens_per_second"),
        "reported_total_tok_s": _successful_mean(metrics, "tokens_per_second"),
    }
    return window, requests


def _warmup_submitted(config: dict) -> int | None:
    """0 when the benchmark had no warm-up; None when it had one (GuideLLM keeps no record
    of its warm-up requests)."""
    warmup = config.get("warmup") or {}
    return 0 if warmup.get("percent") is None and warmup.get("value") is None else None


def _label(strategy: dict) -> str:
    kind = str(strategy.get("type_", "unknown"))
    if kind == "concurrent":
        return f"concurrent@{strategy.get('streams')}"
    if kind in ("constant", "poisson"):
        return f"{kind}@{strategy.get('rate')}"
    return kind


def _concurrency(strategy: dict) -> int | None:
    """Requests kept in flight, where the strategy fixes it (closed loop)."""
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1
    return strategy.get("streams") if kind == "concurrent" else None


def _arrival(strategy: dict) -> str | None:
    kind = strategy.get("type_")
    if kind in ("synchronous", "concurrent"):
        return "closed"
    return "poisson" if kind == "poisson" else None


def _successful_mean(metrics: dict, name: str) -> float | None:
    value = ((metrics.get(name) or {}).get("successful") or {}).get("mean")
    return float(value) if isinstance(value, int | float) else None


def _requests(path: Path, window_id: str, records: dict[str, list]) -> pa.Table:
    """One row per record, columns read once each from the records."""
    rows = [(status, r) for key, status in STATUSES for r in records[key]]
    try:
        timings = [r["info"]["timings"] for _, r in rows]
        bodies = [_body(r.get("request_args")) for _, r in rows]
        delivered = [r["output_metrics"].get("text_tokens") for _, r in rows]
        output = [r.get("output_tokens") for _, r in rows]
    except (KeyError, TypeError, AttributeError) as exc:
        raise EvidenceFileError(path, f"a request record of {window_id.rsplit('/', 1)[-1]} "
                                      f"lacks {exc} (info.timings, output_metrics)") from None
    return request_table({
        "request_id": [f"{window_id}/m{i:05d}" for i in range(len(rows))],
        "window_id": [window_id] * len(rows),
        "seq": list(range(len(rows))),
        "source_request_id": [r.get("request_id") for _, r in rows],
        "is_warmup": [False] * len(rows),
        "status": [status for status, _ in rows],
        "error": [r["info"].get("error") for _, r in rows],
        "max_tokens": [b.get("max_tokens", b.get("max_completion_tokens")) for b in bodies],
        "temperature": [b.get("temperature") for b in bodies],
        "prompt_tokens": [r.get("prompt_tokens") for _, r in rows],
        "output_tokens": output,
        "cached_tokens": [r.get("cached_tokens") for _, r in rows],
        # usage when the server's usage gave the count; else GuideLLM fell back to counting
        # stream iterations (its request_stats.output_tokens); no count at all: missing
        "token_source": ["usage" if d is not None else CHUNKS if o is not None else "missing"
                         for d, o in zip(delivered, output, strict=True)],
        "chunks": [t.get("token_iterations") for t in timings],
        "t_submit_ns": [epoch_ns(t.get("request_start")) for t in timings],
        "t_first_ns": [epoch_ns(t.get("first_token_iteration")) for t in timings],
        "t_last_ns": [epoch_ns(t.get("last_token_iteration")) for t in timings],
        # an incomplete request was cancelled, not finished: its end was never seen
        "t_done_ns": [None if status == "unresolved" else epoch_ns(t.get("request_end"))
                      for (status, _), t in zip(rows, timings, strict=True)],
    })


def _body(request_args: Any) -> dict:
    """The request body GuideLLM sent (request_args is JSON text); {} when not recorded."""
    if not isinstance(request_args, str):
        return {}
    try:
        body = json.loads(request_args).get("body")
    except (json.JSONDecodeError, AttributeError):
        return {}
    return body if isinstance(body, dict) else {}
