"""Issue #28: the history of a recurring sweep and its regression gate, on four real runs
of one sweep through Airflow (the simulator as the server).

Runs 1 and 2 are alike. Run 3 is the same sweep file and the same configuration on a
slower machine: the simulator's decode step comes from an environment variable that is not
part of the recorded configuration (as a throttled GPU is not), 40 ms -> 80 ms for the arms
`base` and `base-twin` (the sweep's A/A control); `other` keeps its fixed step. Run 4 changes
a server setting of `base` and `base-twin` (a flag that does not change their speed at
concurrency 1) and is fast again: its line must be broken and labelled, not read as an
improvement over run 3.

The gate and the assertions on flags follow the decode rate and the throughput, the
quantities the slowdown is about: the simulator's first token comes in about 15 ms, and on
a shared 2-core machine its run-to-run drift can exceed what one A/A pair shows, which the
gate would rightly report (the sweep's gate names its metrics, as a user's would). The
machine's load also changes between runs (the suite's other worker starts another test):
identical runs then differ by a percent or so, surely but uninterestingly, as two nights on
a real cluster do. The sweep names its smallest change of interest (10%), as a nightly
sweep would; run 3's slowdown is about 100%.
"""

from __future__ import annotations

import contextlib
import io
import shlex
import sys

import pytest

from benchledger.cli import main
from benchledger.publishing.history import history as history_frame
from benchledger.warehouse.history import (
    CONFIG_CHANGED,
    FIRST_RUN,
    FLAGGED,
    REGRESSION,
)
from tests.conftest import run_sweep_text
from tests.sweeps import NO_CLOCK, command_arm, defaults, sweep

pytestmark = pytest.mark.integration

SWEEP_NAME = "it-history"
GATED = ["decode_rate", "throughput"]
STEP_ENV = "HISTORY_TEST_STEP_MS"  # not a recorded prefix (lifecycle.ENV_PREFIXES)


def _command(step: str, *extra: str) -> str:
    """A simulator started through a shell, so its decode step can come from the
    environment (`step` is "$VAR" or a number); {port} is the harness's."""
    inner = " ".join([shlex.quote(sys.executable), "-m", "benchledger.simulator",
                      "--port", "{port}", "--step-ms", step, "--speed-spread", "0",
                      "--prefill-tok-s", "4000", *extra])
    return shlex.join(["sh", "-c", "exec " + inner])


def _arm(name: str, command: str) -> dict:
    return command_arm(name, command, model="sim-model", **NO_CLOCK)


def history_sweep(*extra: str) -> dict:
    """The sweep; `extra` flags go to base and base-twin (a changed server setting)."""
    measured = _command(f'"${STEP_ENV}"', *extra)
    return sweep(SWEEP_NAME,
                 [_arm("base", measured), _arm("base-twin", measured),
                  # two restarts: `other` is only ever asserted unflagged, which a wider
                  # interval makes no likelier to fail. Its step is base's, not shorter:
                  # a loaded machine's per-token delay is a larger share of a shorter
                  # step, and in ci44 the suite's first minutes slowed `other` at 16 ms by
                  # 14% in run 1 (52.8 against 60.2 tok/s in run 2: an "improvement" of
                  # identical runs), where base and base-twin at 20 ms moved 5%
                  {**_arm("other", _command("40")), "restarts": 2}],
                 sweep={"retries": 0, "regression_gate": ["decode_rate", "throughput"],
                        "regression_min_change": 0.1},
                 defaults=defaults(requests=5, max_tokens=24, clock=None, concurrency=[1],
                                   restarts=3),
                 comparisons=[{"a": "base", "b": "other", "metric": "decode_rate",
                               "control": ["base", "base-twin"]}])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Four runs into one warehouse: (run_id, state) each, and the warehouse path."""
    workdir = tmp_path_factory.mktemp("history")
    # Three restarts per arm, not two: the gate's interval over two restarts has one degree
    # of freedom (t = 12.7), and one restart slowed by a loaded machine (43.5 and 48.6 tok/s
    # for one arm of run 2 in CI) made run 3's 65% drop "no change" for the A/A twin.
    # Steps of 40 ms over 12 tokens, not 3 or 10 ms over 48, nor 20 ms over 24: a busy
    # machine (the suite's other workers) delays each token by about the same few ms,
    # which at 3 ms made two identical runs differ beyond their A/A control (a false
    # "regression" of run 2 in CI), at 10 ms slowed the unchanged arm `other` by more than
    # the sweep's 10% in one run on a loaded machine, and at 20 ms still made run 1, which
    # measured while two other workers started their Airflow deployments, 8-12% slower
    # than run 2 (`other`'s throughput an "improvement" in run 2, ci56: 41.6 then 46.6
    # tok/s against 50 ideal). At 40 ms that delay is half as large a share of the step,
    # the window takes as long (half the tokens, each twice as long) for half the events'
    # CPU, and run 3's 80 ms stays a clear regression (its decode rate halves: five times
    # the 10% the sweep names). Five requests of 24 tokens (with the warm-up, 5.8 s a
    # window), not eight of 12: ci59 still read run 2's throughput of `base` as a 10%
    # "improvement" over run 1 (run 1 took 76 s there, 57 s on an idle machine): what a
    # loaded machine adds per request (its first token, the client's turn between
    # requests) is half as large a share of a 0.96 s answer as of a 0.48 s one. Four
    # busy loops on the 2 cores, or another module starting its PostgreSQL deployment,
    # moved nothing here (24.7 tok/s in every run): the load that did is rarer.
    plan = [("40", history_sweep()), ("40", history_sweep()), ("80", history_sweep()),
            ("40", history_sweep("--max-num-seqs", "32"))]
    done = []
    with pytest.MonkeyPatch.context() as patch:
        for step, text in plan:
            patch.setenv(STEP_ENV, step)
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                run_id, state, con = run_sweep_text(workdir, text)
            con.close()
            done.append((run_id, state))
    return {"runs": done, "warehouse": workdir / "wh.duckdb"}


@pytest.fixture(scope="module")
def history(runs):
    import duckdb

    with duckdb.connect(str(runs["warehouse"]), read_only=True) as con:
        frame = history_frame(con, SWEEP_NAME, GATED)  # the sweep's own smallest change
        checks = con.execute(
            "SELECT run_id, arm, metric, statistic, verdict FROM regression_checks"
        ).df()
    return frame, checks


def test_history_flags_only_the_slower_run(runs, history):
    frame, _ = history
    ids = [run_id for run_id, _ in runs["runs"]]
    assert list(dict.fromkeys(frame["run_id"])) == ids  # every run, oldest first
    flagged = frame[frame["change"].isin(FLAGGED)]
    assert set(flagged["run_id"]) == {ids[2]}, flagged[["run_id", "arm", "metric", "change"]]
    decode = flagged[flagged["metric"] == "decode_rate"]
    # both arms of the slowed configuration regressed, beyond the A/A control's difference
    assert set(decode["arm"]) == {"base", "base-twin"}
    assert set(decode["change"]) == {REGRESSION}
    assert (decode["difference"].abs() > decode["control_difference"]).all()
    assert (decode["ci95_high"] < 0).all()
    # the arm whose speed did not change is not flagged in run 3
    other = frame[(frame["arm"] == "other") & (frame["run_id"] == ids[2])]
    assert not other["change"].isin(FLAGGED).any()
    first = frame[frame["run_id"] == ids[0]]
    assert set(first["change"]) == {FIRST_RUN}


def test_a_changed_server_setting_breaks_the_line_and_says_so(runs, history):
    frame, _ = history
    ids = [run_id for run_id, _ in runs["runs"]]
    fourth = frame[frame["run_id"] == ids[3]]
    changed = fourth[fourth["arm"].isin(["base", "base-twin"])]
    assert set(changed["change"]) == {CONFIG_CHANGED}  # not "improvement" over run 3
    assert changed["config_change"].str.startswith("effective config ").all()
    assert (changed["segment"] == 1).all() and changed["previous_run_id"].isna().all()
    unchanged = fourth[fourth["arm"] == "other"]
    assert (unchanged["segment"] == 0).all() and unchanged["previous_run_id"].notna().all()


def test_the_regression_gate_fails_the_slower_run_only(runs, history):
    _, checks = history
    states = [state for _, state in runs["runs"]]
    assert states == ["success", "success", "failed", "success"]
    ids = [run_id for run_id, _ in runs["runs"]]
    assert set(checks["run_id"]) == set(ids)  # every run's gate left its rows
    assert set(checks["metric"]) == set(GATED)
    regressed = checks[checks["verdict"] == REGRESSION]
    assert set(regressed["run_id"]) == {ids[2]}
    assert {"base", "base-twin"} <= set(regressed["arm"])


def test_history_command_prints_the_lines_and_exits_by_the_newest_run(runs, capsys):
    warehouse = str(runs["warehouse"])
    assert main(["history", SWEEP_NAME, "--warehouse", warehouse,
                 "--metric", "decode_rate"]) == 0  # the newest run (4) did not regress
    out = capsys.readouterr().out
    assert "-- line broken: effective config" in out
    assert out.count(REGRESSION) >= 2 and "ttft" not in out
    assert main(["history", SWEEP_NAME, "--warehouse", warehouse]) in (0, 1)
    assert "ttft p90" in capsys.readouterr().out  # without --metric: every headline metric
    assert main(["history", "no-such-sweep", "--warehouse", warehouse]) == 2
    assert "no run of sweep 'no-such-sweep'" in capsys.readouterr().err


def _history_section(page: str) -> str:
    start = page.index("<section id='history'>")
    return page[start:page.index("</section>", start)]


def test_the_report_shows_the_history_up_to_its_run(runs, tmp_path):
    warehouse = str(runs["warehouse"])
    ids = [run_id for run_id, _ in runs["runs"]]
    pages = {}
    for index in (0, 2):
        out = tmp_path / f"run{index + 1}"
        assert main(["publish", "--warehouse", warehouse, "--out", str(out),
                     "--run", ids[index]]) == 0
        pages[index] = out
    first = _history_section((pages[0] / "report.html").read_text())
    assert "The first run of this sweep: no history yet." in first
    third = _history_section((pages[2] / "report.html").read_text())
    assert f"3 runs of sweep {SWEEP_NAME}" in third  # run 4 came later: not in run 3's
    assert ids[3] not in third and "<svg" in third
    assert f"<td>{REGRESSION}</td>" in third
    manifest = (pages[2] / "MANIFEST.sha256").read_text()
    assert "charts/history.svg" in manifest and (pages[2] / "charts/history.svg").exists()
    assert "charts/history.svg" not in (pages[0] / "MANIFEST.sha256").read_text()
