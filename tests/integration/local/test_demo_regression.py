"""The demo publishes what it published before the code was reorganised (issue #20).

tests/fixtures/demo_snapshot.json.gz was written from a run of the demo at commit e67239b,
before the split of client, gate, derivation, raw layout and CLI (`python -m
tests.demo_snapshot WAREHOUSE DATA_DIR --write tests/fixtures/demo_snapshot.json.gz`).
Issue #21 added to each entry, from a later demo run, what the ruler's two rules say when
every window's client lag is within its bound: their results in the explain texts, n_burst
(0) and max_burst_fraction (0.1), and the client lag and CPU share (compared by presence).
Issue #22 added, from another demo run, the results of counters_readable and
streams_not_buffered (all passing) in the explain texts and usage_plausible's new expected
text (output_tokens >= chunks). Issue #26 added, from another demo run, the prefix cache's
two entries per arm and workload (cached_token_share, prefix_cache_hit_rate: 12 with their
explain texts), and in every explain text the results of arrivals_on_schedule (nothing due:
the demo is a closed loop) and rate_numerator_labelled's two new numerators. Issue #39
added to every explain text the results of energy_readable (all passing: the simulator's
dcgm pages can be true; its joules normalised like every number) and of
percentile_n_sufficient, which blocks the demo's 18 p99 entries (45 requests a cell, 100
needed); those entries' publishable and blocked_by and the run's entry_blocks came from
that run (spliced: every other line checked unchanged). Issue #43 changed how explain
shows the results, not the results: a check that judged nothing (rule not applicable, a
clock unchecked, a counter not reconciled) is `[not run]`, and the count line says passed,
not run and failed; the stored texts were rewritten by that classification alone
(benchledger.publishing.explain.not_run) and checked equal to a fresh demo run's; and
explain now says a latency as a person reads it, after the entry's fields ("read as: 7.5 ms
[6.6, 8.3]"): that line was added to the 72 stored texts of entries in seconds (with its
interval where the entry has one) and checked equal to a fresh demo run's.
Everything else is still that first run's.
This test runs the demo the way `make demo` does (`benchledger run` on the bundled sweep,
same seeds) and compares: every entry's labels, counts, publishability and blocks, every
verdict (an A/A control's as its rule judges the interval found: that interval is timing),
and the whole `benchledger explain` text of every entry must be the same; values
that come from the machine's timing must be within their usual spread
(tests/demo_snapshot.py says which and how).

The same run (one demo run per session, shared with test_report_browser: the demo takes
minutes) also shows the rule
catalogue at work on the demo sweep: every rule of benchledger/rules/ produced results, no
result names a rule outside it, results are structured (expected/found/ruleset_version),
blocked entries come from entry_blocks and verdicts from the comparison rules.
"""

from __future__ import annotations

import duckdb
import pytest

from benchledger.publishing.report import format_blocked
from benchledger.rules import BY_NAME, CATALOGUE, RULESET_VERSION
from tests.demo_snapshot import differences, read_fixture, snapshot

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo(bundled_demo):
    """The bundled demo sweep run as `make demo` runs it (tests/conftest.py, once per
    session)."""
    return bundled_demo


@pytest.fixture(scope="module")
def demo_run(demo):
    """The demo's run id and a read-only connection to its warehouse."""
    assert demo["returncode"] == 0, demo["output"]
    con = duckdb.connect(str(demo["warehouse"]), read_only=True)
    run_id, = con.execute("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1"
                          ).fetchone()
    yield run_id, con
    con.close()


def test_the_demo_publishes_what_it_published_before(demo):
    assert demo["returncode"] == 0, demo["output"]
    found = snapshot(demo["warehouse"], demo["data"].resolve())
    expected = read_fixture()
    assert len(found["entries"]) == len(expected["entries"]) == 210
    # 6 warm prefill rates and (issue #39) 18 p99s of 45 requests are blocked
    assert sum(e["publishable"] for e in found["entries"].values()) == 186
    assert differences(expected, found) == []


def test_every_catalogue_rule_produced_results_and_nothing_else(demo_run):
    run_id, con = demo_run
    counts = dict(con.execute("SELECT expectation, count(*) FROM validations "
                              "WHERE run_id = ? GROUP BY 1", [run_id]).fetchall())
    assert set(counts) == set(BY_NAME), {
        "missing": sorted(set(BY_NAME) - set(counts)),
        "outside the catalogue": sorted(set(counts) - set(BY_NAME))}
    suites = dict(con.execute("SELECT DISTINCT expectation, suite FROM validations "
                              "WHERE run_id = ?", [run_id]).fetchall())
    assert suites == {rule.name: rule.suite for rule in CATALOGUE}


def test_results_are_structured_and_versioned(demo_run):
    run_id, con = demo_run
    rows = con.execute("SELECT expected, found, observed, ruleset_version FROM validations "
                       "WHERE run_id = ?", [run_id]).fetchall()
    assert rows
    for expected, found, observed, version in rows:
        assert expected and found is not None and version == RULESET_VERSION
        assert observed == f"expected {expected}, found {found}"


def test_blocked_entries_come_from_entry_blocks(demo_run):
    run_id, con = demo_run
    blocked = con.execute("SELECT entry_id, blocked_by FROM current_entries "
                          "WHERE run_id = ? AND NOT publishable", [run_id]).fetchall()
    # Warm-prompt prefill rates measure the prefix cache: the demo's prompts are warm. A p99
    # needs 100 requests: a demo cell has 45.
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

    summary = [line.strip() for line in format_blocked(blocks(con, run_id)).splitlines()
               if not line.strip().startswith("e.g. ")]
    assert [line.split(" (")[0] for line in summary] == [
        "percentile_n_sufficient: 18 entries", "prefill_rate_cold_prompts: 6 entries"]


def test_the_verdicts_keep_their_direction_and_say_what_they_could_detect(demo_run):
    """Issue #41: the demo's restarts now run in blocks; spec-on is still faster on code,
    the A/A control still finds nothing, and every comparison carries its detectable
    effect (a no finding's reason says it)."""
    run_id, con = demo_run
    rows = con.execute(
        "SELECT role, workload, verdict, reason, detectable_relative, restart_order "
        "FROM comparisons WHERE run_id = ?", [run_id]).fetchall()
    verdicts = {(role, workload): verdict for role, workload, verdict, *_ in rows}
    assert verdicts[("ab", "code")] == "improvement"
    assert {v for (role, _), v in verdicts.items() if role == "control"} == {"no finding"}
    for role, workload, verdict, reason, detectable, order in rows:
        assert order == "blocked" and detectable is not None and detectable > 0
        if verdict == "no finding" and role == "ab":
            assert "could have detected >=" in reason, (workload, reason)
    blocks = con.execute("SELECT block, count(DISTINCT arm) FROM restarts WHERE run_id = ? "
                         "GROUP BY block ORDER BY block", [run_id]).fetchall()
    assert blocks == [(0, 3), (1, 3), (2, 3)]  # restart k of each of the three arms


def test_comparison_rules_decide_the_verdicts(demo_run):
    run_id, con = demo_run
    rows = con.execute(
        "SELECT c.comparison_id, c.workload, c.verdict, c.ci95_low, c.ci95_high, "
        "       bool_and(v.success) AS rules_passed, count(v.expectation) AS rules "
        "FROM comparisons c JOIN validations v ON v.subject = c.comparison_id "
        "WHERE c.run_id = ? AND c.role = 'ab' AND v.suite = 'comparisons' GROUP BY ALL",
        [run_id]).fetchall()
    assert {workload for _, workload, *_ in rows} == {"code", "prose"}
    for _, workload, verdict, low, high, rules_passed, rules in rows:
        # ab_arms_differ, ab_restarts_replicated, ab_beyond_control, _drift, outputs_equivalent
        assert rules == 5
        # A claim only where every comparison rule passed and the interval excludes 0.
        claim = rules_passed and (low > 0 or high < 0)
        assert (verdict in ("improvement", "regression")) == claim, (workload, verdict)
    # Speculation's ~2.8 tokens per step on code is far beyond instance noise.
    verdicts = {workload: verdict for _, workload, verdict, *_ in rows}
    assert verdicts["code"] == "improvement", rows


def test_speculation_gives_the_answers_it_gives_without(demo_run, demo):
    """Issue #42: the simulator's speculation is lossless by default, so at temperature 0
    spec-on answers every prompt as spec-off does (and as its twin does), the rule
    outputs_equivalent passes, and the report and comparisons.json say so."""
    import json

    run_id, con = demo_run
    rows = con.execute(
        "SELECT comparison_id, role, workload, equivalence_prompts, equivalence_identical, "
        "control_equivalence_prompts, control_equivalence_identical, equivalence_divergent "
        "FROM comparisons WHERE run_id = ?", [run_id]).fetchall()
    assert {(role, workload) for _, role, workload, *_ in rows} == {
        (role, workload) for role in ("ab", "control") for workload in ("code", "prose")}
    for _, role, workload, prompts, same, control_prompts, control_same, divergent in rows:
        assert prompts and same == prompts and json.loads(divergent) == [], (role, workload)
        if role == "ab":
            assert control_prompts and control_same == control_prompts, workload
    checked = con.execute(
        "SELECT bool_and(success), count(*) FROM validations WHERE run_id = ? "
        "AND expectation = 'outputs_equivalent'", [run_id]).fetchone()
    assert checked == (True, sum(role == "ab" for _, role, *_ in rows))  # 2 metrics x 2
    published = next((demo["data"] / "published").iterdir())
    exported = json.loads((published / "comparisons.json").read_text())
    assert all(c["equivalence_identical"] == c["equivalence_prompts"] > 0 for c in exported)
    html = (published / "report.html").read_text()
    code = next(p for _, r, w, p, *_ in rows if (r, w) == ("ab", "code"))
    assert f"answers: the same on {code} of {code} prompts (A/A control: " in html


def test_published_entries_say_their_counters_were_checked(demo_run):
    """The simulator serves vLLM's counters: every published entry rests on windows they
    reconciled (only as a lower bound where requests failed or stayed unresolved)."""
    run_id, con = demo_run
    labels = dict(con.execute("SELECT counter_check, count(*) FROM published_entries "
                              "WHERE run_id = ? GROUP BY ALL", [run_id]).fetchall())
    assert labels.get("reconciled", 0) > 0, labels
    assert set(labels) <= {"reconciled", "lower bound"}, labels
