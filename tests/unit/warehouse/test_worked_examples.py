"""The protocol's worked examples, computed by the project's own derivation code.

- Ten completed requests of 1,000 input and 100 output tokens over a 10 s window: an
  aggregate output rate of 100 tok/s and an input+output rate of 1,100 tok/s, as two
  entries with their numerators (docs/protocol.md: T12).
- 100 submitted, 80 completed, 5 failed, 15 unresolved: completion fraction 0.85, success
  fraction 0.80, drain incomplete, latencies labelled completed_only, and 80/85 only ever
  as a `finished_only` success rate (T14).
"""

from __future__ import annotations

import pytest

from benchledger.raw.layout import RunLayout
from benchledger.warehouse.db import connect
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.validate import validate_run
from tests.sweeps import simulator_arm, sweep
from tests.synthetic import RUN_ID, request_row, write_synthetic_run


def worked_sweep(requests: int) -> dict:
    return sweep("worked", [simulator_arm("a")], defaults={"requests": requests, "restarts": 1})


def derived(tmp_path, requests: int, rows, **window_kwargs):
    layout = write_synthetic_run(tmp_path, worked_sweep(requests),
                                 {("a", 0, "code"): (rows, window_kwargs)})
    con = connect(":memory:")
    load_run_dir(con, layout.run_dir)
    validate_run(con, RUN_ID)
    derive_entries(con, RUN_ID)
    return con


def window_id(tmp_path) -> str:
    return RunLayout(tmp_path / "data", RUN_ID).window_id("a", 0, "code", 1)


def test_output_and_input_plus_output_rates_are_two_entries(tmp_path):
    wid = window_id(tmp_path)
    # Ten requests, each 1 s long, back to back: the window spans exactly 0 s .. 10 s.
    rows = [request_row(wid, i, prompt_tokens=1000, tokens=100, submit_s=i, ttft_s=0.2,
                        decode_s=0.7, tail_s=0.1) for i in range(10)]
    con = derived(tmp_path, 10, rows)
    assert con.execute("SELECT elapsed_s FROM windows").fetchall()[0][0] == pytest.approx(10.0)
    rates = dict(con.execute(
        "SELECT numerator, value FROM entries WHERE metric = 'throughput' "
        "AND scope = 'aggregate'").fetchall())
    assert rates == {"output_tokens": pytest.approx(100.0),
                     "input_plus_output_tokens": pytest.approx(1100.0)}
    labels = con.execute("SELECT DISTINCT phase, denominator, publishable FROM entries "
                         "WHERE metric = 'throughput'").fetchall()
    assert len(labels) == 1 and labels[0][0] == "end_to_end" and labels[0][2]
    assert "elapsed_s" in labels[0][1]


def test_unfinished_requests_are_accounted_for_never_ignored(tmp_path):
    wid = window_id(tmp_path)
    statuses = ["completed"] * 80 + ["failed"] * 5 + ["unresolved"] * 15
    rows = [request_row(wid, i, status=s, submit_s=i) for i, s in enumerate(statuses)]
    con = derived(tmp_path, 100, rows, concurrency=1, drain_deadline_s=200)
    assert con.execute("SELECT submitted, completed, failed, unresolved, drain_status "
                       "FROM windows").fetchall() == [(100, 80, 5, 15, "incomplete")]
    outcomes = {m: (v, p) for m, v, p in con.execute(
        "SELECT metric, value, population FROM entries WHERE unit = 'fraction'").fetchall()}
    assert outcomes["completion_fraction"] == (pytest.approx(0.85), "all_submitted")
    assert outcomes["success_fraction"] == (pytest.approx(0.80), "all_submitted")
    assert outcomes["success_rate"] == (pytest.approx(80 / 85), "finished_only")
    # 94% appears nowhere without its finished_only label
    unlabelled = con.execute(
        "SELECT count(*) FROM entries WHERE abs(value - 80 / 85) < 1e-9 "
        "AND population <> 'finished_only'").fetchall()
    assert unlabelled == [(0,)]
    latencies = con.execute("SELECT DISTINCT population, drain_status, n_submitted, "
                            "n_completed, n_failed, n_unresolved FROM entries "
                            "WHERE unit = 's'").fetchall()
    assert latencies == [("completed_only", "incomplete", 100, 80, 5, 15)]
    # rates from the incomplete window are labelled, so the entry gate lets them through
    # as what they are, never as if complete
    rates = con.execute("SELECT DISTINCT population FROM entries WHERE unit = 'tok/s' "
                        "AND publishable").fetchall()
    assert rates == [("completed_only",)]
