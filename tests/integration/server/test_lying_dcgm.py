"""Issue #39 item 3 through the real pipeline (`benchledger run`'s execute_sweep: Airflow's
dag.test(), real simulator processes, real DuckDB): GPU pages that lie never become
energy entries.

One sweep, one restart per arm, each arm the simulator with its GPUs read from a
dcgm-exporter page: the simulator's own (`honest`, the control), or a page that lies
(tests/faults/lying_dcgm.py, served from this process): negative power without a counter,
a counter going backwards with negative power, a counter frozen under load, a counter
jumping 10^15 mJ per scrape, a GPU listed when the deployment was ready and absent from
every window's page. Before the change each lie was published as an energy entry (-12.98
J/token, -2.21 J/token, 0 J/token and 0 W, 2.0e11 J/token, half the energy).
"""

from __future__ import annotations

import contextlib
import io
import uuid

import pytest

from benchledger import rules as R
from tests.conftest import pids_tagged, run_sweep_text
from tests.faults.lying_dcgm import serve_in_thread
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

MODEL = f"sim-liar-{uuid.uuid4().hex[:8]}"  # in every process's argv: finds leftovers
LIES = {  # arm -> what energy_gaps and the rule's found say of its GPU 0
    "negative-power": "gpu0: negative power reading (-600 W)",
    "backwards": "gpu0: energy counter went backwards",
    "frozen": "gpu0: energy counter frozen",
    "jump": "gpu0: energy counter jumped",
}


def lying_sweep(base_url: str) -> dict:
    pages = {"honest": "{base_url}/dcgm", **{arm: f"{base_url}/{arm}/metrics"
                                             for arm in (*LIES, "vanish")}}
    return sweep("it-lying-dcgm",
                 [simulator_arm(arm, {"step_ms": 4.0}, model=MODEL, clock_url=url)
                  for arm, url in pages.items()],
                 sweep={"retries": 0},
                 defaults=defaults(requests=6, restarts=1, max_tokens=16,
                                   clock={"clock_source": "dcgm"}, clock_interval_s=0.1))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    server, base_url = serve_in_thread()
    workdir = tmp_path_factory.mktemp("lying-dcgm")
    terminal = io.StringIO()
    try:
        with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(terminal):
            run_id, state, con = run_sweep_text(workdir, lying_sweep(base_url))
    finally:
        server.shutdown()
        server.server_close()
    yield {"run_id": run_id, "state": state, "con": con, "terminal": terminal.getvalue()}
    con.close()


def energy_entries(run, arm: str) -> list[tuple]:
    return run["con"].execute(
        "SELECT metric, value, publishable, blocked_by FROM entries "
        "WHERE run_id = ? AND arm = ? AND list_contains(?, metric) ORDER BY metric",
        [run["run_id"], arm, list(R.ENERGY_METRICS)]).fetchall()


def window_rule(run, arm: str, rule: str) -> tuple[bool, str]:
    rows = run["con"].execute(
        "SELECT v.success, v.found FROM validations AS v "
        "JOIN windows AS w ON w.window_id = v.subject "
        "WHERE v.run_id = ? AND w.arm = ? AND v.expectation = ?",
        [run["run_id"], arm, rule]).fetchall()
    assert len(rows) == 1, rows
    return rows[0]


def test_every_arm_measured_and_no_process_is_left(run):
    assert run["state"] == "success", run["terminal"][-3000:]
    assert pids_tagged(MODEL) == []


def test_no_energy_entry_anywhere_is_negative_zero_or_absurd(run):
    values = run["con"].execute(
        "SELECT arm, metric, value FROM entries WHERE run_id = ? AND list_contains(?, metric) "
        "AND value IS NOT NULL", [run["run_id"], list(R.ENERGY_METRICS)]).fetchall()
    assert {arm for arm, _, _ in values} == {"honest"}, values
    # the simulator's GPUs: 60 W idle, 450 W under load
    assert all(0 < value < 1e4 for _, _, value in values), values


def test_the_honest_page_publishes_its_energy(run):
    entries = energy_entries(run, "honest")
    assert [(m, publishable) for m, _, publishable, _ in entries] == [
        (m, True) for m in sorted(R.ENERGY_METRICS)]
    assert window_rule(run, "honest", R.ENERGY_READABLE.name)[0] is True


@pytest.mark.parametrize("arm", sorted(LIES))
def test_a_lying_page_blocks_the_energy_entries_and_says_why(run, arm):
    passed, found = window_rule(run, arm, R.ENERGY_READABLE.name)
    assert passed is False and found.startswith("energy unreadable: ")
    assert f"local/{LIES[arm]}" in found
    gaps = run["con"].execute(
        "SELECT e.energy_j, e.energy_gaps FROM window_energy AS e "
        "JOIN windows AS w ON w.window_id = e.window_id WHERE w.run_id = ? AND w.arm = ?",
        [run["run_id"], arm]).fetchall()
    assert len(gaps) == 1 and gaps[0][0] is None and f"local/{LIES[arm]}" in gaps[0][1]
    entries = energy_entries(run, arm)
    assert [m for m, *_ in entries] == sorted(R.ENERGY_METRICS)  # made, never left out
    for _, value, publishable, blocked_by in entries:
        assert value is None and publishable is False
        assert f"{R.ENERGY_READABLE.name} [" in blocked_by
    # a GPU page that lies says nothing of the tokens the client counted
    throughput = run["con"].execute(
        "SELECT bool_and(publishable) FROM entries WHERE run_id = ? AND arm = ? "
        "AND metric = 'throughput'", [run["run_id"], arm]).fetchone()[0]
    assert throughput is True


def test_a_gpu_listed_at_launch_and_absent_from_every_window(run):
    con = run["con"]
    listed = con.execute(
        "SELECT deployment FROM restarts WHERE run_id = ? AND arm = 'vanish'",
        [run["run_id"]]).fetchone()[0]
    assert '"gpu": 1' in listed  # listed when the deployment was ready
    gaps = con.execute(
        "SELECT e.energy_j, e.gpus, e.energy_gaps FROM window_energy AS e "
        "JOIN windows AS w ON w.window_id = e.window_id WHERE w.run_id = ? AND w.arm = ?",
        [run["run_id"], "vanish"]).fetchall()
    assert gaps == [(None, 1, "listed when the deployment was ready, not on the window's "
                               "pages: local/gpu1")]
    passed, found = con.execute(
        "SELECT v.success, v.found FROM validations AS v JOIN restarts AS r "
        "ON r.restart_id = v.subject WHERE v.run_id = ? AND r.arm = 'vanish' "
        "AND v.expectation = ?", [run["run_id"], R.CLOCK_UNDER_LOAD.name]).fetchone()
    assert passed is False  # fails closed, naming the GPU it could not see
    assert "absent from the telemetry of a window: local/gpu1 (1 of 1 windows)" in found
    assert con.execute("SELECT count(*) FROM entries WHERE run_id = ? AND arm = 'vanish' "
                       "AND publishable", [run["run_id"]]).fetchone()[0] == 0
