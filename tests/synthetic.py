"""Synthetic raw files with hand-chosen timestamps, written by the project's own writers.

Used where a test needs numbers it can compute by hand (the protocol's worked examples,
derivation, the gate), without a server in the loop.
"""

from __future__ import annotations

from pathlib import Path

from benchledger.client import WindowResult
from benchledger.raw import seal
from benchledger.raw.layout import NODES_DIR, RunLayout, write_json
from benchledger.restart.steps import write_run_manifest
from benchledger.restart.window_write import write_window
from benchledger.warehouse.db import connect
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.validate import validate_run

S = 1_000_000_000  # ns per second
RUN_ID = "manual__2026-11-30T00:00:00+00:00"
WALL_ANCHOR_NS = 1_796_000_000 * S


def request_row(window_id, i, *, warm=False, status="completed", prompt_tokens=50,
                tokens=21, submit_s=None, ttft_s=0.5, decode_s=1.0, tail_s=0.1,
                reads=None, chunks=None):
    """One request: submitted at submit_s (default i * 10 s), first token after ttft_s,
    last token decode_s later, stream done tail_s after that. Its content events are the
    first and the last, or with `reads` (seconds after t_first, one per content event
    after the first; events of one read share its stamp) those. `chunks` (default: one
    per token, a non-speculative stream; the stamps stand for reads, not events) is what
    the client counted; fewer than `tokens` is speculative evidence (the view
    window_speculation: 15 requests then, rule n_at_least_min)."""
    t0 = int((i * 10 if submit_s is None else submit_s) * S)
    t_first, t_last = t0 + int(ttft_s * S), t0 + int((ttft_s + decode_s) * S)
    row = {
        "request_id": f"{window_id}/{'w' if warm else 'm'}{i:04d}", "window_id": window_id,
        "seq": i, "is_warmup": warm, "status": status, "http_status": 200, "error": None,
        "prompt_id": "code-00", "prompt_sha256": "x" * 64, "prompt_prefix": None,
        "max_tokens": 128, "temperature": 0.0, "prompt_tokens": prompt_tokens,
        "output_tokens": tokens, "cached_tokens": 0, "token_source": "usage",
        "chunks": (tokens or 0) if chunks is None else chunks,
        "finish_reason": "length", "t_submit_ns": t0, "t_first_ns": t_first,
        "t_last_ns": t_last, "t_done_ns": t_last + int(tail_s * S),
        "content_event_ns": [t_first, t_last],
    }
    if reads is not None:
        row["content_event_ns"] = [t_first, *(t_first + int(r * S) for r in reads)]
        row["t_last_ns"] = row["content_event_ns"][-1]
        row["t_done_ns"] = row["t_last_ns"] + int(tail_s * S)
        if chunks is not None:  # else one token per event, each of `reads` one stamp
            row["chunks"] = chunks
    if status == "failed":
        row.update(http_status=500, error="HTTP 500", prompt_tokens=None, output_tokens=None,
                   cached_tokens=None, token_source="missing", chunks=0, finish_reason=None,
                   t_first_ns=None, t_last_ns=None, content_event_ns=[])
    elif status == "unresolved":
        row.update(error="still running at the drain deadline", prompt_tokens=None,
                   output_tokens=None, cached_tokens=None, token_source="missing",
                   finish_reason=None, t_done_ns=None)
    return row


def ruler(lag_p99_ms, *, lag_p50_ms=None, cpu_share=None, bunched=None, workers=1):
    """The client's account of its own lateness in a window (issue #21's accounting keys)."""
    return {"client_workers": workers, "client_lag_p50_ms": lag_p50_ms,
            "client_lag_p99_ms": lag_p99_ms, "client_lag_max_ms": lag_p99_ms,
            "client_lag_samples": 1000, "client_cpu_share": cpu_share,
            "bunched_event_fraction": bunched}


def accounting(window_id, rows, *, concurrency=1, drain_deadline_s=None, prompt_cache="warm",
               client=None):
    """The window manifest the client would write for these rows (docs/protocol.md,
    definitions); `client`: the client's account of its lateness (ruler()), which windows
    recorded before issue #21 do not have."""
    measured = [r for r in rows if not r["is_warmup"]]
    counts = {s: sum(r["status"] == s for r in measured)
              for s in ("completed", "failed", "unresolved")}
    start = min(r["t_submit_ns"] for r in measured)
    if counts["unresolved"]:
        end = int(drain_deadline_s * S)
    else:
        end = max(r["t_done_ns"] for r in measured)
    return {"window_id": window_id, "concurrency": concurrency, "submitted": len(measured),
            **counts, "warmup_submitted": len(rows) - len(measured), "warmup_completed": 0,
            "drain_status": "incomplete" if counts["unresolved"] else "complete",
            "drain_timeout_s": 60.0, "anchor_wall_ns": WALL_ANCHOR_NS, "anchor_perf_ns": 0,
            "window_start_ns": start, "window_end_ns": end,
            "window_start_wall_ns": WALL_ANCHOR_NS + start,
            "window_end_wall_ns": WALL_ANCHOR_NS + end, "elapsed_s": (end - start) / S,
            "denominator": "synthetic", "max_tokens": 128, "temperature": 0.0,
            "arrival": "closed", "requested_rate_rps": None, "achieved_rate_rps": None,
            "prompt_cache": prompt_cache, "input_tokens_target": None, "seed": 0,
            **(client or {})}


def write_as_a_step(path: Path, data: dict) -> None:
    """Write a raw manifest as one of the run's steps writes it: recorded in the run's seal
    (benchledger.raw.seal), so that a state a test makes by hand loads like the pipeline's. A
    test of the seal itself edits files without it."""
    path = Path(path)
    write_json(path, data, sealed_in=path.parent.parent if path.parent.name == NODES_DIR
               else path.parent)


def seal_as_a_step(path: Path) -> None:
    """Record a file a test rewrote by hand in the run's seal, as its step would have."""
    path = Path(path)
    seal.record(path.parent.parent if path.parent.name == NODES_DIR else path.parent,
                [(path, seal.sha256_bytes(path.read_bytes()))])


def write_synthetic_run(tmp_path, sweep_text: str | dict, windows: dict, *, min_requests=5,
                        run_id=RUN_ID, config_sha256: dict | None = None,
                        restart_fields: dict | None = None) -> RunLayout:
    """windows: {(arm, restart_index, workload): (rows, accounting kwargs)}; the sweep as
    TOML text or a dict (tests.sweeps). Each arm reports its own effective config unless
    config_sha256 maps arms to one. restart_fields: {(arm, restart_index): more keys of
    its restart manifest} (when it started, its block)."""
    from tests.sweeps import toml

    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(sweep_text if isinstance(sweep_text, str) else toml(sweep_text))
    layout = RunLayout(tmp_path / "data", run_id)
    write_run_manifest(layout, sweep_file)
    for (arm, k, workload), (rows, kwargs) in windows.items():
        if not layout.restart_manifest(arm, k).exists():
            write_json(layout.restart_manifest(arm, k), {
                "restart_id": layout.restart_id(arm, k), "run_id": run_id, "arm": arm,
                "restart_index": k, "server_kind": "simulator", "single_instance": False,
                "status": "ok",
                "effective_config_sha256": (config_sha256 or {}).get(arm, f"config-of-{arm}"),
                "server_version": "sim 1", **(restart_fields or {}).get((arm, k), {})},
                sealed_in=layout.slot_dir(arm, k))
        result = WindowResult(rows=rows, accounting=accounting(rows[0]["window_id"], rows,
                                                               **kwargs))
        write_window(layout, arm, k, workload, workload, min_requests, result)
    return layout


def derived_warehouse(run_dir, run_id=RUN_ID, target=":memory:"):
    """A warehouse holding one run's raw files, loaded, gated and derived as the pipeline
    does it; the caller closes the connection."""
    con = connect(target)
    load_run_dir(con, run_dir)
    validate_run(con, run_id)
    derive_entries(con, run_id)
    return con
