"""Pretend dcgm-exporter page (GET /dcgm): the node's pretend GPUs as NVIDIA's exporter
prints them (issue #24), so telemetry can be tested end to end without a GPU.

Written by hand from dcgm-exporter's own field names and units (the simulator shares no
code with benchledger's parser, benchledger/server/dcgm.py): SM clock and its maximum in MHz,
power in W, the energy counter in mJ since the process started (DCGM's: since the driver
loaded), utilisation in %, framebuffer used in MiB, and the clock-event reasons bitmask,
always 0 (the field notes' stuck GPU reported no reason either). The maximum SM clock and
the reasons are not default exporter fields; a cluster adds them to its counters CSV, and
so does this page.

Power follows the clock: idle_power_w while idle, load_power_w * clock / sm_clock under
load (the stuck GPU in low-clock mode, --low-clock-gpu, draws less, as a down-clocked GPU
does). Energy is exact for that model: idle power over the process's life plus the load's
extra power over the seconds the engine spent stepping (Engine.busy_s; on a pretend node,
the head's, see nodes.py), so it only grows.
"""

from __future__ import annotations

import socket
import uuid

from benchledger.simulator.clocks import gpu_clocks
from benchledger.simulator.options import SimConfig

FIELDS = (  # name, type, help (dcgm-exporter's default-counters.csv wording)
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "Maximum supported SM clock for the device."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge",
     "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*)"),
)
FB_USED_MIB = 70_000  # weights and KV cache: held whether or not requests run


def gpu_power_w(config: SimConfig, clock_mhz: float, under_load: bool) -> float:
    """Watts a GPU at `clock_mhz` draws now (see the module docstring)."""
    if not under_load:
        return config.idle_power_w
    return config.load_power_w * clock_mhz / config.sm_clock_mhz


def gpu_energy_mj(config: SimConfig, load_clock_mhz: float, alive_s: float,
                  busy_s: float) -> int:
    """The energy counter of a GPU that runs at `load_clock_mhz` under load, after
    `alive_s` seconds, `busy_s` of them stepping."""
    extra_w = gpu_power_w(config, load_clock_mhz, True) - config.idle_power_w
    return int((config.idle_power_w * alive_s + extra_w * busy_s) * 1000)


def render_dcgm(config: SimConfig, under_load: bool, alive_s: float, busy_s: float,
                hostname: str | None = None) -> str:
    """The whole page, one row per GPU and field, labelled as dcgm-exporter labels them.
    Clocks come from the same pretend GPUs /clocks shows (clocks.gpu_clocks)."""
    host = hostname or socket.gethostname()
    now = gpu_clocks(config, under_load)["gpus"]
    loaded = gpu_clocks(config, True)["gpus"]  # the clocks the energy's busy seconds ran at
    rows = []  # (labels, {field: value}) per GPU
    for gpu, at_load in zip(now, loaded, strict=True):
        i = gpu["index"]
        labels = (f'gpu="{i}",UUID="{gpu_uuid(config, host, i)}",device="nvidia{i}",'
                  f'modelName="Simulated GPU",Hostname="{host}"')
        power = gpu_power_w(config, at_load["sm_clock_mhz"], under_load)
        rows.append((labels, {
            "DCGM_FI_DEV_SM_CLOCK": gpu["sm_clock_mhz"],
            "DCGM_FI_DEV_MAX_SM_CLOCK": gpu["max_sm_clock_mhz"],
            "DCGM_FI_DEV_POWER_USAGE": f"{power:.6f}",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": gpu_energy_mj(
                config, at_load["sm_clock_mhz"], alive_s, busy_s),
            "DCGM_FI_DEV_GPU_UTIL": gpu["utilization_gpu"],
            "DCGM_FI_DEV_FB_USED": FB_USED_MIB,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0}))
    lines = []
    for name, kind, help_text in FIELDS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{labels}}} {values[name]}" for labels, values in rows]
    return "\n".join(lines) + "\n"


def gpu_uuid(config: SimConfig, hostname: str, index: int) -> str:
    """Stable per node, seed and index, shaped like NVIDIA's GPU-<uuid>."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{hostname}/{config.seed}/{index}')}"
