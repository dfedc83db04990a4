"""GuideLLM's benchmarks report (`guidellm run --output kind=json,path=F`), as evidence.

Read as GuideLLM 0.8 writes it (metadata.version 2): one window per entry of `benchmarks`,
one request row per record of its `requests.successful`, `.errored` and `.incomplete`
lists. Times are GuideLLM's own epoch seconds per request (request_start, the first and
last token iterations, request_end), so TTFT keeps its definition (first token iteration
minus request start). GuideLLM does not keep each streamed iteration's time, so
content_event_ns stays NULL; its per-iteration count is `chunks`.

Output tokens (trap T13): GuideLLM's output_metrics.text_tokens is the server's usage when
the stream carried one, but when it carried none and the request named its own length (data
with an output token count, as synthetic data has), GuideLLM writes the length it asked
for (max_tokens, with ignore_eos) there instead; with no count at all it counts stream
iterations. The file keeps no separate mark of usage, so a count is 'usage' only where the
file proves it: see _token_sources. docs/imports.md has the field table. Every value is
range-checked (checks.py) before anything is loaded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.imports.checks import (
    DUPLICATE,
    EPOCH,
    MAX_SECONDS,
    RATE,
    count,
    counts,
    first_duplicate,
    in_order,
    number,
    numbers,
    shown,
)
from benchledger.imports.evidence import (
    CHUNKS,
    REQUESTED,
    Evidence,
    EvidenceFileError,
    SourceFile,
    from_epoch,
    need,
    read_json,
    request_table,
    seconds_to_ns,
    single,
    window_id_for,
)
from benchledger.imports.tools import Importer, register
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
    windows, tables, places = [], [], []
    for index, benchmark in enumerate(benchmarks):
        window, requests, where = _benchmark(path, run_id, index, benchmark)
        windows.append(window)
        tables.append(requests)
        places.append(where)
    _refuse_repeats(path, tables, places)
    requests = pa.concat_tables(tables)
    return Evidence(
        tool="guidellm", run_id=run_id, name=name,
        files=[SourceFile(path, sha256, "guidellm-report", requests.num_rows)],
        tool_version=doc["metadata"].get("guidellm_version"), command=None,
        model=single([w.pop("model") for w in windows]),
        started_at=min(w["window_start"] for w in windows),
        windows=windows, requests=requests)


@register
class GuideLLMImporter(Importer):
    """GuideLLM's benchmarks report (one JSON file)."""

    name = "guidellm"

    def parse(self, path: Path, sha256: str, run_id: str, name: str) -> Evidence:
        return parse(path, sha256, run_id, name)


def _refuse_repeats(path: Path, tables: list[pa.Table],
                    places: list[Callable[[int], str]]) -> None:
    """A request record (GuideLLM's request_id) may appear once in a report; a whole
    benchmark repeated is said as such."""
    ids = [t.column("source_request_id") for t in tables]
    owner = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
    local = np.concatenate([np.arange(t.num_rows) for t in tables])
    every = pa.concat_tables(tables).column("source_request_id").to_pandas()
    pair = first_duplicate(pd.DataFrame({"request_id": every}))
    if pair is None:
        return
    (b0, i0), (b1, i1) = ((int(owner[k]), int(local[k])) for k in pair)
    if b0 != b1 and ids[b0].equals(ids[b1]):
        raise EvidenceFileError(path, f"benchmarks[{b1}] repeats benchmarks[{b0}] (the same "
                                      f"{len(ids[b1])} request records): a benchmark "
                                      + DUPLICATE)
    raise EvidenceFileError(path, f"{places[b1](i1)} (request_id {shown(every[pair[1]])}) "
                                  f"repeats {places[b0](i0)}: a request record " + DUPLICATE)


def _benchmark(path: Path, run_id: str, index: int,
               benchmark: Any) -> tuple[dict, pa.Table, Callable[[int], str]]:
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
    requests, place = _requests(path, index, window_id, records)
    duration = number(path, need(path, benchmark, "duration", (int, float),
                                 f"{where}.duration"), where, "duration", above=0,
                      maximum=MAX_SECONDS, expected="a finite number of seconds > 0")
    start, end = (number(path, need(path, benchmark, key, (int, float), f"{where}.{key}"),
                         where, key, maximum=MAX_SECONDS, expected=EPOCH)
                  for key in ("start_time", "end_time"))
    if start is not None and end is not None and end < start:  # (need() refused None)
        raise EvidenceFileError(path, f"{where}: end_time {shown(end)}, expected no earlier "
                                      f"than start_time {shown(start)}")
    metrics = benchmark["metrics"]
    completed, failed, unresolved = (len(records[key]) for key, _ in STATUSES)
    window = {
        "model": (benchmark["config"].get("backend") or {}).get("model") or None,
        "window_id": window_id, "workload": label, "load_pattern": label,
        "concurrency": count(path, _concurrency(strategy), where, "config.strategy.streams",
                             minimum=1, expected="a whole number of streams >= 1"),
        "arrival": _arrival(strategy),
        "requested_rate_rps": number(path, strategy.get("rate"), where,
                                     "config.strategy.rate", above=0,
                                     expected="a finite rate > 0"),
        "submitted": completed + failed + unresolved, "completed": completed,
        "failed": failed, "unresolved": unresolved,
        "drain_status": "incomplete" if unresolved else "complete",
        "window_start": from_epoch(start), "window_end": from_epoch(end),
        "elapsed_s": duration, "denominator": DENOMINATOR,
        "min_requests": MIN_REQUESTS_PLAIN,
        "warmup_submitted": _warmup_submitted(benchmark["config"]),
        "max_tokens": single(requests.column("max_tokens").to_pylist()),
        "temperature": single(requests.column("temperature").to_pylist()),
        "reported_output_tok_s": _successful_mean(path, where, metrics,
                                                  "output_tokens_per_second"),
        "reported_total_tok_s": _successful_mean(path, where, metrics, "tokens_per_second"),
    }
    return window, requests, place


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


def _successful_mean(path: Path, where: str, metrics: dict, name: str) -> float | None:
    value = ((metrics.get(name) or {}).get("successful") or {}).get("mean")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return number(path, value, where, f"metrics.{name}.successful.mean", expected=RATE)


def _requests(path: Path, index: int, window_id: str,
              records: dict[str, list]) -> tuple[pa.Table, Callable[[int], str]]:
    """One row per record, columns read once each from the records and range-checked."""
    rows = [(status, r) for key, status in STATUSES for r in records[key]]
    keys = [key for key, _ in STATUSES for _ in records[key]]
    positions = [i for key, _ in STATUSES for i in range(len(records[key]))]
    try:
        timings = [r["info"]["timings"] for _, r in rows]
        bodies = [_body(r.get("request_args")) for _, r in rows]
        delivered = [r["output_metrics"].get("text_tokens") for _, r in rows]
        prompt_counted = [(r.get("input_metrics") or {}).get("text_tokens") for _, r in rows]
        output = [r.get("output_tokens") for _, r in rows]
        ids = [r.get("request_id") for _, r in rows]
    except (KeyError, TypeError, AttributeError) as exc:
        raise EvidenceFileError(path, f"a request record of {window_id.rsplit('/', 1)[-1]} "
                                      f"lacks {exc} (info.timings, output_metrics)") from None

    def location(i: int) -> str:
        return f"benchmarks[{index}].requests.{keys[i]}[{positions[i]}]"

    def where(i: int) -> str:
        return f"{location(i)} (request_id {shown(ids[i])})"

    def checked(values: list, field: str) -> pa.Array:
        return counts(path, values, field, where)

    output_tokens = checked(output, "output_tokens")
    times = {name: numbers(path, [t.get(name) for t in timings], f"info.timings.{name}",
                           where, expected=EPOCH)
             for name in ("request_start", "first_token_iteration", "last_token_iteration",
                          "request_end")}
    for earlier, later in (("request_start", "first_token_iteration"),
                           ("first_token_iteration", "last_token_iteration"),
                           ("last_token_iteration", "request_end"),
                           ("request_start", "request_end")):
        in_order(path, (f"info.timings.{earlier}", times[earlier]),
                 (f"info.timings.{later}", times[later]), where)
    asked = checked([_asked(b) for b in bodies], "request_args.body.max_tokens")
    unresolved = pa.array([status == "unresolved" for status, _ in rows])
    columns = {
        "request_id": [f"{window_id}/m{i:05d}" for i in range(len(rows))],
        "window_id": [window_id] * len(rows),
        "seq": list(range(len(rows))),
        "source_request_id": ids,
        "is_warmup": [False] * len(rows),
        "status": [status for status, _ in rows],
        "error": [r["info"].get("error") for _, r in rows],
        "max_tokens": asked,
        "temperature": numbers(path, [(b or {}).get("temperature") for b in bodies],
                               "request_args.body.temperature", where, maximum=math.inf,
                               expected="a finite temperature >= 0"),
        "prompt_tokens": checked([r.get("prompt_tokens") for _, r in rows], "prompt_tokens"),
        "output_tokens": output_tokens,
        "cached_tokens": checked([r.get("cached_tokens") for _, r in rows], "cached_tokens"),
        "token_source": _token_sources(
            checked(delivered, "output_metrics.text_tokens"), output_tokens,
            asked,
            checked(prompt_counted, "input_metrics.text_tokens"),
            recorded=pa.array([b is not None for b in bodies]),
            ignore_eos=pa.array([(b or {}).get("ignore_eos") is True for b in bodies])),
        "chunks": checked([t.get("token_iterations") for t in timings],
                          "info.timings.token_iterations"),
        "t_submit_ns": seconds_to_ns(times["request_start"]),
        "t_first_ns": seconds_to_ns(times["first_token_iteration"]),
        "t_last_ns": seconds_to_ns(times["last_token_iteration"]),
        # an incomplete request was cancelled, not finished: its end was never seen
        "t_done_ns": pc.if_else(unresolved, pa.nulls(len(rows), pa.int64()),
                                seconds_to_ns(times["request_end"])),
    }
    return request_table(columns), location


def _asked(body: dict | None) -> Any:
    """The output length the request asked for (None when it named none or is unknown)."""
    body = body or {}
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if body.get(key) is not None:
            return body[key]
    return None


def _token_sources(delivered: pa.Array, output: pa.Array, asked: pa.Array,
                   prompt_counted: pa.Array, recorded: pa.Array,
                   ignore_eos: pa.Array) -> pa.Array:
    """Where each request's output tokens came from, as far as the file proves it.

    GuideLLM merges the server's usage over the request's own counts: with usage,
    input_metrics.text_tokens is the usage's prompt count (0 when absent, never null) and
    output_metrics.text_tokens its completion count; without usage both keep what the
    request carried, which for data with token counts is the requested length (GuideLLM
    then sends it as max_tokens with ignore_eos). So a count is usage only when usage came
    back (the prompt count is set) and it differs from the length GuideLLM asked for with
    ignore_eos; equal, it cannot be told from GuideLLM's own filled-in value (requested).
    No count: GuideLLM counted stream iterations (chunks), or had nothing (missing); the
    request GuideLLM sent not recorded (recorded false): origin unknown (NULL)."""
    filled_in = pc.fill_null(pc.and_(ignore_eos, pc.equal(asked, delivered)), False)
    no_usage = pc.or_(pc.is_null(prompt_counted), filled_in)
    return pc.case_when(
        pc.make_struct(pc.is_null(delivered), pc.invert(recorded), no_usage),
        pc.if_else(pc.is_valid(output), CHUNKS, "missing"),
        pa.scalar(None, pa.string()), REQUESTED, "usage")


def _body(request_args: Any) -> dict | None:
    """The request body GuideLLM sent (request_args is JSON text); None when not recorded."""
    if not isinstance(request_args, str):
        return None
    try:
        body = json.loads(request_args).get("body")
    except (json.JSONDecodeError, AttributeError):
        return None
    return body if isinstance(body, dict) else None
