"""The rule catalogue: each rule declared once, with its check, complete, and the docs' table
in sync."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from benchledger import rules as R
from benchledger.expectations import gate
from benchledger.rules import core
from tests.conftest import REPO
from tests.sweeps import simulator_arm, sweep, toml

SOURCE_SUFFIXES = (".py", ".sql")


def tracked_sources() -> list:
    """The sources git tracks or would track (untracked, not ignored), as they are now."""
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [REPO / n for n in dict.fromkeys(names)
            if n.endswith(SOURCE_SUFFIXES) and not n.startswith(("tests/", "docs/"))
            and (REPO / n).is_file()]


@pytest.mark.parametrize("rule", R.CATALOGUE, ids=lambda rule: rule.name)
def test_a_rule_name_is_declared_once(rule):
    """Outside tests and docs, a rule's name is written only in its suite's module of the
    catalogue; all other code refers to it through the catalogue's constants."""
    found = sources_quoting(rule.name)
    assert len(found) == 1 and found[0][1] == 1, found
    assert found[0][0].startswith("benchledger/rules/"), found


def sources_quoting(text: str) -> list[tuple[str, int]]:
    quoted = re.compile(rf"""["']{re.escape(text)}["']""")
    found = [(path.relative_to(REPO).as_posix(), len(quoted.findall(path.read_text())))
             for path in tracked_sources()]
    return [(p, n) for p, n in found if n]


VERDICT_WORDS = [core.PLAUSIBLE, core.AGREE, core.DISAGREE, core.WITHIN_TOLERANCE,
                 core.ABOVE_TOLERANCE, core.NO_CALIBRATION, core.NO_TOLERANCE, core.STATED,
                 core.BALANCED, core.UNBALANCED, core.SERVER_LOG_APART, core.ENERGY_READ,
                 core.ENERGY_UNREADABLE]


@pytest.mark.parametrize("word", VERDICT_WORDS)
def test_a_verdict_word_is_stated_once(word):
    """The words the check columns hold are written once, in rules.core: the value set
    that passes and the builder that writes the word both use the constant."""
    assert sources_quoting(word) == [("benchledger/rules/core.py", 1)]


@pytest.mark.parametrize("rule", R.CATALOGUE, ids=lambda rule: rule.name)
def test_a_rule_is_fully_declared(rule):
    assert re.fullmatch(r"[a-z][a-z0-9_]+", rule.name)
    assert all(re.fullmatch(r"T([1-9]|1[0-9])", trap) for trap in rule.traps)
    assert rule.effect in {R.BLOCK_ENTRIES, R.EXCLUDE_RESTART, R.REFUSE_COMPARISON,
                           R.LIMIT_VERDICT, R.BLOCK_TIMING_ENTRIES, R.BLOCK_STREAM_ENTRIES,
                           R.BLOCK_ENERGY_ENTRIES}
    assert rule.summary
    assert (rule.threshold is None) == (rule.threshold_source is None)
    if isinstance(rule.check, R.GxCheck):
        import great_expectations as gx

        assert hasattr(gx.expectations, rule.check.expectation), rule.check.expectation
        assert callable(rule.check.observe)  # the rule says what it expected and found
        assert all(map(callable, rule.check.columns.values()))
    else:
        assert (REPO / "warehouse" / "queries" / f"{rule.check.query}.sql").is_file()


def test_the_gate_runs_exactly_the_catalogue():
    gx_suites = {rule.suite for rule in R.CATALOGUE if isinstance(rule.check, R.GxCheck)}
    assert gx_suites == {*gate.SUITES, "entries", "comparisons"} == set(R.SUITE_FRAMES)
    suites = {rule.suite for rule in R.CATALOGUE}
    assert suites == {*gx_suites, "coverage"}


@pytest.mark.parametrize("suite", sorted(R.SUITE_FRAMES))
def test_every_column_a_check_reads_is_declared_once(suite):
    """A GX check reads its suite's inputs, its suite's own columns or the columns it builds
    itself; a column is built in one place only, so no rule reads another rule's column."""
    frame = R.SUITE_FRAMES[suite]
    checks = [rule.check for rule in R.rules_of_suite(suite)]
    built = [name for check in checks for name in check.columns]
    declared = [*frame.inputs, *frame.columns, *built]
    assert len(declared) == len(set(declared)), declared
    for check in checks:
        assert set(check.reads) <= {*frame.inputs, *frame.columns, *check.columns}, check


def test_only_the_clock_rule_leaves_a_restart_out():
    assert R.names_with_effect(R.EXCLUDE_RESTART) == {R.CLOCK_UNDER_LOAD.name}


def test_ruleset_version_names_the_declarations():
    assert re.fullmatch(r"rules-[0-9a-f]{12}", R.RULESET_VERSION)
    assert R.ruleset_version(R.CATALOGUE) == R.RULESET_VERSION
    changed = dataclasses.replace(R.CATALOGUE[0], threshold="x", threshold_source="y")
    assert R.ruleset_version((changed, *R.CATALOGUE[1:])) != R.RULESET_VERSION
    # A check's code (its column builders, its found writer) is not its declaration.
    check = R.CATALOGUE[0].check
    assert isinstance(check, R.GxCheck)
    recoded = dataclasses.replace(R.CATALOGUE[0], check=dataclasses.replace(
        check, columns={}, observe=lambda *_: ("", "")))
    assert R.ruleset_version((recoded, *R.CATALOGUE[1:])) == R.RULESET_VERSION


def test_the_ruleset_version_is_pinned():
    """Every validations row records the ruleset that judged it, so a changed declaration
    (a name, summary, threshold, expectation or argument) is a new ruleset: update this
    value only on purpose, with the change that makes it. Reorganising the code of the
    checks changes no declaration and must leave it as it is."""
    # issue #26: arrivals_on_schedule; rates of reasoning models name their numerator
    # issue #39 item 3: energy_readable (block_energy_entries)
    # issue #41: ab_beyond_drift (T19), a finding held to the drift of the restart means
    # issue #42: outputs_equivalent, a finding held to the same answers
    assert R.RULESET_VERSION == "rules-000bf74954ef"


def test_importing_the_catalogue_is_cheap():
    """DAG files import the sweep, which imports the catalogue's thresholds."""
    code = ("import sys, benchledger.rules; "
            "print(sorted({'pandas', 'numpy', 'great_expectations', 'duckdb', 'scipy', "
            "'pyarrow'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.strip() == "[]"


def test_python_m_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "benchledger.rules", "--markdown"],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out == R.markdown_table()


def test_the_protocol_docs_carry_the_generated_rule_table():
    text = (REPO / "docs" / "protocol.md").read_text()
    match = re.search(r"<!-- BEGIN rule table[^\n]*-->\n(.*?)<!-- END rule table -->", text,
                      re.S)
    assert match, "docs/protocol.md lacks the rule table markers"
    assert match.group(1) == R.markdown_table(), (
        "docs/protocol.md's rule table is stale: regenerate it with "
        "`python -m benchledger.rules --markdown`")


def test_the_sweep_refuses_by_rule_name():
    from benchledger.sweep.spec import MIN_REQUESTS_SPECULATIVE, SweepError, parse_sweep

    assert MIN_REQUESTS_SPECULATIVE == R.MIN_REQUESTS_SPECULATIVE
    text = toml(sweep("s", [simulator_arm("a", model="m")], defaults={"requests": 3}))
    with pytest.raises(SweepError, match=R.N_AT_LEAST_MIN.name):
        parse_sweep(text)
