"""The simulator's pretend dcgm-exporter page (simulator/dcgm_page.py), read back by
benchledger's own parser (benchledger/server/dcgm.py), which shares no code with it."""

from __future__ import annotations

import pytest

from benchledger.server.dcgm import parse_dcgm_page
from benchledger.simulator.dcgm_page import gpu_energy_mj, render_dcgm
from benchledger.simulator.options import SimConfig


def test_a_stuck_gpu_is_shown_at_its_low_clock_drawing_less_and_reporting_no_reason():
    config = SimConfig(num_gpus=4, low_clock=True)
    gpus = parse_dcgm_page(render_dcgm(config, True, alive_s=100.0, busy_s=40.0, hostname="n3"))
    assert [g["gpu"] for g in gpus] == [0, 1, 2, 3] and {g["hostname"] for g in gpus} == {"n3"}
    assert [g["sm_clock_mhz"] for g in gpus] == [494.0, 2400.0, 2400.0, 2400.0]
    assert {g["max_sm_clock_mhz"] for g in gpus} == {2520.0}
    assert gpus[0]["power_w"] == pytest.approx(450.0 * 494 / 2400)
    assert gpus[1]["power_w"] == 450.0
    assert {g["clock_event_reasons"] for g in gpus} == {0}  # as the field notes' GPU did
    assert len({g["uuid"] for g in gpus}) == 4


def test_the_energy_counter_is_idle_power_over_life_plus_the_loads_extra_while_stepping():
    config = SimConfig(num_gpus=2)
    gpus = parse_dcgm_page(render_dcgm(config, False, alive_s=100.0, busy_s=40.0))
    expected_j = 60.0 * 100.0 + (450.0 - 60.0) * 40.0
    assert [g["energy_j"] for g in gpus] == [expected_j, expected_j]
    assert gpu_energy_mj(config, 2400, 100.0, 40.0) == expected_j * 1000  # mJ on the page
    idle = parse_dcgm_page(render_dcgm(config, False, alive_s=100.0, busy_s=0.0))
    assert {g["power_w"] for g in idle} == {60.0} and {g["sm_clock_mhz"] for g in idle} == {210.0}


def test_power_settings_are_checked_against_each_other():
    with pytest.raises(ValueError, match="load_power_w"):
        SimConfig(idle_power_w=500.0, load_power_w=400.0)
