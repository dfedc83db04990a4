"""Issue #41, must show: two arms that differ only in a harmless flag, on a machine that gets
25% slower halfway through the sweep's restarts (the simulator's decode step is 20 ms for
the first two launches, 25 ms after: a file counts the launches, as a node's state would
change under a sweep). Interleaved in blocks (the default) the verdict is no finding, and
it says what it could have detected (and, with a smallest effect below that, is
underpowered); run arm by arm, the same sweep is labelled so on its comparison."""

from __future__ import annotations

import contextlib
import io
import shlex
import sys

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import NO_CLOCK, command_arm, defaults, sweep

pytestmark = pytest.mark.integration


def _command(counter: str, *extra: str) -> str:
    """The simulator, its step 20 ms for the sweep's first two launches and 25 ms after."""
    simulator = " ".join([shlex.quote(sys.executable), "-m", "benchledger.simulator",
                          "--port", "{port}", "--step-ms", '"$step"', "--speed-spread", "0",
                          "--prefill-tok-s", "4000", *extra])
    counted = (f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}; "
               f"if [ \"$n\" -ge 2 ]; then step=25; else step=20; fi; exec {simulator}")
    return shlex.join(["sh", "-c", counted])


def drift_sweep(counter: str, order: str) -> dict:
    arms = [command_arm("base", _command(counter), model="sim-model", **NO_CLOCK),
            command_arm("flagged", _command(counter, "--max-num-seqs", "32"),
                        model="sim-model", **NO_CLOCK)]
    return sweep(f"it-drift-{order.replace('_', '-')}", arms,
                 sweep={"retries": 0, "restart_order": order},
                 defaults=defaults(requests=6, max_tokens=24, clock=None, concurrency=[1]),
                 comparisons=[{"a": "base", "b": "flagged", "metric": "decode_rate",
                               "smallest_effect": 0.01}])


@pytest.fixture(scope="module", params=["blocked", "arm_by_arm"])
def run(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp(request.param)
    text = drift_sweep(str(workdir / "launches"), request.param)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_id, state, con = run_sweep_text(workdir, text)
    yield request.param, run_id, state, con
    con.close()


def test_the_restarts_ran_in_the_order_asked_and_the_machine_slowed_halfway(run):
    order, run_id, state, con = run
    assert state == "success"
    rows = con.execute("SELECT arm, restart_index, block, block_position, restart_order "
                       "FROM restarts WHERE run_id = ? ORDER BY started_at",
                       [run_id]).fetchall()
    arms = [arm for arm, *_ in rows]
    assert {r[4] for r in rows} == {order}
    if order == "blocked":  # AB BA or BA AB: block k holds restart k of each arm
        assert [r[2] for r in rows] == [0, 0, 1, 1] and arms[0] == arms[3] != arms[1]
    else:
        assert arms == ["base", "base", "flagged", "flagged"]
    rates = [r[0] for r in con.execute(
        "SELECT m.mean FROM entry_restart_means m JOIN current_entries e USING (entry_id) "
        "JOIN restarts r USING (restart_id) WHERE e.run_id = ? AND e.metric = 'decode_rate' "
        "AND e.scope = 'single_stream' AND e.statistic = 'mean' ORDER BY r.started_at",
        [run_id]).fetchall()]
    assert min(rates[:2]) > 1.1 * max(rates[2:])  # the second half ran slower


def test_the_verdict_follows_the_design(run):
    order, run_id, _, con = run
    verdict, reason, detectable, restart_order = con.execute(
        "SELECT verdict, reason, detectable_relative, restart_order FROM comparisons "
        "WHERE run_id = ? AND role = 'ab'", [run_id]).fetchone()
    assert restart_order == order
    if order == "blocked":
        # two restarts per arm detect little: no finding, underpowered below 1%
        assert verdict == "underpowered", reason
        assert detectable > 0.01 and "could have detected only" in reason
    else:
        assert "arm by arm" in reason and "(T19)" in reason, reason
