"""GX's import-time INFO lines (one per function its docs decorator skips) stay out of the
logs: the gate imports GX through import_gx. In a fresh interpreter, as a task's is:
once GX is imported in this one, importing it again logs nothing either way."""

from __future__ import annotations

import subprocess
import sys

NOISE = "Skipping registering function"


def _stderr_of(code: str) -> str:
    done = subprocess.run([sys.executable, "-c",
                           "import logging; logging.basicConfig(level=logging.INFO); " + code],
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stderr


def test_a_plain_import_logs_the_noise():
    # the control: without it, the test below would pass for a GX that no longer logs
    assert _stderr_of("import great_expectations").count(NOISE) > 10


def test_import_gx_does_not():
    stderr = _stderr_of("from benchledger.expectations.gate import import_gx; import_gx()")
    assert NOISE not in stderr
    assert "Multiple declarations of metric" not in stderr
