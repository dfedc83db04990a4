"""Derivation at scale: lineage that grows with windows (not entries x requests), the same
numbers as the per-request derivation it replaced, and SQL lists that match the code."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from benchledger.publishing.explain import explain
from benchledger.warehouse.compare import derive_comparisons
from benchledger.warehouse.db import connect
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.metrics import REQUEST_METRICS
from benchledger.warehouse.validate import validate_run
from benchmarks.synthetic_run import write_scale_run
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "derive_10k_before.json"


def derived(tmp_path, requests: int, seed: int = 0, restarts: int = 2):
    """A synthetic run loaded, validated, derived and compared in a fresh :memory: warehouse."""
    layout = write_scale_run(tmp_path, requests, restarts=restarts, seed=seed)
    con = connect(":memory:")
    load_run_dir(con, layout.run_dir)
    validate_run(con, layout.run_id)
    derive_entries(con, layout.run_id)
    derive_comparisons(con, layout.run_id)
    return con, layout


def lineage_by_label(con) -> dict:
    rows = con.execute(
        "SELECT e.arm, e.workload, e.metric, e.scope, e.statistic, e.numerator, count(*) "
        "FROM entries e JOIN entry_lineage l USING (entry_id) GROUP BY ALL").fetchall()
    return {tuple(r[:-1]): r[-1] for r in rows}


def test_lineage_rows_do_not_grow_with_requests(tmp_path):
    """The old design stored one lineage row per (entry, request): doubling the requests of
    every window doubled it. Now an entry's lineage rows follow its windows."""
    small, _ = derived(tmp_path / "small", 8 * 20)  # 8 windows x 20 requests
    large, layout = derived(tmp_path / "large", 8 * 40)  # same windows x 40 requests
    assert lineage_by_label(small) == lineage_by_label(large)
    assert small.execute("SELECT count(*) FROM entry_lineage").fetchall() == \
        large.execute("SELECT count(*) FROM entry_lineage").fetchall()
    # ... while every entry still expands to exactly its requests.
    (entry_id, n), = large.execute(
        "SELECT entry_id, n_requests FROM entries WHERE metric = 'decode_rate' AND "
        "scope = 'single_stream' AND arm = 'spec' AND workload = 'code'").fetchall()
    requests = {r for r, in large.execute("SELECT request_id FROM entry_requests "
                                          "WHERE entry_id = ?", [entry_id]).fetchall()}
    windows = [layout.window_id("spec", k, "code", 1) for k in (0, 1)]
    assert n == 80 and requests == {f"{w}/m{i:06d}" for w in windows for i in range(40)}
    text = explain(large, entry_id, limit=1000)
    assert f"Requests ({n}):" in text
    assert all(request_id in text for request_id in requests)


def test_sql_lists_name_the_request_metrics():
    columns = [spec.column for spec in REQUEST_METRICS]
    stats = (REPO / "warehouse" / "queries" / "derive_request_stats.sql").read_text()
    on = re.search(r"^\s*ON (.+)$", stats, re.M).group(1)
    assert [c.strip() for c in on.split(",")] == columns
    view = (REPO / "warehouse" / "views" / "entry_requests.sql").read_text()
    assert re.findall(r"WHEN '(\w+)' THEN r\.(\w+) IS NOT NULL", view) == [
        (c, c) for c in columns]


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    before = json.loads(FIXTURE.read_text())
    synthetic = before["synthetic"]  # written with write_scale_run's default 5 restarts
    con, _ = derived(tmp_path_factory.mktemp("reg"), synthetic["requests"],
                     seed=synthetic["seed"], restarts=5)
    return before, con


LABELS = ("arm", "workload", "metric", "statistic", "scope", "concurrency", "numerator")
NUMBERS = ("value", "ci95_low", "ci95_high", "restart_mean", "restart_ci95_low",
           "restart_ci95_high")


def test_same_entries_and_values_as_the_per_request_derivation(regression):
    """tests/fixtures/derive_10k_before.json was written by the per-request derivation of
    commit 19b0c78 (before issue #10; it took 440 s here) on this very synthetic run (seed
    7, 10,000 requests: load, validate, derive_entries, derive_comparisons, then every
    current entry's labels and numbers, and the sha256 of its sorted lineage request ids).
    The set-based derivation gives the same entries, values, labels and requests; values
    agree to floating-point summation order (rel 1e-9)."""
    before, con = regression
    columns = [c for c in before["entries"][0] if c not in ("requests", "requests_sha256")]
    # Metrics added since the fixture was written (issue #26: the prefix cache's share)
    # are new entries beside the old, which stay as they were.
    rows = con.execute(f"SELECT entry_id, {', '.join(columns)} FROM current_entries "
                       "WHERE metric NOT IN ('cached_token_share', 'prefix_cache_hit_rate')"
                       ).fetchall()
    by_label = {}
    for entry_id, *values in rows:
        entry = dict(zip(columns, values, strict=True))
        by_label[tuple(entry[k] for k in LABELS)] = (entry_id, entry)
    now = by_label
    assert len(now) == len(before["entries"]) == len(rows)
    for old in before["entries"]:
        entry_id, new = now[tuple(old[k] for k in LABELS)]
        for key in columns:
            if key in NUMBERS and old[key] is not None:
                assert new[key] == pytest.approx(old[key], rel=1e-9, abs=1e-12), (key, old)
            else:
                assert new[key] == old[key], (key, old)
        requests = sorted(r for r, in con.execute("SELECT request_id FROM entry_requests "
                                                  "WHERE entry_id = ?", [entry_id]).fetchall())
        assert len(requests) == old["requests"], old
        assert hashlib.sha256("\n".join(requests).encode()).hexdigest() == \
            old["requests_sha256"], old


def test_same_comparisons_as_before(regression):
    before, con = regression
    rows = con.execute("SELECT role, a, b, workload, metric, difference, ci95_low, ci95_high, "
                       "verdict FROM comparisons ORDER BY ALL").fetchall()
    assert len(rows) == len(before["comparisons"])
    for new, old in zip(rows, before["comparisons"], strict=True):
        assert new[:5] == tuple(old[:5]) and new[8] == old[8]
        assert list(new[5:8]) == pytest.approx(old[5:8], rel=1e-9)
