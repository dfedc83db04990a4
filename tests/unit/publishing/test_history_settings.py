"""The smallest change of interest a history is read with (publishing/history.py): each
run's own recorded sweep file for its report, the newest run's for the terminal."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd

from benchledger.publishing.history import sweep_min_change
from benchledger.warehouse.db import insert_frame, migrate
from tests.sweeps import read_doc, toml, variant

DEMO = Path(__file__).resolve().parents[3] / "dags" / "sweeps" / "demo.toml"
START = datetime(2026, 11, 1, tzinfo=UTC)


def _run(i: int, min_change: float | None) -> dict:
    doc = read_doc(DEMO)
    if min_change is not None:
        doc = variant(doc, {"sweep": {"regression_min_change": min_change}})
    text = toml(doc)
    return {"run_id": f"run{i}", "sweep_name": doc["sweep"]["name"], "sweep_toml": text,
            "sweep_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "harness_version": "test", "started_at": START + timedelta(days=i)}


def test_each_run_is_read_with_its_own_setting_and_the_terminal_with_the_newest():
    con = duckdb.connect(":memory:")
    migrate(con)
    runs = [_run(1, None), _run(2, 0.05), _run(3, 0.02)]
    insert_frame(con, "runs", pd.DataFrame(runs))
    name = runs[0]["sweep_name"]
    assert sweep_min_change(con, name, "run1") == 0.0  # the key absent: the default
    assert sweep_min_change(con, name, "run2") == 0.05
    assert sweep_min_change(con, name) == 0.02  # the newest run's
    assert sweep_min_change(con, "no-such-sweep") == 0.0  # nothing recorded (an import)
