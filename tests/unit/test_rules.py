"""The rule catalogue: each rule declared once, complete, and the docs' table in sync."""

from __future__ import annotations

import re
import subprocess

import pytest

from benchledger import rules as R
from benchledger.expectations import gate
from tests.conftest import REPO

SOURCE_SUFFIXES = (".py", ".sql")


def tracked_sources() -> list:
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    return [REPO / n for n in names
            if n.endswith(SOURCE_SUFFIXES) and not n.startswith(("tests/", "docs/"))]


@pytest.mark.parametrize("rule", R.CATALOGUE, ids=lambda rule: rule.name)
def test_a_rule_name_is_declared_once(rule):
    """Outside tests and docs, a rule's name is written only in the catalogue; all other
    code refers to it through the catalogue's constants."""
    quoted = re.compile(rf"""["']{re.escape(rule.name)}["']""")
    found = [(path.relative_to(REPO).as_posix(), len(quoted.findall(path.read_text())))
             for path in tracked_sources()]
    assert [(p, n) for p, n in found if n] == [("benchledger/rules.py", 1)]


@pytest.mark.parametrize("rule", R.CATALOGUE, ids=lambda rule: rule.name)
def test_a_rule_is_fully_declared(rule):
    assert re.fullmatch(r"[a-z][a-z0-9_]+", rule.name)
    assert all(re.fullmatch(r"T([1-9]|1[0-6])", trap) for trap in rule.traps)
    assert rule.effect in {R.BLOCK_ENTRIES, R.EXCLUDE_RESTART, R.REFUSE_COMPARISON,
                           R.LIMIT_VERDICT}
    assert rule.summary
    assert (rule.threshold is None) == (rule.threshold_source is None)
    if isinstance(rule.check, R.GxCheck):
        import great_expectations as gx

        assert hasattr(gx.expectations, rule.check.expectation), rule.check.expectation
        assert rule.name in gate._OBSERVE  # the gate can say what it expected and found
    else:
        assert (REPO / "warehouse" / "queries" / f"{rule.check.query}.sql").is_file()


def test_the_gate_runs_exactly_the_catalogue():
    assert set(gate._OBSERVE) == {rule.name for rule in R.CATALOGUE
                                  if isinstance(rule.check, R.GxCheck)}
    suites = {rule.suite for rule in R.CATALOGUE}
    assert suites == {*gate.SUITES, "entries", "comparisons", "coverage"}


def test_only_the_clock_rule_leaves_a_restart_out():
    assert R.names_with_effect(R.EXCLUDE_RESTART) == {R.CLOCK_UNDER_LOAD.name}


def test_ruleset_version_names_the_declarations():
    assert re.fullmatch(r"rules-[0-9a-f]{12}", R.RULESET_VERSION)
    before = R._ruleset_version()
    changed = R.CATALOGUE[0].__class__(**{**R.CATALOGUE[0].__dict__, "threshold": "x",
                                          "threshold_source": "y"})
    original = R.CATALOGUE
    try:
        R.CATALOGUE = (changed, *original[1:])
        assert R._ruleset_version() != before
    finally:
        R.CATALOGUE = original
    assert R._ruleset_version() == before


def test_the_protocol_docs_carry_the_generated_rule_table():
    text = (REPO / "docs" / "protocol.md").read_text()
    match = re.search(r"<!-- BEGIN rule table[^\n]*-->\n(.*?)<!-- END rule table -->", text,
                      re.S)
    assert match, "docs/protocol.md lacks the rule table markers"
    assert match.group(1) == R.markdown_table(), (
        "docs/protocol.md's rule table is stale: regenerate it with "
        "`python -m benchledger.rules --markdown`")


def test_the_sweep_refuses_by_rule_name():
    from benchledger.sweep import MIN_REQUESTS_SPECULATIVE, SweepError, parse_sweep

    assert MIN_REQUESTS_SPECULATIVE == R.MIN_REQUESTS_SPECULATIVE
    text = """
[sweep]
name = "s"
[defaults]
requests = 3
[[arms]]
name = "a"
server = "simulator"
model = "m"
[[workloads]]
name = "code"
"""
    with pytest.raises(SweepError, match=R.N_AT_LEAST_MIN.name):
        parse_sweep(text)
