"""dcgm-exporter pages as GPU readings (benchledger/server/dcgm.py), on real exporter output
(tests/fixtures/dcgm/README.md names each page's source and versions)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchledger.server.dcgm import DcgmPageError, clock_event_names, parse_dcgm_page

PAGES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"


def page(name: str) -> list[dict]:
    return parse_dcgm_page((PAGES / name).read_text(), name)


def test_eight_gpus_one_of_them_in_mig_mode_are_eight_readings():
    gpus = page("sample_a800-sxm4-80gb_8gpu_mig_johns-blog.prom")
    assert [g["gpu"] for g in gpus] == list(range(8))
    assert len({g["uuid"] for g in gpus}) == 8
    assert {g["model"] for g in gpus} == {"NVIDIA A800-SXM4-80GB"}
    assert {g["hostname"] for g in gpus} == {"msxf-hpc-64-35-ai"}
    mig, idle = gpus[0], gpus[1]
    # GPU 0's three MIG instances repeat its readings: one reading, never their sum
    assert (mig["sm_clock_mhz"], mig["power_w"]) == (1410.0, 78.174)
    assert mig["energy_j"] == pytest.approx(257858.316)  # 257858316 mJ, the largest row
    assert (idle["sm_clock_mhz"], idle["power_w"]) == (210.0, 55.942)
    assert idle["energy_j"] == pytest.approx(187554.325)
    # a default exporter prints neither: unknown, not zero
    assert all(g["max_sm_clock_mhz"] is None and g["clock_event_reasons"] is None
               and g["clock_event_names"] is None for g in gpus)


def test_a_field_printed_as_text_does_not_cost_the_page():
    text = (PAGES / "sample_a800-sxm4-80gb_8gpu_mig_johns-blog.prom").read_text()
    assert "ERROR - FAILED TO CONVERT TO STRING" in text  # as the real exporter printed it
    assert len(parse_dcgm_page(text)) == 8


def test_a_counter_family_is_read_by_its_name():
    # TYPE counter: prometheus_client names the rows <family>_total
    l4, = page("sample_l4_kops_cncf-ai-conformance.prom")
    assert (l4["model"], l4["sm_clock_mhz"], l4["mem_clock_mhz"]) == ("NVIDIA L4", 210.0, 405.0)
    assert l4["power_w"] == 16.365 and l4["energy_j"] == pytest.approx(4742.776)
    assert (l4["utilization_gpu"], l4["memory_used_mib"]) == (0.0, 0.0)


def test_a_page_without_help_or_type_lines_reads_the_same_fields():
    t4, = page("sample_t4_ericsson-ccd_cncf-ai-conformance.prom")
    assert (t4["model"], t4["sm_clock_mhz"], t4["power_w"]) == ("Tesla T4", 660.0, 68.244)
    assert t4["energy_j"] == pytest.approx(15152422.938)
    assert (t4["utilization_gpu"], t4["memory_used_mib"]) == (91.0, 5120.0)


def test_a_gpu_without_power_or_an_energy_counter_has_none_not_zero():
    vgpu, = page("sample_grid-a100-40c_vgpu_vks-v1.35_cncf-ai-conformance.prom")
    assert vgpu["model"] == "GRID A100-40C" and vgpu["sm_clock_mhz"] == 1410.0
    assert vgpu["power_w"] is None and vgpu["energy_j"] is None


def test_the_old_throttle_reasons_name_is_the_clock_event_field():
    a30, = page("fragment_issue317_a30_mig_clock_throttle_reasons.prom")  # two MIG rows
    assert (a30["model"], a30["clock_event_reasons"], a30["clock_event_names"]) == (
        "NVIDIA A30", 1, "gpu_idle")
    assert a30["sm_clock_mhz"] is None  # the fragment has no other field


def test_clock_event_bits_are_named_as_dcgm_exporter_names_them():
    assert clock_event_names(0) == ""
    assert clock_event_names(0x8 | 0x4) == "power_cap,hw_slowdown"
    assert clock_event_names(0x200 | 0x1) == "gpu_idle,0x200"  # a bit DCGM added later
    assert clock_event_names(None) is None


def test_dcgm_4_6_fields_in_hertz_and_joules():
    text = ('DCGM_FI_DEV_SM_CLOCK_HERTZ{gpu="0",UUID="GPU-a",Hostname="n3"} 494000000\n'
            'DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ{gpu="0",UUID="GPU-a",Hostname="n3"} 2400000000\n'
            'DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL{gpu="0",UUID="GPU-a",hostname="n3"} 12.5\n')
    gpu, = parse_dcgm_page(text)
    assert (gpu["sm_clock_mhz"], gpu["max_sm_clock_mhz"], gpu["energy_j"]) == (494.0, 2400.0,
                                                                              12.5)
    assert gpu["hostname"] == "n3"


def test_nan_is_no_reading():
    gpu, = parse_dcgm_page('DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b"} NaN\n'
                           'DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-b"} 1980\n')
    assert gpu["power_w"] is None and gpu["sm_clock_mhz"] == 1980.0
    assert not any(isinstance(v, float) and math.isnan(v) for v in gpu.values())


@pytest.mark.parametrize(("text", "why"), [
    ("vllm:num_requests_running 3\n", "no dcgm-exporter GPU field on the page"),
    ("", "no dcgm-exporter GPU field on the page"),
    ('DCGM_FI_DEV_SM_CLOCK{UUID="GPU-a"} 1410\n', "a DCGM_FI_DEV_SM_CLOCK row has no gpu label"),
    ('DCGM_FI_DEV_SM_CLOCK{gpu="zero"} 1410\n', "gpu label 'zero' is not an index"),
    ('DCGM_FI_DEV_SM_CLOCK{gpu="0"} fast\n', "not Prometheus text"),
])
def test_a_page_it_cannot_read_is_refused_naming_why(text, why):
    with pytest.raises(DcgmPageError, match="^node-a:9400: " + why):
        parse_dcgm_page(text, "node-a:9400")
