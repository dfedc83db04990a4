"""Impossible usage is never published (issue #11), on synthetic runs written by the project's
own writers and taken through load, validate and derive.

The issue's tester saw a server without /metrics report completion_tokens = 10**9 for
max_tokens = 8 and get a decode rate of 4.6e10 tok/s published; negative usage published
-177.9 tok/s; a missing prompt_tokens published an input+output throughput of 0.0. The
client records such counts exactly as reported (token_source 'usage'); the rule
usage_plausible blocks every entry resting on the window, and derivation never turns a
missing count into 0.
"""

from __future__ import annotations

import math

import pytest

from benchledger import rules as R
from benchledger.raw.layout import RunLayout
from benchledger.warehouse.db import connect, query_frame
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.validate import validate_run
from tests.sweeps import simulator_arm, sweep
from tests.synthetic import RUN_ID, derived_warehouse, request_row, write_synthetic_run

N = 5  # measured requests per window: the protocol's floor for a plain arm

# arm -> (request index, the usage it reports) for one request of its only window
FAULTS = {
    "huge": (2, {"max_tokens": 8, "output_tokens": 10**9}),
    "negative": (1, {"output_tokens": -177}),
    "over": (3, {"output_tokens": 129}),  # max_tokens is 128
    "noprompt": (0, {"prompt_tokens": None}),
    "hugeprompt": (1, {"prompt_tokens": 10**9}),
    "cached": (4, {"prompt_tokens": 50, "cached_tokens": 51}),
    # issue #22: fewer tokens than text-bearing events (each carries one at least)
    "belowevents": (2, {"output_tokens": 1, "chunks": 8}),
}
# arm -> (the rule's reason, that reason with the request's values)
FOUND = {
    "huge": ("output_tokens above max_tokens", "output_tokens 1000000000 above max_tokens 8"),
    "negative": ("output_tokens below 0", "output_tokens -177 below 0"),
    "over": ("output_tokens above max_tokens", "output_tokens 129 above max_tokens 128"),
    "noprompt": ("prompt_tokens NULL", "prompt_tokens NULL"),
    "hugeprompt": ("prompt_tokens above 16777216", "prompt_tokens 1000000000 above 16777216"),
    "cached": ("cached_tokens above prompt_tokens", "cached_tokens 51 above prompt_tokens 50"),
    "belowevents": ("output_tokens below chunks", "output_tokens 1 below chunks 8"),
}


def usage_sweep(arms, restarts: int = 1) -> dict:
    return sweep("usage", [simulator_arm(arm, model="m") for arm in arms],
                 defaults={"requests": N, "restarts": restarts})


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("usage")
    layout = RunLayout(tmp_path / "data", RUN_ID)
    windows = {}
    for arm in ("control", *FAULTS):
        wid = layout.window_id(arm, 0, "code", 1)
        rows = [request_row(wid, i) for i in range(N)]
        if arm in FAULTS:
            index, usage = FAULTS[arm]
            rows[index].update(usage)
        windows[(arm, 0, "code")] = (rows, {})
    run = write_synthetic_run(tmp_path, usage_sweep(["control", *FAULTS]), windows)
    con = derived_warehouse(run.run_dir)
    yield con, layout
    con.close()


@pytest.mark.parametrize("arm", sorted(FAULTS))
def test_the_rule_names_the_request_and_its_values(warehouse, arm):
    con, layout = warehouse
    wid = layout.window_id(arm, 0, "code", 1)
    rows = con.execute("SELECT success, found FROM validations WHERE expectation = ? "
                       "AND subject = ?", [R.USAGE_PLAUSIBLE.name, wid]).fetchall()
    index = FAULTS[arm][0]
    reason, detail = FOUND[arm]
    assert rows == [(False, f"1 of {N} completed rows with usage implausible: {reason} (1); "
                            f"{wid}/m{index:04d} ({detail})")]


@pytest.mark.parametrize("arm", sorted(FAULTS))
def test_nothing_of_a_cell_with_impossible_usage_is_published(warehouse, arm):
    con, layout = warehouse
    assert con.execute("SELECT count(*) FROM published_entries WHERE arm = ?",
                       [arm]).fetchall() == [(0,)]
    entries = con.execute("SELECT count(*), count(*) FILTER (WHERE publishable), "
                          "count(value) FROM current_entries WHERE arm = ?", [arm]).fetchall()
    # Every entry is still written, blocked, and none holds a value from the window.
    assert entries[0][0] > 10 and entries[0][1:] == (0, 0)
    blocked = con.execute("SELECT DISTINCT b.subject FROM entry_blocks b JOIN current_entries "
                          "e USING (entry_id) WHERE e.arm = ? AND b.rule = ?",
                          [arm, R.USAGE_PLAUSIBLE.name]).fetchall()
    assert blocked == [(layout.window_id(arm, 0, "code", 1),)]
    # The impossible counts stay in the warehouse as they were reported.
    index, usage = FAULTS[arm]
    recorded = con.execute(
        f"SELECT {', '.join(usage)}, token_source FROM request_records WHERE request_id = ?",
        [f"{layout.window_id(arm, 0, 'code', 1)}/m{index:04d}"]).fetchall()
    assert recorded == [(*usage.values(), "usage")]


def test_the_plausible_control_cell_still_publishes(warehouse):
    con, _ = warehouse
    published = dict(con.execute(
        "SELECT numerator, value FROM published_entries WHERE arm = 'control' "
        "AND metric = 'throughput'").fetchall())
    # Five requests of 50 + 21 tokens, submitted 10 s apart, each done 1.6 s after its
    # submission: 40 s + 1.6 s of window.
    assert published == {"output_tokens": pytest.approx(5 * 21 / 41.6),
                         "input_plus_output_tokens": pytest.approx(5 * 71 / 41.6)}
    # blocked: only the prefill rate (warm prompts) and the tails five requests cannot give
    # (percentile_n_sufficient: a p90 needs 10, a p99 100)
    blocked = con.execute(
        "SELECT DISTINCT e.statistic, b.rule FROM current_entries e JOIN entry_blocks b "
        "USING (entry_id) WHERE e.arm = 'control' AND e.metric <> 'prefill_rate'").fetchall()
    assert sorted(blocked) == [("p90", R.PERCENTILE_N_SUFFICIENT.name),
                               ("p99", R.PERCENTILE_N_SUFFICIENT.name)]


def test_no_entry_anywhere_holds_an_impossible_rate(warehouse):
    con, _ = warehouse
    rates = [v for v, in con.execute("SELECT value FROM entries WHERE unit = 'tok/s' "
                                     "AND value IS NOT NULL").fetchall()]
    assert rates and all(0 < v < 1000 for v in rates)


# --- several restarts: the faulty one feeds nothing ---------------------------------------


def test_a_restart_with_impossible_usage_feeds_no_number(tmp_path):
    """With two restarts, the good restart's window still makes the cell's values (shown,
    blocked); the faulty restart's requests are in no mean, no restart mean, no lineage."""
    layout = RunLayout(tmp_path / "data", RUN_ID)
    windows = {}
    for k in (0, 1):
        wid = layout.window_id("a", k, "code", 1)
        rows = [request_row(wid, i, tokens=21 + k) for i in range(N)]
        windows[("a", k, "code")] = (rows, {})
    windows[("a", 1, "code")][0][0].update(output_tokens=10**9, max_tokens=8)
    text = usage_sweep(["a"], restarts=2)
    con = connect(":memory:")
    load_run_dir(con, write_synthetic_run(tmp_path, text, windows).run_dir)
    validate_run(con, RUN_ID)
    derive_entries(con, RUN_ID)
    faulty = layout.window_id("a", 1, "code", 1)
    assert con.execute("SELECT count(*) FROM published_entries").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM entry_lineage WHERE window_id = ?",
                       [faulty]).fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM entry_restart_means WHERE restart_id = ?",
                       [layout.restart_id("a", 1)]).fetchall() == [(0,)]
    # The output throughput is restart 0's alone: 21 tokens per request, never 10**9.
    (value,), = con.execute("SELECT value FROM entries WHERE metric = 'throughput' "
                            "AND numerator = 'output_tokens'").fetchall()
    assert value == pytest.approx(5 * 21 / 41.6)


# --- derivation: a missing count is never a zero ------------------------------------------


def window_sums(tmp_path, rows):
    layout = RunLayout(tmp_path / "data", RUN_ID)
    wid = layout.window_id("a", 0, "code", 1)
    rows = [dict(row, window_id=wid, request_id=f"{wid}/m{i:04d}")
            for i, row in enumerate(rows)]
    con = connect(":memory:")
    load_run_dir(con, write_synthetic_run(tmp_path, usage_sweep(["a"]),
                                          {("a", 0, "code"): (rows, {})}).run_dir)
    import pandas as pd

    con.register("derive_windows", pd.DataFrame({"window_id": [wid], "restart_id": ["r"],
                                                 "cell": [0]}))
    sums = query_frame(con, "derive_window_sums").iloc[0]
    con.close()
    return sums


def is_null(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def test_a_missing_prompt_count_leaves_the_input_plus_output_total_null(tmp_path):
    rows = [request_row("w", i, prompt_tokens=None if i == 0 else 50) for i in range(N)]
    sums = window_sums(tmp_path, rows)
    assert sums["output_tokens"] == 5 * 21
    assert is_null(sums["total_tokens"])  # never 4 * 71 (the others) nor 0


def test_no_prompt_count_at_all_is_not_an_input_plus_output_total_of_0(tmp_path):
    """The issue's server without prompt_tokens got an input+output throughput of 0.0."""
    sums = window_sums(tmp_path, [request_row("w", i, prompt_tokens=None) for i in range(N)])
    assert sums["output_tokens"] == 5 * 21
    assert is_null(sums["total_tokens"]) and sums["prompt_tokens_n"] == 0


def test_a_missing_output_count_leaves_every_token_total_null(tmp_path):
    rows = [request_row("w", i, tokens=None if i == 3 else 21) for i in range(N)]
    sums = window_sums(tmp_path, rows)
    assert is_null(sums["output_tokens"]) and is_null(sums["total_tokens"])
    assert is_null(sums["decode_tokens"])


def test_complete_counts_sum_as_before(tmp_path):
    sums = window_sums(tmp_path, [request_row("w", i) for i in range(N)])
    assert (sums["n_done"], sums["output_tokens"], sums["total_tokens"],
            sums["decode_tokens"]) == (5, 5 * 21, 5 * 71, 5 * 20)
