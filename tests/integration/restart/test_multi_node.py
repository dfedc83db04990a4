"""Issue #24 through the real pipeline (Airflow's dag.test(), real simulator processes,
real DuckDB): one model across four nodes, each node its own process on its own loopback
address, every GPU of every node read during every window.

- One GPU stuck at 494 MHz on gpu-node-3 (of its 2,520 MHz maximum, the simulator's H100-like
  GPU; the field notes' was about 2,400) leaves every restart of its arm out
  (`clock_under_load`, naming the node and the GPU), whether gpu-node-3 is a node that does
  not measure (the field notes' blind spot) or the head that does; the healthy arm
  publishes.
- Joules per token equal the energy the pretend GPUs' counters reported (their dcgm pages
  as kept in the raw observations, parsed here on their own) over the tokens delivered,
  to 1e-9, with restart-level intervals; the A/B of energy per token is held to its A/A
  control like any other metric.
- Every process of every node is started, recorded in the deployment and stopped.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import uuid
from collections import defaultdict

import pyarrow.parquet as pq
import pytest

from benchledger.raw.layout import RunLayout
from tests.conftest import pids_tagged, run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4")
MODEL = f"sim-mn-{uuid.uuid4().hex[:8]}"  # in every process's argv: finds leftovers


def arm(name: str, head: str, stuck_node: str | None = None, speculative: bool = False,
        subnet: int = 1) -> dict:
    """A four-node simulator arm; `stuck_node`'s GPU 1 stays at 494 MHz under load."""

    def address(node: str) -> str:
        return f"127.0.24.{subnet * 10 + NODES.index(node)}"

    return simulator_arm(
        name, {"step_ms": 4.0, "num_gpus": 2, "low_clock_gpu": 1, "speculative": speculative,
               "low_clock_restarts": [0, 1] if stuck_node == head else []},
        model=MODEL, node=head, address=address(head), requests=30 if speculative else 16,
        processes=[{"node": node, "address": address(node), "low_clock": node == stuck_node}
                   for node in NODES if node != head])


SWEEP = sweep(
    "it-four-nodes",
    [arm("healthy", "gpu-node-1", subnet=1),
     arm("healthy-again", "gpu-node-1", subnet=2),
     arm("spec", "gpu-node-1", speculative=True, subnet=3),
     # the blind spot: the stuck GPU is on a node that does not measure
     arm("stuck-elsewhere", "gpu-node-1", stuck_node="gpu-node-3", subnet=4),
     # and on the head, the node that measures
     arm("stuck-at-head", "gpu-node-3", stuck_node="gpu-node-3", subnet=5)],
    sweep={"retries": 0},
    # windows of about 2 s (10 with the stuck GPU): every node is read under load several
    # times in each, even on a busy machine (a 1 s window once got one reading under load
    # on the head and none on one node: unchecked, its restart left out)
    defaults=defaults(requests=8, max_tokens=32, clock_interval_s=0.1, clock={
        "clock_source": "dcgm", "clock_url": "{base_url}/dcgm"}),
    comparisons=[{"a": "healthy", "b": "spec", "metric": "energy_per_token",
                  "control": ["healthy", "healthy-again"]}])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("four-nodes")
    terminal = io.StringIO()
    with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(terminal):
        run_id, state, con = run_sweep_text(workdir, SWEEP)
    yield {"run_id": run_id, "state": state, "con": con, "data": workdir / "data",
           "terminal": terminal.getvalue()}
    con.close()


def test_the_run_succeeds_and_leaves_no_process_on_any_node(run):
    assert run["state"] == "success", run["terminal"][-3000:]
    assert pids_tagged(MODEL) == []


def test_a_stuck_gpu_anywhere_leaves_every_restart_of_its_arm_out_naming_node_and_gpu(run):
    con = run["con"]
    rows = con.execute(
        "SELECT r.arm, v.subject, v.success, v.found FROM validations AS v "
        "JOIN restarts AS r ON r.restart_id = v.subject "
        "WHERE v.run_id = ? AND v.expectation = 'clock_under_load' ORDER BY v.subject",
        [run["run_id"]]).fetchall()
    by_arm = defaultdict(list)
    for arm_name, _, success, found in rows:
        by_arm[arm_name].append((success, found))
    for stuck in ("stuck-elsewhere", "stuck-at-head"):
        assert len(by_arm[stuck]) == 2
        for success, found in by_arm[stuck]:
            assert not success
            assert re.match(r"gpu-node-3/gpu1 median 494 MHz of 2520 = 0\.196 \(\d+ samples "
                            r"under load\)", found), found
    for healthy in ("healthy", "healthy-again", "spec"):
        assert [success for success, _ in by_arm[healthy]] == [True, True], by_arm[healthy]
    published = {a for a, in con.execute(
        "SELECT DISTINCT arm FROM published_entries WHERE run_id = ?",
        [run["run_id"]]).fetchall()}
    assert {"healthy", "healthy-again", "spec"} <= published
    assert not published & {"stuck-elsewhere", "stuck-at-head"}
    excluded = con.execute("SELECT DISTINCT excluded FROM entries WHERE run_id = ? AND arm = "
                           "'stuck-elsewhere'", [run["run_id"]]).fetchall()
    assert all("clock_under_load" in text and "gpu-node-3/gpu1" in text
               for text, in excluded)


def test_every_node_of_every_window_was_read_before_during_and_after(run):
    con = run["con"]
    rows = con.execute(
        "SELECT w.window_id, t.node, t.gpu, list(DISTINCT t.phase ORDER BY t.phase) "
        "FROM windows AS w JOIN gpu_telemetry AS t USING (window_id) "
        "WHERE w.run_id = ? GROUP BY ALL", [run["run_id"]]).fetchall()
    windows = {w for w, *_ in rows}
    assert len(windows) == 10
    for window in windows:
        mine = [(node, gpu, phases) for w, node, gpu, phases in rows if w == window]
        assert sorted((node, gpu) for node, gpu, _ in mine) == [
            (n, g) for n in NODES for g in (0, 1)]
        assert all(phases == ["after", "before", "during"] for _, _, phases in mine)


def test_the_deployment_is_recorded_with_its_nodes_and_gpus_and_every_process_stopped(run):
    for restart_id, spanned, status in run["con"].execute(
            "SELECT restart_id, deployment, status FROM restarts WHERE run_id = ?",
            [run["run_id"]]).fetchall():
        assert status == "ok", restart_id
        nodes = json.loads(spanned)
        assert sorted(n["node"] for n in nodes) == list(NODES)
        assert [n["role"] for n in nodes] == ["head", "node", "node", "node"]
        for node in nodes:
            assert [g["gpu"] for g in node["gpus"]] == [0, 1]
            assert all(g["uuid"].startswith("GPU-") for g in node["gpus"])
            assert node["stop_status"].startswith("stopped by SIGTERM"), node
            assert node.get("ended_before_stop") in (None, False)
            assert node["address"].startswith("127.0.24.")


def _pages(observed: dict) -> dict[str, tuple[str, str]]:
    """Each node's dcgm page before and after the window, as the raw file kept them."""
    return {node["node"]: (node["before_page"], node["after_page"])
            for node in observed["telemetry"]["nodes"]}


ENERGY = re.compile(r'^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{gpu="(\d+)"[^}]*\} (\S+)$', re.M)


def _joules(before: str, after: str) -> float:
    """Every GPU's counter (mJ) after minus before, in J: parsed here, not by benchledger."""
    start = {gpu: float(v) for gpu, v in ENERGY.findall(before)}
    end = {gpu: float(v) for gpu, v in ENERGY.findall(after)}
    assert sorted(start) == sorted(end) == ["0", "1"]
    return sum(end[gpu] - start[gpu] for gpu in start) / 1000.0


def test_joules_per_token_are_the_reported_energy_over_delivered_tokens(run):
    con = run["con"]
    for arm_name in ("healthy", "healthy-again", "spec"):
        per_window = []
        layout = RunLayout(run["data"], run["run_id"])
        for k in (0, 1):
            files = layout.window_files(arm_name, k, "code", 1)
            observed = json.loads(files.observed.read_text())
            assert observed["window_id"] == layout.window_id(arm_name, k, "code", 1)
            joules = sum(_joules(*pages) for pages in _pages(observed).values())
            requests = pq.read_table(files.requests).to_pylist()
            tokens = sum(r["output_tokens"] for r in requests
                         if r["status"] == "completed" and not r["is_warmup"])
            per_window.append(joules / tokens)
        assert len(per_window) == 2
        value, low, high, n_restarts, source, entry_id = con.execute(
            "SELECT value, restart_ci95_low, restart_ci95_high, n_restarts, energy_source, "
            "entry_id FROM current_entries WHERE run_id = ? AND arm = ? "
            "AND metric = 'energy_per_token' AND publishable", [run["run_id"], arm_name]
        ).fetchone()
        assert value == pytest.approx(sum(per_window) / 2, rel=1e-9, abs=1e-9)
        assert (n_restarts, source) == (2, "energy counter")
        assert low < value < high  # an interval over the two restarts
        means = sorted(m for m, in con.execute(
            "SELECT mean FROM entry_restart_means WHERE entry_id = ?", [entry_id]).fetchall())
        assert means == pytest.approx(sorted(per_window), rel=1e-9, abs=1e-9)


def test_energy_per_token_is_compared_against_its_a_a_control(run):
    con = run["con"]
    rows = {role: (verdict, a, b, unit, higher) for role, verdict, a, b, unit, higher in
            con.execute("SELECT role, verdict, a, b, unit, higher_is_better FROM comparisons "
                        "WHERE run_id = ? AND metric = 'energy_per_token'",
                        [run["run_id"]]).fetchall()}
    # The A/A control is measured and held beside the A/B. Its own verdict is "no finding",
    # or, about one run in twenty by the design of a 95% interval over two restarts per arm
    # (more where a loaded machine slows one restart), "not decidable" because the twins
    # differ: never a finding, and not what this test is about (CI hit the second once).
    assert rows["control"][1:3] == ("healthy", "healthy-again")
    assert rows["control"][0] in ("no finding", "not decidable")
    # speculation delivers about twice the tokens per step at one power: fewer J/token,
    # and fewer is better
    assert rows["ab"] == ("improvement", "healthy", "spec", "J/token", False)
    beyond = con.execute(
        "SELECT v.success FROM validations AS v JOIN comparisons AS c "
        "ON v.subject = c.comparison_id WHERE c.run_id = ? AND c.role = 'ab' "
        "AND c.metric = 'energy_per_token' AND v.expectation = 'ab_beyond_control'",
        [run["run_id"]]).fetchall()
    assert beyond == [(True,)]


def test_report_and_terminal_show_the_energy_entries_with_their_source(run):
    from benchledger.publishing.report import run_tables
    from benchledger.publishing.report_html import render_report

    con = run["con"]
    page = render_report(con, run["run_id"])
    section = page.split("<h2>Energy (every GPU of the deployment)</h2>", 1)[1]
    section = section.split("<h2>", 1)[0]
    rows = re.findall(r"<tr class=''>(.*?)</tr>", section)
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rows]
    published = con.execute(
        "SELECT arm, metric, value FROM published_entries WHERE run_id = ? AND metric IN "
        "('energy_per_token', 'tokens_per_joule', 'gpu_power') AND statistic = 'mean'",
        [run["run_id"]]).fetchall()
    assert len(published) == 9  # three metrics of each of the three healthy arms
    shown = {(c[0], c[2], c[4]) for c in cells}
    assert shown == {(a, m, f"{v:.4g}") for a, m, v in published}
    assert {c[-1] for c in cells} == {"energy counter"}
    # the terminal's headline shows joules per token beside the rates, with their source
    terminal = run_tables(con, run["run_id"])
    assert re.search(r"spec +code +energy_per_token .* J/token .*joules: energy counter",
                     terminal), terminal
