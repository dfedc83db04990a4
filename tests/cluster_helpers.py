"""What the deployment tests share (test_cluster, test_cluster_postgres, test_multi_host):
the small simulator sweep they run, and the check that a deployment's published entries
are what an embedded derivation of the same raw files gives."""

from __future__ import annotations

import textwrap
from pathlib import Path

import duckdb
import pytest

KEY = ["arm", "workload", "metric", "phase", "scope", "concurrency", "numerator", "statistic"]


def sweep_text(name: str, arms: list[tuple[str, str]], schedule: str = "none",
               requests: int = 15, step_ms: float = 2.0, extra: str = "",
               restarts: int = 2, workloads: tuple[str, ...] = ("code",)) -> str:
    """A small sweep: one (arm name, node) per arm, simulator servers."""
    arm_blocks = "".join(textwrap.dedent(f"""
        [[arms]]
        name = "{arm}"
        server = "simulator"
        model = "sim-model"
        node = "{node}"
        [arms.simulator]
        speculative = true
        step_ms = {step_ms}
        """) for arm, node in arms)
    workload_blocks = "".join(f'[[workloads]]\nname = "{w}"\n' for w in workloads)
    return textwrap.dedent(f"""
        [sweep]
        name = "{name}"
        schedule = "{schedule}"
        {extra}
        [defaults]
        requests = {requests}
        warmup = 1
        restarts = {restarts}
        max_tokens = 24
        clock_source = "http"
        clock_url = "{{base_url}}/clocks"
        """) + workload_blocks + arm_blocks


def published_and_embedded(warehouse: Path, run_id: str,
                           run_dir: Path | None = None) -> tuple[list, list]:
    """(the run's published entries in the deployment's warehouse, the same entries from
    an embedded derivation of its raw files: `run_dir`, else the run's folder beside the
    warehouse), each row KEY + value, interval and counts."""
    from benchledger.raw import RunLayout
    from tests.synthetic import derived_warehouse

    cols = ", ".join(KEY + ["value", "ci95_low", "ci95_high", "n_requests", "n_restarts"])
    query = f"SELECT {cols} FROM published_entries WHERE run_id = ? ORDER BY {', '.join(KEY)}"
    with duckdb.connect(str(warehouse), read_only=True) as con:
        deployed = con.execute(query, [run_id]).fetchall()
    embedded = derived_warehouse(run_dir or RunLayout(warehouse.parent / "wh-data",
                                                      run_id).run_dir, run_id)
    try:
        again = embedded.execute(query, [run_id]).fetchall()
    finally:
        embedded.close()
    return deployed, again


def assert_same_entries(deployed: list, again: list) -> None:
    """The same rows and counts; values equal up to the order DuckDB summed them in."""
    assert [row[:len(KEY)] + row[-2:] for row in deployed] == \
        [row[:len(KEY)] + row[-2:] for row in again]
    for mine, theirs in zip(deployed, again, strict=True):
        for a, b in zip(mine[len(KEY):-2], theirs[len(KEY):-2], strict=True):
            assert a == b or (None not in (a, b) and a == pytest.approx(b, rel=1e-12)), mine
