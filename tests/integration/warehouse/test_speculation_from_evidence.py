"""Issue #23, item 2, through the real pipeline: speculation from evidence, not the sweep's
word. The arm says `speculative = false`, but its simulator speculates ([arms.simulator]
speculative = true: several tokens per event, spec-decode counters that move). With 8
completed requests per window (between the plain floor of 5 and the speculative 15), the
speculative floor applies: n_at_least_min blocks its entries (expected 15, found 8), the
entries say where the speculation came from, and `run`'s terminal names the finding.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from benchledger.publishing.report import run_tables
from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

SWEEP = sweep("it-spec-evidence",
              [simulator_arm("quiet", {"speculative": True, "step_ms": 2.0, "speed_spread": 0.0},
                             speculative=False)],
              sweep={"retries": 0}, defaults=defaults(requests=8, restarts=1, max_tokens=32))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("spec-evidence")
    terminal = io.StringIO()
    with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(terminal):
        run_id, state, con = run_sweep_text(workdir, SWEEP)
    yield {"run_id": run_id, "state": state, "con": con}
    con.close()


def test_the_declared_non_speculative_arm_gets_the_speculative_floor(run):
    (window_id, completed), = run["con"].execute(
        "SELECT window_id, completed FROM windows WHERE run_id = ?", [run["run_id"]]
    ).fetchall()
    assert completed == 8
    (success, expected, found), = run["con"].execute(
        "SELECT success, expected, found FROM validations "
        "WHERE subject = ? AND expectation = 'n_at_least_min'", [window_id]).fetchall()
    assert not success and found == "8"
    assert expected.startswith("completed >= 15 (speculative, observed: counters")
    assert "the sweep declared it non-speculative, n >= 5" in expected


def test_its_entries_are_blocked_and_say_the_speculation_was_observed(run):
    rows = run["con"].execute(
        "SELECT publishable, blocked_by, speculation_source FROM entries WHERE run_id = ?",
        [run["run_id"]]).fetchall()
    assert rows and {source for _, _, source in rows} == {"observed: counters"}
    assert not any(publishable for publishable, _, _ in rows)
    assert all("n_at_least_min" in blocked for _, blocked, _ in rows)


def test_the_terminal_shows_the_finding(run):
    shown = run_tables(run["con"], run["run_id"])
    assert shown is not None
    findings = shown.split("Findings (what the evidence showed that the sweep did not say):")
    assert len(findings) == 2, shown
    line = findings[1].strip().splitlines()[0]
    assert line.startswith("- arm quiet: not declared speculative, but 1 of its 1 windows "
                           "speculated (observed: counters) (tokens per chunk ")
    assert "acceptance length" in line and "n_at_least_min" in line


def test_report_html_shows_the_finding_first(run):
    from benchledger.publishing.report_html import render_report

    page = render_report(run["con"], run["run_id"])
    title = "<h2>Findings (what the evidence showed that the sweep did not say)</h2>"
    assert page.index(title) < page.index("<h2>Headline entries</h2>")
    item = page[page.index(title):].split("<li>", 1)[1].split("</li>", 1)[0]
    assert item.startswith("arm quiet: not declared speculative, but 1 of its 1 windows "
                           "speculated (observed: counters)")
    assert "n_at_least_min" in item
