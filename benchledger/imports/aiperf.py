"""AIPerf's per-request export and its summary, as evidence.

AIPerf (`aiperf profile --output-artifact-dir D`) writes D/profile_export.jsonl (one JSON
record per request) and D/profile_export_aiperf.json (the summary: its configuration,
version, command line, window and totals). An import reads both; either file, or the
folder, may be named. One window (the profiling phase), one request row per record.

Times are AIPerf's own: request_start_ns and request_end_ns (epoch ns), time_to_first_token
after the start, and inter_chunk_latency, the gaps between streamed chunks, which become
the request's content events (event gaps, never a per-token latency). Output tokens are
the server's usage when AIPerf ran with --use-server-token-count (the summary's
input_config.endpoint.use_server_token_count), else AIPerf's client-side tokenizer count;
token_source says which: usage_completion_tokens is AIPerf's reading of the usage
object of the server's response and nothing else (absent when the response carried none).
Every value is range-checked (checks.py) before anything is loaded. docs/imports.md has
the field table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.imports.checks import (
    DUPLICATE,
    MAX_NS,
    MAX_SECONDS,
    NANOSECONDS,
    RATE,
    count,
    counts,
    first_duplicate,
    in_order,
    number,
    number_lists,
    numbers,
    shown,
)
from benchledger.imports.evidence import (
    CLIENT_TOKENIZER,
    Evidence,
    EvidenceFileError,
    SourceFile,
    content_events,
    from_epoch,
    lists_to_ns,
    need,
    read_json,
    request_table,
    seconds_to_ns,
    window_id_for,
)
from benchledger.imports.tools import Importer, register
from benchledger.raw.records import file_sha256
from benchledger.rules import MIN_REQUESTS_PLAIN

RECORDS_SUFFIX, SUMMARY_SUFFIX = ".jsonl", "_aiperf.json"
DEFAULT_STEM = "profile_export"
# ns per unit of AIPerf's time metrics
_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "sec": 1_000_000_000, "s": 1_000_000_000}


def files_of(path: Path) -> tuple[Path, Path]:
    """(records, summary) for a named folder, records file or summary file."""
    if path.is_dir():
        return path / f"{DEFAULT_STEM}{RECORDS_SUFFIX}", path / f"{DEFAULT_STEM}{SUMMARY_SUFFIX}"
    if path.name.endswith(SUMMARY_SUFFIX):
        stem = path.name[: -len(SUMMARY_SUFFIX)]
        return path.with_name(stem + RECORDS_SUFFIX), path
    return path, path.with_name(path.name.removesuffix(RECORDS_SUFFIX) + SUMMARY_SUFFIX)


def identity(path: Path) -> Path:
    """The file an AIPerf import is known by: its per-request records."""
    return files_of(path)[0]


def parse(path: Path, sha256: str, run_id: str, name: str) -> Evidence:
    records_path, summary_path = files_of(path)
    for needed, what in ((records_path, "per-request records"), (summary_path, "summary")):
        if not needed.is_file():
            raise EvidenceFileError(needed, f"AIPerf's {what} file is missing (an AIPerf "
                                            "import needs profile_export.jsonl and "
                                            "profile_export_aiperf.json side by side)")
    summary = read_json(summary_path)
    config = need(summary_path, summary, "input_config", dict, "input_config")
    endpoint = need(summary_path, config, "endpoint", dict, "input_config.endpoint")
    records, lines = _read_records(records_path)
    server_counts = bool(endpoint.get("use_server_token_count"))
    phase = _profiling_phase(config)
    label = _label(phase)
    window_id = window_id_for(run_id, 0, label)
    requests = _requests(records_path, window_id, records, lines,
                         _extra(summary_path, endpoint), server_counts)
    window = _window(summary_path, summary, window_id, label, phase, requests)
    window["warmup_submitted"] = _warmup_submitted(config, requests)
    _check_counts(records_path, summary, window)
    return Evidence(
        tool="aiperf", run_id=run_id, name=name,
        files=[SourceFile(records_path, sha256, "aiperf-records", len(records)),
               SourceFile(summary_path, file_sha256(summary_path), "aiperf-summary", 1)],
        tool_version=summary.get("aiperf_version"),
        command=(summary.get("run_info") or {}).get("cli_command"),
        model=_model(config), started_at=_first_start(requests),
        windows=[window], requests=requests)


@register
class AIPerfImporter(Importer):
    """AIPerf's export: its per-request records and its summary, side by side (a folder of
    fixed file names: the folder names the import)."""

    name = "aiperf"

    def files(self, path: Path) -> tuple[Path, ...]:
        return files_of(path)

    def identity(self, path: Path) -> Path:
        return identity(path)

    def default_name(self, identity_file: Path) -> str:
        return identity_file.parent.name

    def parse(self, path: Path, sha256: str, run_id: str, name: str) -> Evidence:
        return parse(path, sha256, run_id, name)


def _read_records(path: Path) -> tuple[list[dict], list[int]]:
    """The request records and the line number of each."""
    records, line_numbers = [], []
    with path.open(encoding="utf-8", errors="strict") as lines:
        try:
            for line_no, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise EvidenceFileError(path, f"line {line_no}: not valid JSON, truncated "
                                                  f"or malformed: {exc.msg}") from exc
                if not isinstance(record, dict) or not isinstance(record.get("metadata"),
                                                                  dict):
                    raise EvidenceFileError(path, f"line {line_no}: not an AIPerf request "
                                                  "record (no metadata object)")
                records.append(record)
                line_numbers.append(line_no)
        except UnicodeDecodeError as exc:
            raise EvidenceFileError(path, f"not UTF-8 text ({exc})") from exc
    if not records:
        raise EvidenceFileError(path, "no request records")
    return records, line_numbers


def _profiling_phase(config: dict) -> dict:
    phases = [p for p in config.get("phases") or [] if isinstance(p, dict)]
    profiling = [p for p in phases if p.get("kind") == "profiling"]
    return profiling[0] if profiling else {}


def _label(phase: dict) -> str:
    if phase.get("concurrency") is not None and phase.get("request_rate") is None:
        return f"concurrency@{phase['concurrency']}"
    if phase.get("request_rate") is not None:
        return f"request_rate@{phase['request_rate']}"
    return str(phase.get("name") or "profiling")


def _model(config: dict) -> str | None:
    items = (config.get("models") or {}).get("items") or []
    names = [item.get("name") for item in items if isinstance(item, dict)]
    return names[0] if len(names) == 1 else None


def _metric(records: list[dict], name: str) -> list:
    """One metric's value per record, None where a record lacks it."""
    return [((r.get("metrics") or {}).get(name) or {}).get("value") for r in records]


def _time_metric(path: Path, records: list[dict], name: str) -> tuple[list, float, str]:
    """A time metric's values, the ns in its unit and the unit (one for all records)."""
    units = {unit for r in records
             if (unit := ((r.get("metrics") or {}).get(name) or {}).get("unit")) is not None}
    if len(units) > 1 or not units <= set(_NS):
        raise EvidenceFileError(path, f"{name}: units {sorted(units)}, expected one of "
                                      f"{', '.join(_NS)}")
    unit = units.pop() if units else "ns"
    return _metric(records, name), _NS[unit], unit


def _extra(path: Path, endpoint: dict) -> dict:
    """The request body's extra inputs (--extra-inputs), their numbers checked."""
    extra = dict(endpoint.get("extra") or {})
    where = "input_config.endpoint.extra"
    extra["max_tokens"] = count(path, extra.get("max_tokens", extra.get(
        "max_completion_tokens")), where, "max_tokens", minimum=1)
    extra["temperature"] = number(path, extra.get("temperature"), where, "temperature",
                                  expected="a finite temperature >= 0")
    return extra


def _requests(path: Path, window_id: str, records: list[dict], lines: list[int],
              extra: dict, server_counts: bool) -> pa.Table:
    meta = [r["metadata"] for r in records]
    ids = [m.get("x_request_id") for m in meta]

    def where(i: int) -> str:
        return f"line {lines[i]} (x_request_id {shown(ids[i])})"

    _refuse_repeats(path, ids, lines, where)
    status = ["failed" if r.get("error") else "unresolved" if m.get("was_cancelled")
              else "completed" for r, m in zip(records, meta, strict=True)]
    start, end = (counts(path, [m.get(key) for m in meta], f"metadata.{key}", where,
                         maximum=MAX_NS, expected=NANOSECONDS)
                  for key in ("request_start_ns", "request_end_ns"))
    in_order(path, ("metadata.request_start_ns", start), ("metadata.request_end_ns", end),
             where)
    ttft, ttft_unit, ttft_name = _time_metric(path, records, "time_to_first_token")
    gaps, gaps_unit, gaps_name = _time_metric(path, records, "inter_chunk_latency")
    ttft = numbers(path, ttft, "metrics.time_to_first_token", where,
                   maximum=MAX_SECONDS * 1e9 / ttft_unit,
                   expected=f"a finite duration >= 0 ({ttft_name})")
    gaps = number_lists(path, gaps, "metrics.inter_chunk_latency", where,
                        maximum=MAX_SECONDS * 1e9 / gaps_unit,
                        expected=f"a finite duration >= 0 ({gaps_name})")
    first = pc.add(start, seconds_to_ns(ttft, ttft_unit))
    events, last, chunks = content_events(first, lists_to_ns(gaps, gaps_unit))
    output_name, prompt_name = (("usage_completion_tokens", "usage_prompt_tokens")
                                if server_counts
                                else ("output_token_count", "input_sequence_length"))
    output, prompt, cached = (
        counts(path, _metric(records, name), f"metrics.{name}", where)
        for name in (output_name, prompt_name, "usage_prompt_cache_read_tokens"))
    # usage: AIPerf's reading of the server's usage (absent: none came back); else its own
    # tokenizer's count of the text
    source = pc.if_else(output.is_valid(), "usage" if server_counts else CLIENT_TOKENIZER,
                        "missing")
    n = len(records)
    return request_table({
        "request_id": [f"{window_id}/m{i:05d}" for i in range(n)],
        "window_id": [window_id] * n, "seq": list(range(n)),
        "source_request_id": ids,
        "is_warmup": [m.get("benchmark_phase") == "warmup" for m in meta],
        "status": status,
        "error": [json.dumps(r["error"]) if r.get("error") else None for r in records],
        "max_tokens": [extra["max_tokens"]] * n,
        "temperature": [extra["temperature"]] * n,
        "prompt_tokens": prompt, "output_tokens": output, "cached_tokens": cached,
        "token_source": source, "chunks": chunks,
        "t_submit_ns": start, "t_first_ns": first, "t_last_ns": last,
        # an unresolved request was cancelled: its end was never seen
        "t_done_ns": pc.if_else(pa.array([s == "unresolved" for s in status]),
                                pa.nulls(n, pa.int64()), end),
        "content_event_ns": events,
    })


def _refuse_repeats(path: Path, ids: list[Any], lines: list[int],
                    where: Callable[[int], str]) -> None:
    """Each request record (AIPerf's x_request_id) appears once in an export."""
    pair = first_duplicate(pd.DataFrame({"x_request_id": pd.Series(ids, dtype=object)}))
    if pair is not None:
        raise EvidenceFileError(path, f"{where(pair[1])} repeats line {lines[pair[0]]}: a "
                                      "request record " + DUPLICATE)


def _window(path: Path, summary: dict, window_id: str, label: str, phase: dict,
            requests: pa.Table) -> dict:
    measured = requests.filter(pc.invert(requests.column("is_warmup")))
    status = measured.column("status").to_pylist()
    tally = {s: status.count(s) for s in ("completed", "failed", "unresolved")}
    elapsed = _phase_window_s(path, summary)
    duration = _avg(path, summary, "benchmark_duration")
    where = "input_config.phases (profiling)"
    extra_rate = number(path, phase.get("request_rate"), where, "request_rate", above=0,
                        expected="a finite rate > 0")
    concurrency = count(path, phase.get("concurrency"), where, "concurrency", minimum=1)
    return {
        "window_id": window_id, "workload": label, "load_pattern": label,
        "concurrency": concurrency if extra_rate is None else None,
        "arrival": "closed" if concurrency is not None and extra_rate is None
        else ("poisson" if phase.get("arrival_pattern") == "poisson" else None),
        "requested_rate_rps": extra_rate,
        "submitted": len(status), **tally,
        "drain_status": "incomplete" if tally["unresolved"] else "complete",
        # AIPerf writes its window's start and end as local times without a zone: only
        # their difference is used, as elapsed_s
        "window_start": None, "window_end": None,
        "elapsed_s": elapsed,
        "denominator": ("AIPerf's profiling window (end_time - start_time of the summary), "
                        "the denominator of its output_token_throughput"
                        + (f"; its benchmark_duration, first request to last response, is "
                           f"{duration:.6g} s" if duration is not None else "")),
        "min_requests": MIN_REQUESTS_PLAIN,
        "max_tokens": measured.column("max_tokens")[0].as_py() if len(status) else None,
        "temperature": measured.column("temperature")[0].as_py() if len(status) else None,
        "reported_output_tok_s": _avg(path, summary, "output_token_throughput"),
        "reported_total_tok_s": _avg(path, summary, "total_token_throughput"),
    }


def _warmup_submitted(config: dict, requests: pa.Table) -> int | None:
    """Warm-up requests: those exported, or 0 when the run had no warm-up phase; None when
    it had one whose requests the export left out."""
    exported = pc.sum(requests.column("is_warmup")).as_py() or 0
    had_warmup = any(isinstance(p, dict) and p.get("kind") == "warmup"
                     for p in config.get("phases") or [])
    return exported if exported or not had_warmup else None


def _phase_window_s(path: Path, summary: dict) -> float:
    start, end = (need(path, summary, key, str, key) for key in ("start_time", "end_time"))
    try:
        elapsed = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (ValueError, TypeError) as exc:  # not ISO, or one with a zone and one without
        raise EvidenceFileError(path, f"start_time/end_time: not ISO times ({exc})") from exc
    if not elapsed > 0:
        raise EvidenceFileError(path, f"end_time {shown(end)}, expected later than "
                                      f"start_time {shown(start)} (AIPerf's profiling window)")
    return elapsed


def _avg(path: Path, summary: dict, name: str) -> float | None:
    value = (summary.get(name) or {}).get("avg")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return number(path, value, name, "avg", expected=RATE)


def _check_counts(path: Path, summary: dict, window: dict) -> None:
    """The records must be the summary's requests: fewer is a truncated export."""
    counted = _avg(path, summary, "request_count")
    if counted is not None and counted != window["completed"]:
        raise EvidenceFileError(path, (
            f"{window['completed']} completed request records, but the summary counts "
            f"{counted:g} (a truncated or mismatched export; benchledger imports complete "
            "exports only)"))


def _first_start(requests: pa.Table) -> datetime | None:
    first = pc.min(requests.column("t_submit_ns")).as_py()
    return from_epoch(first / 1e9) if first is not None else None
