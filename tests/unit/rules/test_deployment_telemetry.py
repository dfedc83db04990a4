"""GPU telemetry of a whole deployment in the warehouse (issue #24): the clock rule judges
every GPU of every node the restart's deployment spanned, and a window's energy is every
GPU's counter delta, or its power integrated, or nothing at all (never a partial sum)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from benchledger.expectations.gate import run_gate
from benchledger.rules import SUITE_FRAMES
from benchledger.warehouse.db import connect, insert_frame, query_frame

RUN = "run-1"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def deployment(*nodes: str) -> str:
    return json.dumps([{"node": node, "role": "head" if i == 0 else "node", "rank": i}
                       for i, node in enumerate(nodes)])


def reading(restart: str, window: str, node: str, gpu: int, phase: str, at_s: float,
            sm: float | None = 2400.0, util: float | None = 100.0,
            energy_j: float | None = None, power_w: float | None = None,
            max_sm: float | None = 2520.0) -> dict:
    return {"restart_id": restart, "window_id": window, "node": node, "source": "dcgm",
            "phase": phase, "sampled_at": T0 + timedelta(seconds=at_s), "gpu": gpu,
            "sm_clock_mhz": sm, "max_sm_clock_mhz": max_sm, "utilization_gpu": util,
            "energy_j": energy_j, "power_w": power_w, "raw_file_sha256": "x"}


def loaded_gpu(restart: str, window: str, node: str, gpu: int, sm: float = 2400.0,
               counter: tuple[float, float] | None = (1000.0, 1900.0),
               power: float | None = 450.0, samples: int = 4) -> list[dict]:
    """A GPU read before (idle), `samples` times during (under load) and after (idle) a
    window of 2 s; its counter moves from counter[0] to counter[1]."""
    rows = [reading(restart, window, node, gpu, "before", 0.0, sm=210.0, util=0.0,
                    energy_j=counter[0] if counter else None, power_w=power)]
    rows += [reading(restart, window, node, gpu, "during", 2.0 * (i + 1) / (samples + 1),
                     sm=sm, power_w=power) for i in range(samples)]
    rows.append(reading(restart, window, node, gpu, "after", 2.0, sm=210.0, util=0.0,
                        energy_j=counter[1] if counter else None, power_w=power))
    return rows


@pytest.fixture
def warehouse(tmp_path):
    with connect(tmp_path / "w.duckdb") as con:
        yield con


def store(con, restarts: list[tuple[str, str]], telemetry: list[dict],
          required: bool = True) -> None:
    """restarts: (restart_id, its deployment JSON); one window per restart."""
    insert_frame(con, "runs", pd.DataFrame([{"run_id": RUN, "sweep_name": "s",
                                             "harness_version": "t"}]))
    insert_frame(con, "restarts", pd.DataFrame([
        {"restart_id": r, "run_id": RUN, "arm": "a", "restart_index": i, "status": "ok",
         "server_kind": "simulator", "single_instance": False, "raw_file_sha256": r,
         "deployment": spanned} for i, (r, spanned) in enumerate(restarts)]))
    insert_frame(con, "windows", pd.DataFrame([
        {"window_id": f"{r}/w", "restart_id": r, "run_id": RUN, "arm": "a", "workload": "code",
         "concurrency": 1, "submitted": 5, "completed": 5, "failed": 0, "unresolved": 0,
         "drain_status": "complete", "elapsed_s": 2.0, "min_requests": 5,
         "raw_file_sha256": f"{r}/w", "requests_file_sha256": f"{r}/q",
         "min_clock_ratio": 0.9, "require_clock_check": required,
         "clock_source": "dcgm"} for r, _ in restarts]))
    if telemetry:
        insert_frame(con, "gpu_telemetry", pd.DataFrame(telemetry))


def gate(con) -> pd.DataFrame:
    return query_frame(con, "gate_restarts", run_id=RUN).set_index("restart_id")


def clock_results(con) -> dict[str, tuple[bool, str]]:
    """restart -> (clock_under_load passed, found), through the GX gate itself."""
    restarts = query_frame(con, "gate_restarts", run_id=RUN)
    # no windows or requests: only the restarts suite has subjects
    windows, requests = (pd.DataFrame(columns=list(SUITE_FRAMES[suite].required))
                         for suite in ("windows", "measured_requests"))
    results = run_gate(restarts, windows, requests)
    return {r.subject: (r.success, r.found) for r in results
            if r.expectation == "clock_under_load"}


def test_a_throttled_gpu_on_a_node_that_does_not_measure_fails_naming_node_and_gpu(warehouse):
    nodes = ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4")
    telemetry = []
    for restart, stuck in (("stuck", True), ("healthy", False)):
        for node in nodes:
            for gpu in (0, 1):
                slow = stuck and node == "gpu-node-3" and gpu == 1
                telemetry += loaded_gpu(restart, f"{restart}/w", node, gpu,
                                        sm=494.0 if slow else 2400.0)
    store(warehouse, [("stuck", deployment(*nodes)), ("healthy", deployment(*nodes))],
          telemetry)
    rows = gate(warehouse)
    assert rows.loc["stuck", "clock_ratio"] == pytest.approx(494 / 2520)
    assert rows.loc["stuck", "clock_detail"] == (
        "gpu-node-3/gpu1 median 494 MHz of 2520 = 0.196 (4 samples under load)")
    assert rows.loc["healthy", "clock_ratio"] == pytest.approx(2400 / 2520)
    results = clock_results(warehouse)
    assert results["stuck"][0] is False and "gpu-node-3/gpu1 median 494 MHz" in results["stuck"][1]
    assert results["healthy"][0] is True
    # the idle readings that bracket the window (0% utilisation) are no samples under load
    clocks = warehouse.execute("SELECT min(median_sm_clock_mhz), max(samples) "
                               "FROM window_clocks").fetchone()
    assert clocks == (494.0, 4)


def test_a_node_without_a_reading_leaves_the_restart_unchecked(warehouse):
    telemetry = loaded_gpu("r", "r/w", "gpu-node-1", 0)  # gpu-node-2 never answered
    store(warehouse, [("r", deployment("gpu-node-1", "gpu-node-2"))], telemetry)
    row = gate(warehouse).loc["r"]
    assert pd.isna(row["clock_ratio"])
    assert "gpu-node-1/gpu0 median 2400 MHz" in row["clock_detail"]
    assert "unchecked: no GPU sample under load from node gpu-node-2 (source dcgm)" in \
        row["clock_detail"]
    passed, found = clock_results(warehouse)["r"]
    assert passed is False and "gpu-node-2" in found  # required: unchecked fails


def test_an_unread_node_is_allowed_only_when_the_sweep_says_so(warehouse):
    telemetry = loaded_gpu("r", "r/w", "gpu-node-1", 0)
    store(warehouse, [("r", deployment("gpu-node-1", "gpu-node-2"))], telemetry,
          required=False)
    assert clock_results(warehouse)["r"][0] is True


def test_a_throttled_gpu_fails_even_where_another_node_is_unread(warehouse):
    telemetry = loaded_gpu("r", "r/w", "gpu-node-1", 0, sm=494.0)
    store(warehouse, [("r", deployment("gpu-node-1", "gpu-node-2"))], telemetry,
          required=False)
    row = gate(warehouse).loc["r"]
    assert row["clock_ratio"] == pytest.approx(494 / 2520)
    assert clock_results(warehouse)["r"][0] is False


def test_a_gpu_without_a_maximum_clock_is_unchecked_and_says_which_field(warehouse):
    telemetry = loaded_gpu("r", "r/w", "gpu-node-1", 0)
    for row in telemetry:
        row["max_sm_clock_mhz"] = None  # a default dcgm-exporter: no DCGM_FI_DEV_MAX_SM_CLOCK
    store(warehouse, [("r", deployment("gpu-node-1"))], telemetry)
    row = gate(warehouse).loc["r"]
    assert pd.isna(row["clock_ratio"])
    assert "no maximum SM clock reported for gpu-node-1/gpu0" in row["clock_detail"]
    assert "DCGM_FI_DEV_MAX_SM_CLOCK" in row["clock_detail"]


def energy(con) -> pd.DataFrame:
    return con.execute("SELECT * FROM window_energy").df().set_index("window_id")


def test_window_energy_is_every_gpus_counter_delta(warehouse):
    telemetry = (loaded_gpu("r", "r/w", "gpu-node-1", 0, counter=(100.0, 1000.0))
                 + loaded_gpu("r", "r/w", "gpu-node-1", 1, counter=(5000.0, 5800.5))
                 + loaded_gpu("r", "r/w", "gpu-node-2", 0, counter=(7.0, 907.0)))
    store(warehouse, [("r", deployment("gpu-node-1", "gpu-node-2"))], telemetry)
    row = energy(warehouse).loc["r/w"]
    assert row["energy_j"] == pytest.approx(900.0 + 800.5 + 900.0, abs=1e-9)
    assert (row["energy_source"], row["gpus"], row["nodes"], row["counter_gpus"]) == (
        "energy counter", 3, 2, 3)
    assert row["span_s"] == pytest.approx(2.0)
    assert row["energy_gaps"] == ""


def test_a_gpu_without_a_counter_has_its_power_integrated_and_is_labelled(warehouse):
    # a vGPU-like GPU: power readings, no energy counter; 450 W for 2 s is 900 J
    telemetry = (loaded_gpu("r", "r/w", "gpu-node-1", 0, counter=(0.0, 1000.0))
                 + loaded_gpu("r", "r/w", "gpu-node-2", 0, counter=None, power=450.0))
    store(warehouse, [("r", deployment("gpu-node-1", "gpu-node-2"))], telemetry)
    row = energy(warehouse).loc["r/w"]
    assert row["energy_j"] == pytest.approx(1000.0 + 900.0)
    assert row["energy_source"] == "energy counter + integrated power samples"
    assert (row["counter_gpus"], row["integrated_gpus"]) == (1, 1)


def test_a_counter_that_went_backwards_is_unreadable_never_a_negative_energy(warehouse):
    # issue #39: a counter that goes backwards (a driver reloaded under the server, or a
    # page that lies) is unreadable, and its page's power is not taken in its place
    telemetry = loaded_gpu("r", "r/w", "gpu-node-1", 0, counter=(9000.0, 10.0), power=300.0)
    store(warehouse, [("r", deployment("gpu-node-1"))], telemetry)
    row = energy(warehouse).loc["r/w"]
    assert pd.isna(row["energy_j"]) and pd.isna(row["energy_source"])
    assert row["energy_gaps"] == ("readings that cannot be true: gpu-node-1/gpu0: energy "
                                  "counter went backwards (by 8990 J)")


def test_no_energy_where_a_gpu_or_a_node_was_not_read_never_a_partial_sum(warehouse):
    blind = (loaded_gpu("a", "a/w", "gpu-node-1", 0)
             + loaded_gpu("a", "a/w", "gpu-node-1", 1, counter=None, power=None))
    unread = loaded_gpu("b", "b/w", "gpu-node-1", 0)
    half = [r for r in loaded_gpu("c", "c/w", "gpu-node-1", 0) if r["phase"] != "after"]
    store(warehouse, [("a", deployment("gpu-node-1")),
                      ("b", deployment("gpu-node-1", "gpu-node-2")),
                      ("c", deployment("gpu-node-1"))], blind + unread + half)
    rows = energy(warehouse)
    assert rows["energy_j"].isna().all() and rows["energy_source"].isna().all()
    assert rows.loc["a/w", "energy_gaps"] == (
        "no energy counter or power samples over the window: gpu-node-1/gpu1")
    assert rows.loc["b/w", "energy_gaps"] == "no telemetry from node gpu-node-2"
    assert "gpu-node-1/gpu0" in rows.loc["c/w", "energy_gaps"]  # no reading after it
