"""NVIDIA dcgm-exporter's `/metrics` page as one reading per GPU (issue #24, telemetry).

Production clusters run dcgm-exporter on every GPU node (port 9400 by default); its page is
Prometheus text, parsed here with prometheus_client's own parser. One reading per physical
GPU: a GPU in MIG mode prints one row per instance, each repeating the device's clock,
power and energy (read at slightly different moments: 78.174 and 78.446 W on one real
page), so rows are keyed by the device (its `gpu` index and `UUID`), never added up: the
first row's gauges stand, and the largest energy counter (the latest reading).

A field the page does not carry is None, never 0: a vGPU guest reports no power and no
energy, and a default exporter prints neither the clock-event reasons nor the maximum SM
clock nor the power limits (each needs a counters CSV that adds it). Units follow DCGM:
MHz, W, MiB, % and, for the energy counter, mJ since the driver was loaded (converted to J
here). DCGM 4.6's renamed fields in Hz and J are read as well. Nothing here judges whether
a value can be true (a negative power, a counter that jumps): the warehouse does, over a
whole window (view window_energy).
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# field name -> (reading key, factor to the key's unit)
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_SM_CLOCK_HERTZ": ("sm_clock_mhz", 1e-6),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("max_sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ": ("max_sm_clock_mhz", 1e-6),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": ("mem_clock_mhz", 1e-6),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
    "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL": ("energy_j", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_gpu", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_mib", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", 1.0),  # its old name
    # The GPU's power limits (not default fields; a counters CSV adds them): the ceiling
    # the energy plausibility checks hold power and the counter to (view window_energy)
    "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
}
# Keys several rows or fields of one GPU may give: the largest stands (MIG rows read the
# device's counter at their own moments, so the largest is the latest; of the limits, the
# most generous the page claims, so no reading is called impossible by a tighter one)
LARGEST_KEYS = ("energy_j", "power_limit_w")
READING_KEYS = tuple(dict.fromkeys(key for key, _ in FIELDS.values()))

# DCGM_CLOCKS_EVENT_REASON_* bits (dcgm_fields.h; a 1:1 map of NVML's), named as
# dcgm-exporter's clock_event label names them.
CLOCK_EVENT_BITS = {0x1: "gpu_idle", 0x2: "clocks_setting", 0x4: "power_cap",
                    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
                    0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}


class DcgmPageError(ValueError):
    """The page is not a dcgm-exporter page this can read: the message says why."""


def clock_event_names(mask: int | None) -> str | None:
    """'hw_slowdown,power_cap' for a bitmask; '' for 0 (no reason); None where unknown."""
    if mask is None:
        return None
    names = [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_BITS)
    return ",".join(names + ([f"0x{unknown:x}"] if unknown else []))


def _wanted_lines(text: str) -> str:
    """Only the families read here. The exporter prints some fields as text that is no
    number (`ERROR - FAILED TO CONVERT TO STRING` on a real A800 page), which would make
    the parser refuse the whole page for a field nobody asked for."""
    kept = []
    for line in text.splitlines():
        words = line.split(maxsplit=3)
        if line.startswith("#"):
            if len(words) >= 3 and words[1] in ("HELP", "TYPE") and words[2] in FIELDS:
                kept.append(line)
        elif words and words[0].split("{", 1)[0] in FIELDS:
            kept.append(line)
    return "\n".join(kept) + "\n"


def parse_dcgm_page(text: str, source: str = "<dcgm-exporter>") -> list[dict[str, Any]]:
    """One dict per GPU, ordered by its index: `gpu`, `uuid`, `model`, `hostname` and each
    of READING_KEYS (None where the page has no such field for that GPU) plus
    `clock_event_names`. DcgmPageError when the page carries none of FIELDS, or a row has
    no `gpu` label or a value that is not a number."""
    gpus: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        families = list(text_string_to_metric_families(_wanted_lines(text)))
    except ValueError as exc:
        raise DcgmPageError(f"{source}: not Prometheus text: {exc}") from None
    for family in families:
        field = FIELDS[family.name]
        for sample in family.samples:
            # a counter's rows are named <family>_total by the parser; _created ones and
            # other suffixes are not readings
            if sample.name not in (family.name, f"{family.name}_total"):
                continue
            labels = sample.labels
            if "gpu" not in labels:
                raise DcgmPageError(f"{source}: a {sample.name} row has no gpu label: "
                                    f"{labels}")
            device = (labels["gpu"], labels.get("UUID", ""))
            if device not in gpus:
                gpus[device] = _new_gpu(labels, source)
            gpu = gpus[device]
            key, factor = field
            value = sample.value
            if not math.isfinite(value):
                continue  # NaN or Inf: not a reading
            value = int(value) if key == "clock_event_reasons" else value * factor
            if gpu[key] is None:
                gpu[key] = value
            elif key in LARGEST_KEYS:
                gpu[key] = max(gpu[key], value)
            # other fields: the first MIG row's reading of the device stands
    if not gpus:
        raise DcgmPageError(f"{source}: no dcgm-exporter GPU field on the page (looked for "
                            f"{', '.join(sorted(FIELDS))})")
    readings = sorted(gpus.values(), key=lambda gpu: (gpu["gpu"], gpu["uuid"]))
    for gpu in readings:
        gpu["clock_event_names"] = clock_event_names(gpu["clock_event_reasons"])
    return readings


def _new_gpu(labels: dict[str, str], source: str) -> dict[str, Any]:
    try:
        index = int(labels["gpu"])
    except ValueError:
        raise DcgmPageError(f"{source}: gpu label {labels['gpu']!r} is not an index") from None
    return {"gpu": index, "uuid": labels.get("UUID") or None,
            "model": labels.get("modelName") or None,
            # dcgm-exporter's main branch renames Hostname to hostname
            "hostname": labels.get("Hostname") or labels.get("hostname") or None,
            **dict.fromkeys(READING_KEYS)}
