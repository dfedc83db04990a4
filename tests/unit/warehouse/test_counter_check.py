"""Published entries say whether the server's own counters checked them (issue #11).

A server without /metrics cannot be reconciled; the reconciliation rules then do not block
(a server may be measured without counters), so its numbers publish. They must say so where
published numbers are read: entries.counter_check, in published_entries and entries.json.
Synthetic windows written by the project's writers, with the /metrics text a server would
have shown before and after each window.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from benchledger.client import WindowResult
from benchledger.publishing.export import export_run
from benchledger.raw.layout import RunLayout
from benchledger.restart.window_write import write_window
from benchledger.warehouse.derive import counter_check
from tests import sweeps
from tests.synthetic import RUN_ID, accounting, derived_warehouse, request_row, write_synthetic_run

N = 6
GENERATION, PROMPT, SUCCESS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total",
                               "vllm:request_success_total")
# arm -> the counters its server exposes, and whether one request failed
ARMS = {
    "counted": ((GENERATION, PROMPT, SUCCESS), False),
    "lossy": ((GENERATION, PROMPT, SUCCESS), True),
    "partly": ((GENERATION,), False),
    "dark": ((), False),
}
EXPECTED = {"counted": "reconciled", "lossy": "lower bound", "partly": "partial",
            "dark": "no counter"}


def metrics_text(counters, values: dict[str, float]) -> str:
    return "".join(f"{name} {values[name]}\n" for name in counters)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("counters")
    layout = RunLayout(tmp_path / "data", RUN_ID)
    sweep = sweeps.sweep("counters", [sweeps.simulator_arm(arm, model="m") for arm in ARMS],
                         defaults={"requests": N, "restarts": 1})
    windows = {}
    for arm, (_, lossy) in ARMS.items():
        wid = layout.window_id(arm, 0, "code", 1)
        rows = [request_row(wid, i, status="failed" if lossy and i == 0 else "completed")
                for i in range(N)]
        windows[(arm, 0, "code")] = (rows, {})
    write_synthetic_run(tmp_path, sweep, windows)
    for arm, (counters, _) in ARMS.items():  # again, with what /metrics said
        rows, _ = windows[(arm, 0, "code")]
        done = [r for r in rows if r["status"] == "completed"]
        # The server counted exactly what it delivered (the failed request: nothing).
        after = {GENERATION: sum(r["output_tokens"] for r in done),
                 PROMPT: sum(r["prompt_tokens"] for r in done), SUCCESS: len(done)}
        observations = {"thresholds": {"reconcile_tolerance": 0.01}, "metrics": {
            "before": {"scraped_at": "2026-11-30T00:00:00+00:00",
                       "text": metrics_text(counters, dict.fromkeys(after, 0))},
            "after": {"scraped_at": "2026-11-30T00:01:00+00:00",
                      "text": metrics_text(counters, after)}}}
        write_window(layout, arm, 0, "code", "code", 5,
                     WindowResult(rows=rows, accounting=accounting(rows[0]["window_id"], rows)),
                     observations)
    con = derived_warehouse(layout.run_dir)
    yield con, tmp_path
    con.close()


def test_reconciliations_record_what_each_server_had(warehouse):
    con, _ = warehouse
    statuses = dict(con.execute(
        "SELECT w.arm, list(r.status ORDER BY r.counter) FROM reconciliations r "
        "JOIN windows w USING (window_id) GROUP BY ALL").fetchall())
    assert statuses == {"counted": ["match"] * 3, "lossy": ["lower bound"] * 3,
                        "partly": ["match", "no counter", "no counter"],
                        "dark": ["no counter"] * 3}


def test_published_entries_say_how_their_counters_were_checked(warehouse):
    con, _ = warehouse
    labels = dict(con.execute("SELECT arm, list(DISTINCT counter_check) FROM published_entries "
                              "GROUP BY arm").fetchall())
    assert labels == {arm: [label] for arm, label in EXPECTED.items()}
    # Unchecked numbers still publish (a server may lack /metrics), labelled as such.
    assert con.execute("SELECT count(*) FROM published_entries WHERE arm = 'dark' "
                       "AND metric = 'decode_rate'").fetchall()[0][0] > 0


def test_entries_json_carries_the_counter_check(warehouse):
    con, tmp_path = warehouse
    out = export_run(con, RUN_ID, tmp_path / "published")
    entries = json.loads((out / "entries.json").read_text())
    assert entries and {e["arm"]: e["counter_check"] for e in entries} == EXPECTED


def checks(**windows) -> pd.DataFrame:
    rows = [(w, *counts) for w, counts in windows.items()]
    return pd.DataFrame(rows, columns=["window_id", "matched", "lower_bound", "mismatched",
                                       "no_counter"])


@pytest.mark.parametrize(("windows", "label"), [
    ([], None),  # no window behind the entry
    (["a", "b"], "reconciled"),
    (["a", "c"], "lower bound"),
    (["a", "d"], "partial"),  # a's counters matched, d's server had none
    (["d"], "no counter"),
    (["a", "never"], "partial"),  # a window never reconciled counts as unchecked
    (["never"], "no counter"),
    (["a", "e"], "mismatch"),
])
def test_counter_check_of_windows(windows, label):
    table = checks(a=(3, 0, 0, 0), b=(3, 0, 0, 0), c=(1, 2, 0, 0), d=(0, 0, 0, 3),
                   e=(2, 0, 1, 0))
    assert counter_check(pd.Series(windows, dtype=object), table) == label


@pytest.mark.parametrize(("tolerance", "status"), [(float("nan"), "match"), (None, "match"),
                                                   (0.01, "match"), (0.0, "mismatch")])
def test_a_window_without_a_tolerance_is_not_a_mismatch(tolerance, status):
    """A window row read through pandas holds NaN for a NULL tolerance; the reconciliation
    once called every such window a mismatch while the rule (which skips it) passed."""
    from tests.reference import reconcile_requests

    window = pd.Series({"window_id": "w", "run_id": "r", "failed": 0, "unresolved": 0,
                        "reconcile_tolerance": tolerance, "observation_errors": None})
    requests = pd.DataFrame({"is_warmup": [False], "status": ["completed"],
                             "output_tokens": [100], "prompt_tokens": [10]})
    metrics = pd.DataFrame({"phase": ["before", "after"], "name": [GENERATION] * 2,
                            "labels": ["{}"] * 2, "value": [0.0, 100.5]})
    (generation, *_) = reconcile_requests(window, requests, metrics)
    assert (generation["counter"], generation["status"]) == (GENERATION, status)
