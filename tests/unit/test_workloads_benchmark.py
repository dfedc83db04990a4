"""benchmarks/workload_prepare.py still runs and reports every case (at a small size)."""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.workload_prepare import CASES
from tests.conftest import REPO


def test_the_workload_benchmark_reports_every_case(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "workload_prepare.py"), "--rows", "300",
         "--items", "200", "--render", "50", "--render-tokens", "1000", "--dir", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, "exactly one JSON line"
    report = json.loads(lines[0])
    assert (report["rows"], report["items"], report["render"]) == (300, 200, 50)
    assert set(report["cases"]) == set(CASES)
    for name, case in report["cases"].items():
        assert case["peak_rss_mib"] >= case["rss_after_imports_mib"] > 20, name
        if name.startswith("render"):
            assert case["prompts"] == 50 and 0 < case["us_per_prompt"] < 100_000, name
        else:
            assert case["rows"] == 200 and case["cold_seconds"] > 0, name
            assert case["tracemalloc_peak_mib"] >= 0, name
    assert report["cases"]["render_synthetic"]["words_per_prompt"] == 1000
    assert (tmp_path / "dataset.jsonl").exists() and (tmp_path / "trace.jsonl").exists()
