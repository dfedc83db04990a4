"""Issue #43, item 4: `benchledger publish` without --run takes the newest run of the
sweep it is given (never another sweep's newest), and --run accepts the folder name the
raw and published folders spell the run id with."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from benchledger.publishing.read import run_to_publish
from benchledger.raw.layout import folder_name
from benchledger.warehouse.db import connect

NIGHTLY_OLD = "scheduled__2026-12-06T00:00:00+00:00"
NIGHTLY_NEW = "scheduled__2026-12-07T00:00:00+00:00"
OTHER = "manual__2026-12-07T09:30:00.123456+00:00"  # the warehouse's newest run


def _warehouse(tmp_path, runs):
    path = tmp_path / "wh.duckdb"
    with connect(path) as con:
        for run_id, sweep, hour in runs:
            con.execute("INSERT INTO runs (run_id, sweep_name, sweep_sha256, harness_version, "
                        "started_at) VALUES (?, ?, 'x', 'test', ?)",
                        [run_id, sweep, datetime(2026, 12, 7, hour, tzinfo=UTC)])
    return connect(path, read_only=True)


@pytest.fixture
def two_sweeps(tmp_path):
    con = _warehouse(tmp_path, [(NIGHTLY_OLD, "nightly", 1), (NIGHTLY_NEW, "nightly", 2),
                                (OTHER, "other", 3)])
    yield con
    con.close()


def test_a_sweep_gets_its_own_newest_run(two_sweeps):
    assert run_to_publish(two_sweeps, None, "nightly") == NIGHTLY_NEW
    assert run_to_publish(two_sweeps, None, "other") == OTHER


def test_no_choice_among_sweeps_is_made_for_the_user(two_sweeps):
    with pytest.raises(LookupError) as refused:
        run_to_publish(two_sweeps, None, None)
    assert str(refused.value) == (
        "the warehouse holds runs of 2 sweeps (other, nightly, newest first): name one with "
        "--sweep NAME (its newest run), or a run with --run RUN_ID")


def test_an_unknown_sweep_names_the_sweeps_there_are(two_sweeps):
    with pytest.raises(LookupError, match=r"no run of sweep 'nighty' in the warehouse; its "
                                          r"sweeps: other, nightly"):
        run_to_publish(two_sweeps, None, "nighty")


def test_a_run_is_found_by_its_id_or_its_folder_name(two_sweeps):
    assert folder_name(OTHER) == "manual__2026-12-07T09_30_00.123456_00_00"
    assert run_to_publish(two_sweeps, OTHER, None) == OTHER
    assert run_to_publish(two_sweeps, folder_name(OTHER), "nightly") == OTHER  # --run wins
    with pytest.raises(LookupError, match="no run 'manual__nope' in the warehouse; known runs"):
        run_to_publish(two_sweeps, "manual__nope", None)


def test_one_sweep_needs_no_name(tmp_path):
    with _warehouse(tmp_path, [(NIGHTLY_OLD, "nightly", 1), (NIGHTLY_NEW, "nightly", 2)]) as con:
        assert run_to_publish(con, None, None) == NIGHTLY_NEW


def test_an_empty_warehouse_says_so(tmp_path):
    with _warehouse(tmp_path, []) as con, pytest.raises(LookupError,
                                                        match="holds no runs yet"):
        run_to_publish(con, None, None)
