"""Issue #4 through the real pipeline: restart-level statistics and A/B verdicts.

One sweep on the simulator: speculation on vs off held to an A/A control (spec-on run
again under another name), an arm whose instances differ a lot in speed, and two
`external` arms that are really the same server (refused as an A/B at run time)."""

from __future__ import annotations

import pytest

from tests.conftest import run_sweep_text, start_simulator, stop_process_group
from tests.sweeps import defaults, external_arm, simulator_arm, sweep

pytestmark = pytest.mark.integration


def replication_sweep(external: str) -> dict:
    spec = {"speculative": True}
    # Three restarts per arm of the A/B: over two, the interval has one degree of freedom
    # (t = 12.7), and one restart slowed by a loaded machine hides even a 2x speedup (a CI
    # run read spec-on 368 and 403 tok/s, spec-off 213 and 208: 'no finding')
    return sweep(
        "it-replication",
        [simulator_arm("spec-on", spec, restarts=3),
         simulator_arm("spec-on-again", spec, restarts=3),
         simulator_arm("spec-off", restarts=3),
         # instances of one config that differ a lot in speed
         simulator_arm("spread", {"speed_spread": 0.3}, restarts=3, requests=8),
         # one server under two spellings of its URL
         external_arm("ext-a", external), external_arm("ext-b", f"{external}/")],
        # Windows here last well under a second: sample often enough that each one has a
        # clock reading under load on a busy machine (else its restart is excluded, unchecked)
        defaults=defaults(max_tokens=16, clock_interval_s=0.1),
        comparisons=[{"a": "spec-off", "b": "spec-on", "metric": "decode_rate",
                      "control": ["spec-on", "spec-on-again"]},
                     {"a": "ext-a", "b": "ext-b", "metric": "decode_rate"}])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    proc, base = start_simulator("--seed", "11")
    try:
        run_id, state, con = run_sweep_text(tmp_path_factory.mktemp("replication"),
                                            replication_sweep(base))
    finally:
        stop_process_group(proc)
    yield run_id, state, con
    con.close()


def verdict(con, run_id, role, a, b):
    return con.execute("SELECT verdict, reason, difference, ci95_low, ci95_high FROM "
                       "comparisons WHERE run_id = ? AND role = ? AND a = ? AND b = ?",
                       [run_id, role, a, b]).fetchall()[0]


def test_speculation_is_an_improvement_beyond_the_aa_control(run):
    run_id, state, con = run
    assert state == "success"
    aa = verdict(con, run_id, "control", "spec-on", "spec-on-again")
    # an A/A is never a finding; its 95% interval excludes 0 about one
    # run in twenty by design, and then it says 'not decidable' (add restarts)
    assert aa[0] in ("no finding", "not decidable"), aa
    ab = verdict(con, run_id, "ab", "spec-off", "spec-on")
    assert ab[0] == "improvement", ab
    assert 0 < ab[3] < ab[2] < ab[4]  # difference inside an interval that excludes 0


def test_same_server_under_two_names_is_refused_as_an_ab(run):
    run_id, _, con = run
    result = verdict(con, run_id, "ab", "ext-a", "ext-b")
    assert result[0] == "not decidable"
    assert "refused as an A/B" in result[1] and "identical effective configs" in result[1]


def test_instances_that_differ_set_restart_effect_and_widen_the_interval(run):
    run_id, _, con = run
    (entry_id, effect, low, high, r_low, r_high), = con.execute(
        "SELECT entry_id, restart_effect, ci95_low, ci95_high, restart_ci95_low, "
        "restart_ci95_high FROM entries WHERE run_id = ? AND arm = 'spread' "
        "AND metric = 'decode_rate' AND scope = 'single_stream'", [run_id]).fetchall()
    assert effect is True
    assert (r_high - r_low) > 2 * (high - low)
    published = con.execute("SELECT restart_effect, ci95_low, ci95_high, restart_ci95_low, "
                            "restart_ci95_high FROM published_entries WHERE entry_id = ?",
                            [entry_id]).fetchall()
    assert published == [(True, low, high, r_low, r_high)]  # with its flag, both intervals
    (within, between), = con.execute(
        "SELECT cv_within_restarts, cv_between_restarts FROM variance_report "
        "WHERE run_id = ? AND arm = 'spread' AND metric = 'decode_rate'", [run_id]).fetchall()
    assert between > 3 * within  # the variance report points at restarts, not requests
