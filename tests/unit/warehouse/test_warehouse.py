"""Warehouse: migrations, idempotent loading, the requests view, gate + derivation.

Raw files are written by the project's own writer (benchledger.restart.steps) from synthetic
requests with known timestamps, so every derived number has a hand-computed answer.
The same code runs on an in-memory database and on a file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchledger.raw.layout import RunLayout
from benchledger.warehouse.db import connect, migrate
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.validate import validate_run
from tests.sweeps import simulator_arm, sweep
from tests.synthetic import RUN_ID, S, request_row, write_synthetic_run

MIGRATIONS_DIR = Path(__file__).resolve().parents[3] / "warehouse" / "migrations"

SWEEP = sweep("unit", [simulator_arm("a")], defaults={"requests": 5, "warmup": 1, "restarts": 2})


def write_run(tmp_path, *, bad_ttft_in_r1=False, chunks=None, n=5):
    """Two restarts of n requests each; `chunks`: content events per request (default one
    per token; 7 of the 21 tokens look speculative, so then n >= 15, T4)."""
    windows = {}
    for k, decode_s in ((0, 1.0), (1, 0.5)):  # r0: 20 tok/s, r1: 40 tok/s
        window_id = RunLayout(tmp_path / "data", RUN_ID).window_id("a", k, "code", 1)
        rows = [request_row(window_id, 0, warm=True, decode_s=decode_s, submit_s=0,
                            chunks=chunks)]
        rows += [request_row(window_id, i, decode_s=decode_s, submit_s=100 + i * 10,
                             chunks=chunks) for i in range(n)]
        if bad_ttft_in_r1 and k == 1:
            rows[-1]["t_first_ns"] = rows[-1]["t_done_ns"] + S  # first token after the end
        windows[("a", k, "code")] = (rows, {})
    return write_synthetic_run(tmp_path, SWEEP, windows)


@pytest.fixture(params=["memory", "file"])
def con(request, tmp_path):
    target = ":memory:" if request.param == "memory" else tmp_path / "wh.duckdb"
    connection = connect(target)
    yield connection
    connection.close()


def migration_files() -> list[str]:
    """Every .sql file of the migrations folder, in name order: what a fresh warehouse must
    apply. Listed without migrate()'s own pattern, so a misnamed file is caught too."""
    return sorted(p.name for p in MIGRATIONS_DIR.iterdir() if p.suffix == ".sql")


def recorded_migrations(con) -> list[tuple[int, str]]:
    return con.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()


def test_a_fresh_warehouse_applies_every_migration_file_once_in_order():
    import duckdb

    expected = migration_files()
    assert expected[0].startswith("0001_")
    con = duckdb.connect(":memory:")
    try:
        assert migrate(con) == expected
        assert recorded_migrations(con) == [(int(n[:4]), n) for n in expected]
        assert [v for v, _ in recorded_migrations(con)] == list(range(1, len(expected) + 1))
        assert migrate(con) == []  # recorded ones are never applied again
    finally:
        con.close()


def test_migrations_are_recorded_and_not_reapplied(con):
    assert [n for _, n in recorded_migrations(con)] == migration_files()
    assert migrate(con) == []


def test_loading_is_idempotent(con, tmp_path):
    layout = write_run(tmp_path)
    first = load_run_dir(con, layout.run_dir)
    assert first == {"runs": 1, "restarts": 2, "windows": 2, "requests": 12, "observations": 0,
                     "telemetry": 0}
    assert set(load_run_dir(con, layout.run_dir).values()) == {0}
    assert con.execute("SELECT count(*) FROM request_records").fetchall() == [(12,)]
    # run + 2 restart manifests + 2 window manifests + 2 request files + 2 observations
    assert con.execute("SELECT count(*) FROM raw_files").fetchall() == [(9,)]


def test_requests_view_derives_protocol_metrics(con, tmp_path):
    load_run_dir(con, write_run(tmp_path, chunks=7).run_dir)
    ttft, e2e, tpot, decode, e2e_rate, tpc = con.execute(
        "SELECT ttft_s, e2e_s, tpot_s, decode_tok_s, e2e_tok_s, tokens_per_chunk "
        "FROM requests WHERE request_id LIKE '%/r0/code-c1/m0000'").fetchall()[0]
    assert ttft == pytest.approx(0.5) and e2e == pytest.approx(1.6)
    assert tpot == pytest.approx(1.0 / 20) and decode == pytest.approx(20.0)
    assert e2e_rate == pytest.approx(21 / 1.6) and tpc == pytest.approx(3.0)


def test_clean_run_publishes_request_and_restart_level_statistics(con, tmp_path):
    load_run_dir(con, write_run(tmp_path).run_dir)
    assert validate_run(con, RUN_ID)["failed"] == 0
    # 7 request metrics (+ 9 percentiles, + tokens per chunk min/max), 6 window metrics,
    # and the prefix cache's share of the prompt tokens (its requests report cached_tokens)
    assert derive_entries(con, RUN_ID) == 25
    assert derive_entries(con, RUN_ID) == 0  # an entry never silently changes
    value, n, restarts, rmean, effect, publishable = con.execute(
        "SELECT value, n_requests, n_restarts, restart_mean, restart_effect, publishable "
        "FROM entries WHERE metric = 'decode_rate' AND scope = 'single_stream'").fetchall()[0]
    assert value == pytest.approx(30.0) and rmean == pytest.approx(30.0)
    assert (n, restarts, publishable) == (10, 2, True)
    assert effect  # 20 vs 40 tok/s with zero spread: the restarts disagree
    (entry_id,), = con.execute("SELECT entry_id FROM entries WHERE metric = 'decode_rate' "
                               "AND scope = 'single_stream'").fetchall()
    layout = RunLayout(tmp_path / "data", RUN_ID)
    windows = [layout.window_id("a", k, "code", 1) for k in (0, 1)]
    requests = {r for r, in con.execute("SELECT request_id FROM entry_requests "
                                        "WHERE entry_id = ?", [entry_id]).fetchall()}
    assert requests == {f"{w}/m{i:04d}" for w in windows for i in range(5)}  # no warm-up
    # Lineage is stored per window (with its requests file), never per request.
    stored = con.execute("SELECT window_id, request_id, request_metric FROM entry_lineage "
                         "WHERE entry_id = ? AND validation_id IS NULL ORDER BY window_id",
                         [entry_id]).fetchall()
    assert stored == [(w, None, "decode_tok_s") for w in windows]
    # every rule result behind the entry: its restarts, windows, cell coverage and itself
    subjects = [layout.restart_id("a", 0), layout.restart_id("a", 1), *windows,
                f"{RUN_ID}/a/code-c1", entry_id]
    behind = con.execute("SELECT validation_id, suite FROM validations WHERE subject IN "
                         f"({', '.join('?' * len(subjects))})", subjects).fetchall()
    linked = {v for v, in con.execute("SELECT validation_id FROM entry_lineage "
                                      "WHERE entry_id = ? AND validation_id IS NOT NULL",
                                      [entry_id]).fetchall()}
    assert linked == {v for v, _ in behind}
    assert {s for _, s in behind} == {"restarts", "windows", "measured_requests", "coverage",
                                      "entries"}


def test_failed_window_is_excluded_and_blocks_its_entries(con, tmp_path):
    load_run_dir(con, write_run(tmp_path, bad_ttft_in_r1=True).run_dir)
    result = validate_run(con, RUN_ID)
    assert result["failed"] == 1 and "ttft_not_above_e2e" in result["failed_rules"][0]
    derive_entries(con, RUN_ID)
    value, n, publishable, blocked = con.execute(
        "SELECT value, n_requests, publishable, blocked_by FROM entries "
        "WHERE metric = 'decode_rate' AND scope = 'single_stream'").fetchall()[0]
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


def test_warm_prefill_rate_is_blocked_by_the_entry_gate(con, tmp_path):
    load_run_dir(con, write_run(tmp_path).run_dir)
    validate_run(con, RUN_ID)
    derive_entries(con, RUN_ID)
    publishable, blocked = con.execute(
        "SELECT publishable, blocked_by FROM entries WHERE metric = 'prefill_rate'"
    ).fetchall()[0]
    assert not publishable
    assert "prefill_rate_cold_prompts" in blocked and "found 'warm'" in blocked
    suites = {s for s, in con.execute("SELECT DISTINCT suite FROM validations").fetchall()}
    assert "entries" in suites


def test_event_gaps_are_per_event_never_per_token(con, tmp_path):
    load_run_dir(con, write_run(tmp_path).run_dir)
    gaps = con.execute(
        "SELECT gap_index, event_gap_s FROM event_gaps "
        "WHERE request_id LIKE '%/r1/code-c1/m0000'").fetchall()
    # two content events 0.5 s apart carry 21 tokens: one gap of 0.5 s, not 20 small ones
    assert [(i, round(g, 9)) for i, g in gaps] == [(1, 0.5)]


def test_tokens_per_chunk_above_one_carries_the_under_report_warning(con, tmp_path):
    load_run_dir(con, write_run(tmp_path, chunks=7, n=15).run_dir)
    validate_run(con, RUN_ID)
    derive_entries(con, RUN_ID)
    stats = dict(con.execute("SELECT statistic, value FROM entries "
                             "WHERE metric = 'tokens_per_chunk'").fetchall())
    assert stats == {"mean": pytest.approx(3.0), "min": pytest.approx(3.0),
                     "max": pytest.approx(3.0)}  # 21 tokens in 7 events
    (warning,), = con.execute("SELECT warning FROM entries WHERE metric = 'tokens_per_chunk' "
                              "AND statistic = 'mean'").fetchall()
    assert warning.startswith("chunk counting would under-report") and "x3.00" in warning


def test_new_data_makes_new_entry_ids_and_old_ones_stay_queryable(con, tmp_path):
    layout = RunLayout(tmp_path / "data", RUN_ID)

    def window(k, decode_s):
        wid = layout.window_id("a", k, "code", 1)
        return [request_row(wid, i, decode_s=decode_s, submit_s=i * 10) for i in range(5)]

    write_synthetic_run(tmp_path, SWEEP, {("a", 0, "code"): (window(0, 1.0), {})})
    load_run_dir(con, layout.run_dir)
    validate_run(con, RUN_ID)
    derive_entries(con, RUN_ID)
    first = dict(con.execute("SELECT metric, value FROM published_entries "
                             "WHERE scope = 'single_stream' AND statistic = 'mean'").fetchall())
    # nothing published yet: r1's window is missing (windows_present), so all are blocked
    assert first == {}
    old_ids = {e for e, in con.execute("SELECT entry_id FROM entries").fetchall()}

    write_synthetic_run(tmp_path, SWEEP, {("a", 1, "code"): (window(1, 0.5), {})})
    load_run_dir(con, layout.run_dir)  # the late window arrives
    validate_run(con, RUN_ID)
    derive_entries(con, RUN_ID)
    history = con.execute("SELECT entry_id, value, is_current FROM entry_history "
                          "WHERE metric = 'decode_rate' AND scope = 'single_stream' "
                          "AND statistic = 'mean' ORDER BY is_current").fetchall()
    assert len(history) == 2 and history[0][0] in old_ids and history[1][0] not in old_ids
    assert history[0][1] == pytest.approx(20.0) and history[1][1] == pytest.approx(30.0)
    published = con.execute("SELECT entry_id FROM published_entries WHERE metric = "
                            "'decode_rate' AND scope = 'single_stream'").fetchall()
    assert published == [(history[1][0],)]
    assert old_ids <= {e for e, in con.execute("SELECT entry_id FROM entries").fetchall()}
