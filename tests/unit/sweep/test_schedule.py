"""A sweep's schedule as Airflow keeps it (issue #25): the slots a run outlasting its
interval makes Airflow skip, and what `run --cluster` says when it installs such a sweep."""

from __future__ import annotations

from datetime import UTC, datetime

from benchledger.sweep import schedule
from tests.sweeps import simulator_arm, sweep, write_sweep


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 12, 3, hour, minute, tzinfo=UTC)


def test_the_slots_between_two_runs_are_the_skipped_ones():
    assert schedule.skipped_slots("* * * * *", at(10, 0), at(10, 4)) == (
        [at(10, m).isoformat() for m in (1, 2, 3)], 3)
    assert schedule.skipped_slots("* * * * *", at(10, 0), at(10, 1)) == ([], 0)  # next slot
    assert schedule.skipped_slots("@hourly", at(8, 0), at(11, 0)) == (
        [at(9, 0).isoformat(), at(10, 0).isoformat()], 2)
    assert schedule.skipped_slots("@quarterly", datetime(2026, 1, 1, tzinfo=UTC),
                                  datetime(2026, 10, 1, tzinfo=UTC))[1] == 2  # Apr, Jul
    # nothing to count from, no slots, or times out of order: nothing skipped
    assert schedule.skipped_slots("* * * * *", None, at(10, 4)) == ([], 0)
    assert schedule.skipped_slots("@once", at(10, 0), at(10, 4)) == ([], 0)
    assert schedule.skipped_slots("* * * * *", at(10, 4), at(10, 0)) == ([], 0)


def test_a_long_pause_is_counted_whole_and_listed_in_part():
    listed, count = schedule.skipped_slots("* * * * *", datetime(2026, 1, 1, tzinfo=UTC),
                                           datetime(2026, 1, 3, tzinfo=UTC))
    assert count == 2 * 24 * 60 - 1
    assert len(listed) == schedule.MAX_SKIPPED


def test_the_interval_is_the_shortest_gap_between_slots():
    assert schedule.interval_s("* * * * *") == 60
    assert schedule.interval_s("0 9,17 * * *") == 8 * 3600  # 09:00 and 17:00
    assert schedule.interval_s("@daily") == 86400
    assert schedule.interval_s(None) is None and schedule.interval_s("@continuous") is None


def test_install_says_when_runs_outlast_the_interval():
    note = schedule.overrun_note("nightly", "* * * * *", [95.0, 100.0, 80.0])
    assert note is not None
    assert "took 95 s (median of the last 3)" in note and "interval of 60 s" in note
    assert "runs.skipped_slots" in note
    assert schedule.overrun_note("nightly", "* * * * *", [20.0, 30.0]) is None  # fits
    first = schedule.overrun_note("nightly", "@hourly", [])
    assert first is not None and "every 3600 s" in first  # no history: what would happen
    assert schedule.overrun_note("manual", None, [500.0]) is None


CRON_SWEEP = sweep("every-minute", [simulator_arm("a", model="m")], sweep={"schedule": "* * * * *"})


def test_a_scheduled_run_records_its_slot_and_the_skipped_ones_in_runs(tmp_path):
    import json

    from benchledger.raw.layout import RunLayout
    from benchledger.restart.steps import write_run_manifest
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.load import load_run_dir

    sweep = tmp_path / "cron.toml"
    write_sweep(sweep, CRON_SWEEP)
    runs = {"scheduled__2026-12-03T10:04:00+00:00": (at(10, 4), at(10, 0)),
            "scheduled__2026-12-03T10:05:00+00:00": (at(10, 5), None),  # first: no count
            "manual__2026-12-03T10:06:30+00:00": (None, None)}
    with connect(tmp_path / "wh.duckdb") as con:
        for run_id, (slot, previous) in runs.items():
            layout = RunLayout(tmp_path / "data", run_id)
            write_run_manifest(layout, sweep, slot, previous)
            load_run_dir(con, layout.run_dir)
        rows = {r[0]: r[1:] for r in con.execute(
            "SELECT run_id, scheduled_for, skipped_slots, skipped_slot_count FROM runs")
            .fetchall()}
    slot, skipped, count = rows["scheduled__2026-12-03T10:04:00+00:00"]
    assert slot == at(10, 4) and count == 3
    assert json.loads(skipped) == [at(10, m).isoformat() for m in (1, 2, 3)]
    assert rows["scheduled__2026-12-03T10:05:00+00:00"] == (at(10, 5), None, None)
    assert rows["manual__2026-12-03T10:06:30+00:00"] == (None, None, None)
