"""Issue #26: the example sweep of each workload kind (docs/workloads/) parses and
prepares, and a bad dataset stops `benchledger run` before Airflow starts, naming the
file, the line and what is wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchledger.local.run import CliError, execute_sweep
from benchledger.restart.workload_files import (
    check_run_workloads,
    items_needed,
    prepare_run_workloads,
)
from benchledger.sweep.spec import load_sweep

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "workloads"


def test_there_is_an_example_of_every_kind():
    kinds = {load_sweep(path).workloads[0].kind for path in EXAMPLES.glob("*.toml")}
    assert kinds == {"builtin", "dataset", "synthetic", "trace"}
    shapes = {path.stem for path in EXAMPLES.glob("*.toml")}
    assert {"shared_prefix", "multi_turn", "reasoning"} <= shapes


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_each_example_prepares(path, tmp_path):
    sweep = load_sweep(path)
    check_run_workloads(sweep, path.parent)
    recorded = prepare_run_workloads(tmp_path, sweep, path.parent)
    for workload in sweep.workloads:
        if workload.kind == "builtin":
            assert workload.name not in recorded
            continue
        entry = recorded[workload.name]
        assert (tmp_path / entry["file"]).is_file()
        assert entry["provenance"]["kind"] == workload.kind
        assert entry["provenance"]["items"] == items_needed(sweep, workload)


def test_a_bad_dataset_stops_the_run_before_airflow(tmp_path):
    sweep = tmp_path / "sweep.toml"
    shutil.copy(EXAMPLES / "dataset.toml", sweep)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.jsonl").write_text(
        '{"id": "a", "prompt": "fine"}\n{"id": "b", "promt": "typo"}\n')
    with pytest.raises(CliError, match=r"prompts\.jsonl.*line 2.*prompt"):
        execute_sweep(sweep, tmp_path / "wh.duckdb", tmp_path / "data-dir")
    assert not (tmp_path / "data-dir").exists()  # nothing started, nothing written
