"""Loading one run's raw files: one transaction, rows tagged with their file, second
versions of a window recorded but not loaded, observations as rows.

Raw files are written by the project's own writers (benchledger.restart.steps).
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from benchledger.client import WindowResult
from benchledger.raw.layout import Attempt, RunLayout, read_json
from benchledger.restart.window_write import write_window
from benchledger.warehouse.db import WarehouseError, connect
from benchledger.warehouse.load import load_run_dir
from tests.synthetic import RUN_ID, accounting, request_row, seal_as_a_step, write_as_a_step
from tests.unit.warehouse.test_warehouse import write_run


def window_manifests(layout: RunLayout) -> list:
    return sorted(p for p in layout.run_dir.glob("*/r*/*-c*.json")
                  if not p.name.endswith(".observed.json"))


def test_every_request_row_carries_the_sha256_of_its_own_file(tmp_path):
    layout = write_run(tmp_path)
    con = connect(":memory:")
    assert load_run_dir(con, layout.run_dir)["requests"] == 12
    expected = []
    for manifest_path in window_manifests(layout):
        manifest = read_json(manifest_path)
        ids = pq.read_table(manifest_path.parent / manifest["requests_file"],
                            columns=["request_id"]).column(0).to_pylist()
        expected += [(i, manifest["requests_file_sha256"]) for i in ids]
    assert len({sha for _, sha in expected}) == 2
    loaded = con.execute("SELECT request_id, raw_file_sha256 FROM request_records "
                         "ORDER BY request_id").fetchall()
    assert loaded == sorted(expected)
    files = con.execute("SELECT sha256, rows FROM raw_files WHERE kind = 'requests' "
                        "ORDER BY sha256").fetchall()
    assert files == sorted((sha, 6) for sha in {sha for _, sha in expected})


def test_a_refusal_in_the_last_window_leaves_nothing_of_the_run(tmp_path):
    layout = write_run(tmp_path)
    last = window_manifests(layout)[-1]
    parquet = last.parent / read_json(last)["requests_file"]
    pq.write_table(pq.read_table(parquet).slice(0, 2), parquet)  # not what the manifest says
    con = connect(":memory:")
    with pytest.raises(WarehouseError, match=f"{parquet}: sha256 .* does not match"):
        load_run_dir(con, layout.run_dir)
    for table in ("runs", "restarts", "windows", "request_records", "raw_files",
                  "server_metrics"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)], table


def test_a_second_version_of_a_loaded_window_is_recorded_and_not_loaded(tmp_path):
    layout = write_run(tmp_path)
    con = connect(":memory:")
    load_run_dir(con, layout.run_dir)
    before = con.execute("SELECT request_id, t_last_ns FROM request_records "
                         "ORDER BY request_id").fetchall()

    # a retried step writes window r1 again, with other timings
    window_id = layout.window_id("a", 1, "code", 1)
    rows = [request_row(window_id, i, decode_s=2.0, submit_s=100 + i * 10) for i in range(5)]
    manifest = write_window(layout, "a", 1, "code", "code", 5,
                            WindowResult(rows=rows, accounting=accounting(window_id, rows)))

    counts = load_run_dir(con, layout.run_dir)
    assert counts["windows"] == counts["requests"] == counts["observations"] == 0
    assert con.execute("SELECT request_id, t_last_ns FROM request_records "
                       "ORDER BY request_id").fetchall() == before
    superseded = con.execute("SELECT kind, sha256, rows FROM raw_files "
                             "WHERE kind LIKE '%-superseded' AND kind <> 'run-superseded' "
                             "ORDER BY kind").fetchall()
    # (its observations file says the same as the first one's: already loaded, not listed)
    assert [(k, r) for k, _, r in superseded] == [("requests-superseded", 0),
                                                  ("window-superseded", 0)]
    assert superseded[0][1] == manifest["requests_file_sha256"]
    assert set(load_run_dir(con, layout.run_dir).values()) == {0}  # and only once


def test_two_manifests_of_one_window_in_one_folder_are_refused(tmp_path):
    layout = write_run(tmp_path)
    first, second = window_manifests(layout)
    second.write_text(first.read_text().replace('"code-c1.parquet"', '"../r0/code-c1.parquet"'))
    seal_as_a_step(second)  # what is tested here: two manifests of one window
    con = connect(":memory:")
    with pytest.raises(WarehouseError, match="both describe window"):
        load_run_dir(con, layout.run_dir)


def test_observations_become_metric_log_and_clock_rows(tmp_path):
    layout = RunLayout(tmp_path / "data", RUN_ID)
    write_run(tmp_path)
    window_id = layout.window_id("a", 0, "code", 1)
    rows = [request_row(window_id, i) for i in range(5)]
    observations = {
        "metrics": {phase: {"scraped_at": f"2026-11-30T00:0{i}:00+00:00",
                            "text": f"vllm:generation_tokens_total {100 * (i + 1)}\n"
                                    f'vllm:num_requests_running{{model="m"}} {i}\n'}
                    for i, phase in enumerate(("before", "after"))},
        "log": {"lines": ["INFO starting",
                          "Avg prompt throughput: 12.5 tokens/s, Avg generation throughput: "
                          "40.0 tokens/s, Running: 3 reqs",
                          "SpecDecoding metrics: Mean acceptance length: 2.50, Accepted "
                          "throughput: 30.0 tokens/s, Drafted throughput: 45.0 tokens/s"]},
        "clocks": {"node": "n1", "source": "nvidia-smi", "samples": [
            {"index": 0, "sampled_at": "2026-11-30T00:00:30+00:00", "sm_clock_mhz": 1800.0,
             "max_sm_clock_mhz": 1980.0, "pstate": "P0", "throttle_reasons": None,
             "utilization_gpu": 0.0}]},
    }
    manifest = write_window(layout, "a", 0, "code", "code", 5,
                            WindowResult(rows=rows, accounting=accounting(window_id, rows)),
                            observations)
    con = connect(":memory:")
    counts = load_run_dir(con, layout.run_dir)
    assert counts["observations"] == 4 + 2 + 1
    sha = manifest["observed_file_sha256"]
    assert con.execute(
        "SELECT phase, name, labels, value, scraped_at = ?::TIMESTAMPTZ, raw_file_sha256 = ? "
        "FROM server_metrics WHERE window_id = ? ORDER BY phase, name",
        ["2026-11-30T00:01:00+00:00", sha, window_id]).fetchall() == [
        ("after", "vllm:generation_tokens_total", "{}", 200.0, True, True),
        ("after", "vllm:num_requests_running", '{"model": "m"}', 1.0, True, True),
        ("before", "vllm:generation_tokens_total", "{}", 100.0, False, True),
        ("before", "vllm:num_requests_running", '{"model": "m"}', 0.0, False, True)]
    assert con.execute(
        "SELECT line_no, kind, prompt_tok_s, generation_tok_s, running_reqs, "
        "mean_acceptance_length, accepted_tok_s, drafted_tok_s FROM server_log_lines "
        "WHERE window_id = ? ORDER BY line_no", [window_id]).fetchall() == [
        (1, "throughput", 12.5, 40.0, 3.0, None, None, None),
        (2, "spec_decode", None, None, None, 2.5, 30.0, 45.0)]
    assert con.execute(
        "SELECT node, gpu, sampled_at = '2026-11-30T00:00:30+00:00'::TIMESTAMPTZ, "
        "sm_clock_mhz, pstate, throttle_reasons, under_load, restart_id FROM node_clocks"
    ).fetchall() == [("n1", 0, True, 1800.0, "P0", None, False, layout.restart_id("a", 0))]


def test_raw_files_from_before_attempts_were_recorded_load_with_nulls(tmp_path):
    """Manifests written before issue #12 have no attempt, worker or requested node: their
    rows load, with NULL (not recorded) there, never a guess."""
    layout = write_run(tmp_path)
    for path in window_manifests(layout):
        manifest = read_json(path)
        assert {"attempt", "worker_hostname"} <= set(manifest)
        write_as_a_step(path, {k: v for k, v in manifest.items()
                          if k not in ("attempt", "worker_hostname")})
    restart_manifest = read_json(layout.restart_manifest("a", 0))
    assert not {"requested_node", "worker_hostname", "interrupted_windows"} & set(
        restart_manifest)
    con = connect(":memory:")
    assert load_run_dir(con, layout.run_dir)["windows"] == 2
    assert con.execute("SELECT DISTINCT attempt, worker_hostname FROM windows").fetchall() == [
        (None, None)]
    assert con.execute("SELECT DISTINCT requested_node, worker_hostname, interrupted_windows "
                       "FROM restarts").fetchall() == [(None, None, None)]


def test_attempts_workers_and_interrupted_windows_are_loaded(tmp_path):
    layout = write_run(tmp_path)
    interrupted = [{"window_id": layout.window_id("a", 0, "code", 1), "attempt": 1,
                    "started_at": "2026-11-30T00:00:00+00:00", "worker_hostname": "edge-1",
                    "noticed_by": "measure attempt 2"}]
    path = layout.restart_manifest("a", 0)
    write_as_a_step(path, {**read_json(path), "requested_node": "gpu-a",
                      "worker_hostname": "edge-1", "interrupted_windows": interrupted})
    window_id = layout.window_id("a", 0, "code", 1)
    rows = [request_row(window_id, i) for i in range(5)]
    write_window(layout, "a", 0, "code", "code", 5,
                 WindowResult(rows=rows, accounting=accounting(window_id, rows)),
                 attempt=Attempt(2, "edge-2"))
    con = connect(":memory:")
    load_run_dir(con, layout.run_dir)
    assert con.execute("SELECT restart_index, requested_node, worker_hostname, "
                       "interrupted_windows FROM restarts ORDER BY 1").fetchall() == [
        (0, "gpu-a", "edge-1", json.dumps(interrupted, sort_keys=True)),
        (1, None, None, None)]
    assert con.execute("SELECT window_id, attempt, worker_hostname FROM windows "
                       "ORDER BY 1").fetchall() == [
        (window_id, 2, "edge-2"), (layout.window_id("a", 1, "code", 1), None, None)]
    # JSON, so an auditor can unnest it
    assert con.execute("SELECT interrupted_windows->0->>'noticed_by' FROM restarts "
                       "WHERE restart_index = 0").fetchone() == ("measure attempt 2",)
