"""Issue #41, item 5, must show: sequential verdicts on the simulator, through Airflow.

`restarts = 2, max_restarts = 10`: a large effect (a decode step of 10 ms against 20 ms,
with an A/A control of the slow arm) is decided after a few blocks and the remaining
blocks are skipped, recorded as such; two arms that differ only in a setting that does
not change their speed (a draft acceptance rate, on arms that do not speculate) are never
decided and run to their maximum, 10 restarts each, without a finding. (A first version
used `batch_penalty`: at concurrency 1 it still slowed the flagged arm by a little, and
the looks' |t| grew block by block, as they should for a real difference.) Every interim look
is a row of `interim_looks`."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import NO_CLOCK, defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration


def _arm(name: str, **simulator: object) -> dict:
    return simulator_arm(name, {"step_ms": 20.0, **simulator}, **NO_CLOCK)


def _defaults(max_tokens: int) -> dict:
    # the protocol's floor of 5 requests per window, short answers: a restart here is mostly
    # the server's start and stop, and the A/A runs twenty of them
    return defaults(requests=5, max_tokens=max_tokens, clock=None, concurrency=[1],
                    restarts=2)


def large_effect() -> dict:
    return sweep("it-seq-large", [_arm("slow"), _arm("slow-twin"), _arm("fast", step_ms=10.0)],
                 sweep={"retries": 0, "max_restarts": 10}, defaults=_defaults(16),
                 comparisons=[{"a": "slow", "b": "fast", "metric": "decode_rate",
                               "control": ["slow", "slow-twin"]}])


def same_speed() -> dict:
    return sweep("it-seq-same", [_arm("base", step_ms=10.0),
                                  _arm("flagged", step_ms=10.0, acceptance_code=0.5)],
                 sweep={"retries": 0, "max_restarts": 10}, defaults=_defaults(8),
                 comparisons=[{"a": "base", "b": "flagged", "metric": "decode_rate"}])


@pytest.fixture(scope="module", params=["large", "same"])
def run(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp(request.param)
    text = large_effect() if request.param == "large" else same_speed()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_id, state, con = run_sweep_text(workdir, text)
    yield request.param, run_id, state, con
    con.close()


def _restarts_per_arm(con, run_id) -> dict[str, int]:
    return dict(con.execute("SELECT arm, count(*) FROM restarts WHERE run_id = ? GROUP BY arm",
                            [run_id]).fetchall())


def test_a_large_effect_stops_after_few_blocks_and_an_aa_runs_to_the_maximum(run):
    kind, run_id, state, con = run
    assert state == "success"
    looks = con.execute("SELECT blocks, decision, decided, crossed, statistic, boundary "
                        "FROM interim_looks WHERE run_id = ? ORDER BY blocks",
                        [run_id]).fetchall()
    per_arm = _restarts_per_arm(con, run_id)
    if kind == "large":
        stopped = [blocks for blocks, decision, *_ in looks if decision == "stop"]
        assert len(stopped) == 1 and stopped[0] < 10, looks
        assert set(per_arm.values()) == {stopped[0]}, per_arm  # the rest was skipped
        assert looks[-1][2] and looks[-1][3] and abs(looks[-1][4]) >= looks[-1][5]
    else:
        # looks after blocks 2 to 9 (the maximum is judged when the run is derived)
        assert [(b, d) for b, d, *_ in looks] == [(n, "continue") for n in range(2, 10)]
        assert not any(decided for _, _, decided, *_ in looks)
        assert set(per_arm.values()) == {10}, per_arm


def test_the_verdict_is_the_sequential_designs(run):
    kind, run_id, _, con = run
    verdict, reason, decided_at, looked, maximum = con.execute(
        "SELECT verdict, reason, decided_at_blocks, sequential_looks, max_restarts "
        "FROM comparisons WHERE run_id = ? AND role = 'ab'", [run_id]).fetchone()
    if kind == "large":
        assert verdict == "improvement", reason
        assert maximum == 10 and decided_at is not None and decided_at < 10
        assert f"decided after {decided_at} blocks" in reason, reason
    else:
        assert verdict == "no finding", reason
        assert decided_at is None and looked == 9 and maximum == 10
        assert "no look of the sequential design" in reason, reason


def test_skipped_blocks_are_no_missing_windows(run):
    """The gate plans the blocks the run ran: windows_present passes, nothing is blocked
    for restarts the sweep chose not to run."""
    _, run_id, _, con = run
    checked = con.execute("SELECT bool_and(success), count(*) FROM validations "
                          "WHERE run_id = ? AND expectation = 'windows_present'",
                          [run_id]).fetchone()
    assert checked[0] is True and checked[1] > 0, checked
