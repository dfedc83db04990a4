"""Pretend GPU clocks, shaped like ``nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,
pstate,clocks_throttle_reasons.active,utilization.gpu``.

Under load (any request in the engine) every GPU runs at sm_clock_mhz in P0 at 100%
utilization; idle GPUs clock down to idle_sm_clock_mhz in P8 at 0% (as real GPUs do, which
is why a harness must sample clocks under load). Low-clock mode models a node whose GPU
low_clock_gpu (default 0) stays at low_clock_mhz under load while reporting no throttle
reason; the engine runs that much slower (SimConfig.clock_slowdown). Throttle reasons are
always reported as none.
"""

from __future__ import annotations

from typing import Any

from benchledger.simulator.options import SimConfig

NO_THROTTLE_REASONS = "0x0000000000000000"  # clocks_throttle_reasons.active: none


def gpu_clocks(config: SimConfig, under_load: bool) -> dict[str, Any]:
    """The /clocks body: one entry per GPU, in index order."""
    gpus = []
    for index in range(config.num_gpus):
        if not under_load:
            clock, pstate, utilization = config.idle_sm_clock_mhz, "P8", 0
        elif index == config.low_clock_gpu:
            clock, pstate, utilization = config.load_clock_mhz, "P0", 100
        else:
            clock, pstate, utilization = config.sm_clock_mhz, "P0", 100
        gpus.append({"index": index, "sm_clock_mhz": clock,
                     "max_sm_clock_mhz": config.max_sm_clock_mhz, "pstate": pstate,
                     "throttle_reasons": NO_THROTTLE_REASONS, "utilization_gpu": utilization})
    return {"gpus": gpus}


def clock_summary(config: SimConfig) -> str:
    """The effective clock settings, for the startup log line."""
    summary = (f"num_gpus={config.num_gpus} sm_clock_mhz={config.sm_clock_mhz} "
               f"max_sm_clock_mhz={config.max_sm_clock_mhz} "
               f"idle_sm_clock_mhz={config.idle_sm_clock_mhz}")
    if config.low_clock:
        summary += (f" low_clock=on (GPU {config.low_clock_gpu} at {config.low_clock_mhz} MHz "
                    f"under load, no throttle reason; steps {config.clock_slowdown:.3f}x "
                    f"slower)")
    else:
        summary += " low_clock=off"
    return summary
