"""Warehouse: migrations, idempotent loading, the requests view, gate + derivation.

Raw files are written by the project's own writer (benchledger.restart) from synthetic
requests with known timestamps, so every derived number has a hand-computed answer.
The same code runs on an in-memory database and on a file.
"""

from __future__ import annotations

import textwrap

import pytest

from benchledger.client import WindowResult
from benchledger.restart import RunLayout, write_json, write_run_manifest, write_window
from warehouse.db import connect, load_run_dir, migrate
from warehouse.derive import derive_entries
from warehouse.validate import validate_run

RUN_ID = "manual__2026-11-30T00:00:00+00:00"
S = 1_000_000_000  # ns per second

SWEEP = textwrap.dedent("""
    [sweep]
    name = "unit"
    [defaults]
    requests = 5
    warmup = 1
    restarts = 2
    [[arms]]
    name = "a"
    server = "simulator"
    model = "sim-model"
    [[workloads]]
    name = "code"
""")


def request_row(window_id, i, *, warm=False, tokens=21, ttft_s=0.5, decode_s=1.0,
                tail_s=0.1, start=0):
    """A completed request: first token after ttft_s, last after ttft_s + decode_s."""
    t0 = start + i * 10 * S
    t_first, t_last = t0 + int(ttft_s * S), t0 + int((ttft_s + decode_s) * S)
    return {
        "request_id": f"{window_id}/{'w' if warm else 'm'}{i:04d}", "window_id": window_id,
        "seq": i, "is_warmup": warm, "status": "completed", "http_status": 200,
        "error": None, "prompt_id": "code-00", "prompt_sha256": "x" * 64, "max_tokens": 64,
        "temperature": 0.0, "prompt_tokens": 50, "output_tokens": tokens,
        "cached_tokens": None, "token_source": "usage", "chunks": 7, "finish_reason": "length",
        "t_submit_ns": t0, "t_first_ns": t_first, "t_last_ns": t_last,
        "t_done_ns": t_last + int(tail_s * S), "content_event_ns": [t_first, t_last],
    }


def accounting(window_id, rows):
    measured = [r for r in rows if not r["is_warmup"]]
    start = min(r["t_submit_ns"] for r in measured)
    end = max(r["t_done_ns"] for r in measured)
    return {"window_id": window_id, "concurrency": 1, "submitted": len(measured),
            "completed": len(measured), "failed": 0, "unresolved": 0,
            "warmup_submitted": 1, "warmup_completed": 1, "drain_status": "complete",
            "drain_timeout_s": 60.0, "anchor_wall_ns": 1_796_000_000 * S,
            "anchor_perf_ns": 0, "window_start_ns": start, "window_end_ns": end,
            "window_start_wall_ns": 1_796_000_000 * S + start,
            "window_end_wall_ns": 1_796_000_000 * S + end, "elapsed_s": (end - start) / S,
            "max_tokens": 64, "temperature": 0.0}


def write_run(tmp_path, *, bad_ttft_in_r1=False):
    sweep_file = tmp_path / "unit.toml"
    sweep_file.write_text(SWEEP)
    layout = RunLayout(tmp_path / "data", RUN_ID)
    write_run_manifest(layout, sweep_file)
    for k, decode_s in ((0, 1.0), (1, 0.5)):  # r0: 20 tok/s, r1: 40 tok/s
        write_json(layout.restart_manifest("a", k), {
            "restart_id": layout.restart_id("a", k), "run_id": RUN_ID, "arm": "a",
            "restart_index": k, "server_kind": "simulator", "single_instance": False,
            "status": "ok", "effective_config_sha256": "c" * 64, "server_version": "sim 1"})
        window_id = layout.window_id("a", k, "code", 1)
        rows = [request_row(window_id, 0, warm=True, decode_s=decode_s)]
        rows += [request_row(window_id, i, decode_s=decode_s, start=100 * S) for i in range(5)]
        if bad_ttft_in_r1 and k == 1:
            rows[-1]["t_first_ns"] = rows[-1]["t_done_ns"] + S  # first token after the end
        write_window(layout, "a", k, "code", "code", 5,
                     WindowResult(rows=rows, accounting=accounting(window_id, rows)))
    return layout


@pytest.fixture(params=["memory", "file"])
def con(request, tmp_path):
    target = ":memory:" if request.param == "memory" else tmp_path / "wh.duckdb"
    connection = connect(target)
    yield connection
    connection.close()


def test_migrations_are_recorded_and_not_reapplied(con):
    names = [n for n, in con.execute("SELECT name FROM schema_migrations").fetchall()]
    assert names[0].startswith("0001_") and len(names) >= 3
    assert migrate(con) == []


def test_loading_is_idempotent(con, tmp_path):
    layout = write_run(tmp_path)
    first = load_run_dir(con, layout.run_dir)
    assert first == {"runs": 1, "restarts": 2, "windows": 2, "requests": 12}
    assert load_run_dir(con, layout.run_dir) == {"runs": 0, "restarts": 0, "windows": 0,
                                                   "requests": 0}
    assert con.execute("SELECT count(*) FROM request_records").fetchall() == [(12,)]
    # run + 2 restart manifests + 2 window manifests + 2 request files
    assert con.execute("SELECT count(*) FROM raw_files").fetchall() == [(7,)]


def test_requests_view_derives_protocol_metrics(con, tmp_path):
    load_run_dir(con, write_run(tmp_path).run_dir)
    ttft, e2e, tpot, decode, e2e_rate, tpc = con.execute(
        "SELECT ttft_s, e2e_s, tpot_s, decode_tok_s, e2e_tok_s, tokens_per_chunk "
        "FROM requests WHERE request_id LIKE '%/r0/code-c1/m0000'").fetchall()[0]
    assert ttft == pytest.approx(0.5) and e2e == pytest.approx(1.6)
    assert tpot == pytest.approx(1.0 / 20) and decode == pytest.approx(20.0)
    assert e2e_rate == pytest.approx(21 / 1.6) and tpc == pytest.approx(3.0)


def test_clean_run_publishes_request_and_restart_level_statistics(con, tmp_path):
    load_run_dir(con, write_run(tmp_path).run_dir)
    assert validate_run(con, RUN_ID)["failed"] == 0
    assert derive_entries(con, RUN_ID) == 3
    assert derive_entries(con, RUN_ID) == 0  # an entry never silently changes
    value, n, restarts, rmean, effect, publishable = con.execute(
        "SELECT value, n_requests, n_restarts, restart_mean, restart_effect, publishable "
        "FROM entries WHERE metric = 'decode_rate'").fetchall()[0]
    assert value == pytest.approx(30.0) and rmean == pytest.approx(30.0)
    assert (n, restarts, publishable) == (10, 2, True)
    assert effect  # 20 vs 40 tok/s with zero spread: the restarts disagree
    lineage = con.execute("SELECT count(request_id), count(validation_id) FROM entry_lineage "
                          "JOIN entries USING (entry_id) WHERE metric = 'decode_rate'").fetchall()
    assert lineage[0][0] == 10 and lineage[0][1] > 0


def test_failed_window_is_excluded_and_blocks_its_entries(con, tmp_path):
    load_run_dir(con, write_run(tmp_path, bad_ttft_in_r1=True).run_dir)
    result = validate_run(con, RUN_ID)
    assert result["failed"] == 1 and "ttft_not_above_e2e" in result["failed_rules"][0]
    derive_entries(con, RUN_ID)
    value, n, publishable, blocked = con.execute(
        "SELECT value, n_requests, publishable, blocked_by FROM entries "
        "WHERE metric = 'decode_rate'").fetchall()[0]
    assert value == pytest.approx(20.0) and n == 5  # only r0, the window that passed
    assert not publishable and "ttft_not_above_e2e" in blocked and "/r1/code-c1" in blocked
    assert con.execute("SELECT count(*) FROM published_entries").fetchall() == [(0,)]


def test_read_only_connection_refuses_writes(tmp_path):
    import duckdb

    path = tmp_path / "wh.duckdb"
    connect(path).close()
    reader = connect(path, read_only=True)
    with pytest.raises(duckdb.Error, match="read-only"):
        reader.execute("DELETE FROM entries")
    reader.close()
