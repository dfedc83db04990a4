"""A starved measurement client, for the ruler's pipeline test (issue #21).

On PYTHONPATH, Python imports this at the start of every process of a run, the Airflow
task processes included. Once benchledger.client.window is imported, its windows whose id
contains BENCHLEDGER_TEST_STARVE (an arm's name between slashes) are measured with a hook
in the event loop that keeps it busy for BUSY_S out of every BUSY_S + GAP_S: a client
starved of its core, as hundreds of streams on one core starve it. Nothing else changes.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time

BUSY_S, GAP_S = 0.02, 0.005
STARVED = os.environ.get("BENCHLEDGER_TEST_STARVE")


def _starve(module) -> None:
    real = module.drive_part

    async def drive_part(http, target, spec, is_warmup, share, start_ns=None, progress=None):
        import asyncio

        if is_warmup or f"/{STARVED}/" not in spec.window_id:
            return await real(http, target, spec, is_warmup, share, start_ns, progress)
        loop = asyncio.get_running_loop()

        def busy():
            end = time.perf_counter() + BUSY_S
            while time.perf_counter() < end:
                pass
            handle[0] = loop.call_later(GAP_S, busy)

        handle = [loop.call_later(GAP_S, busy)]
        try:
            return await real(http, target, spec, is_warmup, share, start_ns, progress)
        finally:
            handle[0].cancel()

    module.drive_part = drive_part


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "benchledger.client.window":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _starve(module)

        spec.loader.exec_module = exec_module
        return spec


if STARVED:
    sys.meta_path.insert(0, _AfterImport())
