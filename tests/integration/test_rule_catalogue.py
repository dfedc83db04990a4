"""The rule catalogue on the demo sweep itself, run through Airflow (~2 min): every rule of
benchledger/rules/ produced results, no result names a rule outside it, results are
structured (expected/found/ruleset_version), and blocked entries come from entry_blocks."""

from __future__ import annotations

import pytest

from benchledger.publishing.report import format_blocked
from benchledger.rules import BY_NAME, CATALOGUE, RULESET_VERSION
from tests.conftest import REPO, run_sweep_text

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("demo")
    text = (REPO / "dags" / "sweeps" / "demo.toml").read_text()
    run_id, state, con = run_sweep_text(workdir, text)
    yield run_id, state, con
    con.close()


def test_the_demo_run_succeeds(demo_run):
    assert demo_run[1] == "success"


def test_every_catalogue_rule_produced_results_and_nothing_else(demo_run):
    run_id, _, con = demo_run
    counts = dict(con.execute("SELECT expectation, count(*) FROM validations "
                              "WHERE run_id = ? GROUP BY 1", [run_id]).fetchall())
    assert set(counts) == set(BY_NAME), {
        "missing": sorted(set(BY_NAME) - set(counts)),
        "outside the catalogue": sorted(set(counts) - set(BY_NAME))}
    suites = dict(con.execute("SELECT DISTINCT expectation, suite FROM validations "
                              "WHERE run_id = ?", [run_id]).fetchall())
    assert suites == {rule.name: rule.suite for rule in CATALOGUE}


def test_results_are_structured_and_versioned(demo_run):
    run_id, _, con = demo_run
    rows = con.execute("SELECT expected, found, observed, ruleset_version FROM validations "
                       "WHERE run_id = ?", [run_id]).fetchall()
    assert rows
    for expected, found, observed, version in rows:
        assert expected and found is not None and version == RULESET_VERSION
        assert observed == f"expected {expected}, found {found}"


def test_blocked_entries_come_from_entry_blocks(demo_run):
    run_id, _, con = demo_run
    blocked = con.execute("SELECT entry_id, blocked_by FROM current_entries "
                          "WHERE run_id = ? AND NOT publishable", [run_id]).fetchall()
    # Warm-prompt prefill rates measure the prefix cache: the demo's prompts are warm.
    assert blocked
    for entry_id, blocked_by in blocked:
        parts = con.execute(
            "SELECT b.rule || ' [' || b.subject || ']: ' || v.observed FROM entry_blocks b "
            "JOIN validations v USING (validation_id) WHERE b.entry_id = ? "
            "ORDER BY b.rule, b.subject", [entry_id]).fetchall()
        assert sorted(blocked_by.split("; ")) == sorted(p for p, in parts)
    published = con.execute("SELECT count(*) FROM entry_blocks JOIN published_entries "
                            "USING (entry_id)").fetchall()
    assert published == [(0,)]
    from benchledger.publishing.read import blocks

    summary = format_blocked(blocks(con, run_id))
    assert summary.lstrip().startswith("prefill_rate_cold_prompts: 6 entries")


def test_comparison_rules_decide_the_verdicts(demo_run):
    run_id, _, con = demo_run
    rows = con.execute(
        "SELECT c.comparison_id, c.workload, c.verdict, c.ci95_low, c.ci95_high, "
        "       bool_and(v.success) AS rules_passed, count(v.expectation) AS rules "
        "FROM comparisons c JOIN validations v ON v.subject = c.comparison_id "
        "WHERE c.run_id = ? AND c.role = 'ab' AND v.suite = 'comparisons' GROUP BY ALL",
        [run_id]).fetchall()
    assert {workload for _, workload, *_ in rows} == {"code", "prose"}
    for _, workload, verdict, low, high, rules_passed, rules in rows:
        assert rules == 3
        # A claim only where every comparison rule passed and the interval excludes 0.
        claim = rules_passed and (low > 0 or high < 0)
        assert (verdict in ("improvement", "regression")) == claim, (workload, verdict)
    # Speculation's ~2.8 tokens per step on code is far beyond instance noise.
    verdicts = {workload: verdict for _, workload, verdict, *_ in rows}
    assert verdicts["code"] == "improvement", rows


def test_published_entries_say_their_counters_were_checked(demo_run):
    """The simulator serves vLLM's counters: every published entry rests on windows they
    reconciled (only as a lower bound where requests failed or stayed unresolved)."""
    run_id, _, con = demo_run
    labels = dict(con.execute("SELECT counter_check, count(*) FROM published_entries "
                              "WHERE run_id = ? GROUP BY ALL", [run_id]).fetchall())
    assert labels.get("reconciled", 0) > 0, labels
    assert set(labels) <= {"reconciled", "lower bound"}, labels
