"""The demo publishes what it published before the code was reorganised (issue #20).

tests/fixtures/demo_snapshot.json.gz was written from a run of the demo at commit e67239b,
before the split of client, gate, derivation, raw layout and CLI (`python -m
tests.demo_snapshot WAREHOUSE DATA_DIR --write tests/fixtures/demo_snapshot.json.gz`).
Issue #21 added to each entry, from a later demo run, what the ruler's two rules say when
every window's client lag is within its bound: their results in the explain texts, n_burst
(0) and max_burst_fraction (0.1), and the client lag and CPU share (compared by presence).
Issue #22 added, from another demo run, the results of counters_readable and
streams_not_buffered (all passing) in the explain texts and usage_plausible's new expected
text (output_tokens >= chunks); everything else is still that first run's.
This test runs the demo the way `make demo` does (`benchledger run` on the bundled sweep,
same seeds) and compares: every entry's labels, counts, publishability and blocks, every
verdict, and the whole `benchledger explain` text of every entry must be the same; values
that come from the machine's timing must be within their usual spread
(tests/demo_snapshot.py says which and how).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.demo_snapshot import differences, read_fixture, snapshot

pytestmark = pytest.mark.integration


def test_the_demo_publishes_what_it_published_before(tmp_path):
    warehouse, data = tmp_path / "warehouse.duckdb", tmp_path / "data"
    run = subprocess.run(
        [sys.executable, "-m", "benchledger.cli", "run", str(REPO / "dags/sweeps/demo.toml"),
         "--warehouse", str(warehouse), "--data-dir", str(data)],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    found = snapshot(warehouse, data.resolve())
    expected = read_fixture()
    assert len(found["entries"]) == len(expected["entries"]) == 198
    assert sum(e["publishable"] for e in found["entries"].values()) == 192
    assert differences(expected, found) == []
