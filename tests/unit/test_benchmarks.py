"""The scale benchmarks still run, report every figure, and measure what the README says;
and the load path they measure keeps its guarantees (sha256 checks, no half file)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchledger.raw.layout import read_json
from benchledger.raw.records import file_sha256
from benchledger.warehouse.db import WarehouseError, connect
from benchledger.warehouse.load import load_run_dir
from benchmarks.answer_digests import main as answer_digests
from benchmarks.synthetic_run import write_scale_run
from benchmarks.warehouse_scale import AUDIT_SECTION, README, STAGES, TABLES, audit_queries
from tests.conftest import REPO
from tests.synthetic import seal_as_a_step, write_as_a_step

STAGE_FIELDS = {"seconds", "import_seconds", "process_seconds", "cpu_seconds",
                "peak_rss_mib", "rss_after_imports_mib", "result"}
TOP_FIELDS = {
    "benchmark", "date", "commit", "subject", "uncommitted", "requests", "requests_asked",
    "runs", "events", "windows_per_run", "warehouse", "kept", "machine", "generate_seconds",
    "raw_runs_reused", "raw_mib_last_run", "stages", "plain_ctas", "load_seconds_all",
    "plain_seconds_all", "load_vs_plain", "peak_rss_mib_max", "rows", "written",
    "warehouse_mib", "prior_runs", "audit_entry_id", "audit_queries", "telemetry", "slos"}
MACHINE_FIELDS = {"nproc", "affinity", "mem_total_gib", "cpu", "python", "duckdb", "pandas",
                  "pyarrow", "great_expectations", "load_average"}


def test_warehouse_scale_reports_every_stage_and_table(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "warehouse_scale.py"), "--requests", "400",
         "--runs", "2", "--repeat", "2", "--dir", str(tmp_path), "--telemetry", "2,2,5"],
        capture_output=True, text=True, cwd=REPO, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, "exactly one JSON line"
    report = json.loads(lines[0])

    assert set(report) == TOP_FIELDS
    assert report["telemetry"] == [2, 2, 5]  # 2 nodes of 2 GPUs, read 5 times a window
    assert set(report["machine"]) == MACHINE_FIELDS
    assert (report["requests"], report["runs"], report["windows_per_run"]) == (400, 2, 20)
    assert report["warehouse"] == str(tmp_path / "warehouse.duckdb") and report["kept"]
    assert set(report["stages"]) == set(STAGES)
    for name, stage in report["stages"].items():
        assert set(stage) == STAGE_FIELDS, name
        assert 0 < stage["seconds"] <= stage["process_seconds"] < 120, name
        assert 20 < stage["peak_rss_mib"] < 4096, name
        assert stage["rss_after_imports_mib"] <= stage["peak_rss_mib"], name
    assert report["stages"]["load"]["result"]["requests"] == 400  # the last run only
    assert report["stages"]["validate"]["result"]["results"] > 0
    assert report["stages"]["derive"]["result"]["entries"] > 0

    # every table counted; the raw ones hold exactly what the writers put on disk
    rows, written = report["rows"], report["written"]
    assert set(rows) == set(TABLES)
    assert written == {"runs": 2, "restarts": 20, "windows": 40, "request_records": 800,
                       "gpu_telemetry": 40 * 2 * 2 * 5, "raw_files": 2 * (1 + 10 + 4 * 20)}
    assert {k: rows[k] for k in written} == written
    assert all(rows[t] > 0 for t in ("validations", "entries", "entry_lineage",
                                     "comparisons"))
    with duckdb.connect(report["warehouse"], read_only=True) as con:
        assert con.execute("SELECT count(*) FROM entries").fetchall()[0][0] == rows["entries"]
        # every window's telemetry gives it energy, and its cells energy entries
        energy = con.execute("SELECT count(*), count(energy_j) FROM window_energy").fetchone()
        assert energy == (40, 40)
        assert con.execute("SELECT count(*) FROM entries WHERE metric = 'energy_per_token' "
                           "AND energy_source = 'energy counter'").fetchone()[0] == 8

    # the yardstick and the ratio, each measured --repeat times
    assert len(report["load_seconds_all"]) == len(report["plain_seconds_all"]) == 2
    assert report["stages"]["load"]["seconds"] == report["load_seconds_all"][-1]
    assert report["load_vs_plain"] == pytest.approx(
        min(report["load_seconds_all"]) / min(report["plain_seconds_all"]), abs=1e-3)
    assert report["plain_ctas"]["seconds"] > 0
    assert report["peak_rss_mib_max"] == max(s["peak_rss_mib"]
                                             for s in report["stages"].values())

    # the earlier run went through every writing stage first
    prior = report["prior_runs"]
    assert prior["runs"] == 1
    assert set(prior["seconds"]) == {"load", "validate", "derive", "compare"}
    assert all(len(v) == 1 and v[0] > 0 for v in prior["seconds"].values())

    # every auditor query of the README, in order, timed on the warehouse
    labels = [label for label, _ in audit_queries()]
    assert [q["query"] for q in report["audit_queries"]] == labels
    assert all(q["seconds"] >= 0 and q["rows"] >= 0 for q in report["audit_queries"])
    behind_entry = report["audit_queries"][-1]
    assert report["audit_entry_id"] != "no entry" and behind_entry["rows"] > 0


def _sql_blocks_of_audit_section() -> list[str]:
    text = README.read_text()
    start = text.index(AUDIT_SECTION)
    section = text[start:text.index("\n## ", start + 1)]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


def test_audit_queries_are_exactly_the_readme_statements():
    """The benchmark times what the README tells auditors to run: DuckDB's own split of
    the section's SQL blocks gives the same statements, each with its comment as label."""
    blocks = _sql_blocks_of_audit_section()
    assert blocks, "README has no ```sql block under 'Auditing with SQL'"
    statements = [s.query for block in blocks for s in duckdb.extract_statements(block)]

    def bare(sql: str) -> str:
        code = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
        return " ".join(code.replace(";", " ").split())

    queries = audit_queries()
    assert len(queries) == len(statements) >= 9
    assert [bare(sql) for _, sql in queries] == [bare(s) for s in statements]
    assert all(label and not label.startswith("-") for label, _ in queries)


def test_audit_queries_read_the_section_not_the_whole_readme(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n```sql\nSELECT 0;\n```\n## Auditing with SQL\n\n```sql\n"
                      "-- one\n-- two lines\nSELECT 1\nFROM t;\n\n-- three\nSELECT 3;\n```\n"
                      "## Layout\n```sql\nSELECT 4;\n```\n")
    assert audit_queries(readme) == [("one two lines", "SELECT 1\nFROM t;"),
                                     ("three", "SELECT 3;")]


# --- the load path the benchmark measures ---------------------------------------------------


def _window_manifest(layout):
    return sorted(p for p in layout.run_dir.glob("*/r*/*-c*.json")
                  if not p.name.endswith(".observed.json"))[0]


def test_load_reads_a_path_with_glob_characters_literally(tmp_path):
    """read_parquet would expand '[x]' as a pattern (and read a sibling folder 'x'): such a
    path is read by pyarrow instead, and only its own rows are loaded."""
    decoy = write_scale_run(tmp_path / "datax", 80, restarts=1, seed=1)
    layout = write_scale_run(tmp_path / "data[x]", 80, restarts=1, seed=2)
    assert decoy.run_dir.name == layout.run_dir.name
    con = connect(":memory:")
    assert load_run_dir(con, layout.run_dir)["requests"] == 80
    loaded = con.execute("SELECT request_id, t_done_ns, raw_file_sha256 FROM request_records "
                         "ORDER BY request_id").fetchall()
    on_disk = []
    for manifest in layout.run_dir.glob("*/r*/*-c*.json"):
        if "observed" not in manifest.name:
            data = read_json(manifest)
            rows = pq.read_table(manifest.parent / data["requests_file"]).to_pylist()
            on_disk += [(r["request_id"], r["t_done_ns"], data["requests_file_sha256"])
                        for r in rows]
    assert loaded == sorted(on_disk)
    assert load_run_dir(con, layout.run_dir)["requests"] == 0  # loaded files add nothing


def test_load_refuses_a_sha_mismatch_and_leaves_no_half_file(tmp_path):
    layout = write_scale_run(tmp_path, 80, restarts=1)
    manifest = _window_manifest(layout)
    parquet = manifest.parent / read_json(manifest)["requests_file"]
    table = pq.read_table(parquet)
    pq.write_table(table.slice(0, 5), parquet)  # the file is not what its manifest says
    con = connect(":memory:")
    with pytest.raises(WarehouseError, match="does not match its window manifest"):
        load_run_dir(con, layout.run_dir)
    assert con.execute("SELECT count(*) FROM request_records WHERE window_id = ?",
                       [read_json(manifest)["window_id"]]).fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM raw_files WHERE path = ?",
                       [str(parquet)]).fetchall() == [(0,)]


def test_load_refuses_a_column_request_records_does_not_have(tmp_path):
    layout = write_scale_run(tmp_path, 80, restarts=1)
    manifest = _window_manifest(layout)
    data = read_json(manifest)
    parquet = manifest.parent / data["requests_file"]
    table = pq.read_table(parquet)
    pq.write_table(table.append_column('x"); DROP TABLE runs; --',
                                       pa.array([0] * table.num_rows)), parquet)
    # sealed as a step would write them: the column check is what is tested here
    seal_as_a_step(parquet)
    write_as_a_step(manifest, {**data, "requests_file_sha256": file_sha256(parquet)})
    con = connect(":memory:")
    with pytest.raises(WarehouseError, match="not columns of request_records"):
        load_run_dir(con, layout.run_dir)
    # the table is still there (the column name was not run as SQL), and the refusal
    # rolled the whole run back
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


# --- the client's timing against a server that knows the truth ------------------------------


def test_timing_errors_pair_a_keys_requests_in_time_order():
    """A warm-up request shares its key with a measured one: each key's requests pair up
    in time order, and only the measured one's errors count."""
    from benchmarks.client_fidelity import in_flight, timing_errors

    ms = 1_000_000
    served = [{"key": "q0", "arrival_ns": 100 * ms, "complete": True,
               "stamps": [110 * ms, 120 * ms, 130 * ms]},
              {"key": "q0", "arrival_ns": 1 * ms, "complete": True,  # the warm-up, earlier
               "stamps": [10 * ms, 20 * ms, 30 * ms]}]
    received = [{"key": "q0", "warmup": False, "t_submit_ns": 99 * ms,
                 "events": [112 * ms, 121 * ms, 135 * ms]},  # +2, +1, +5 ms late
                {"key": "q0", "warmup": True, "t_submit_ns": 0,
                 "events": [50 * ms, 60 * ms, 70 * ms]}]
    errors = timing_errors(received, served)
    assert errors["unmatched_requests"] == 0
    assert (errors["ttft_error_ms"]["n"], errors["ttft_error_ms"]["p50"]) == (1, 2.0)
    # gaps 9 and 14 ms against 10 and 10: errors 1 and 4 ms
    assert (errors["itl_error_ms"]["min"], errors["itl_error_ms"]["max"]) == (1.0, 4.0)
    # a request missing an event is not matched at all
    received[0]["events"] = received[0]["events"][:2]
    assert timing_errors(received, served)["unmatched_requests"] == 1
    # in flight: only the steps of the measured request's span (100 to 130 ms) count
    steps = [[5 * ms, 7], [100 * ms, 1], [120 * ms, 3], [131 * ms, 9]]
    assert in_flight(received, served, steps) == {"max": 3, "median": 1, "mean": 2.0,
                                                  "steps": 2, "arrival_spread_ms": 0.0}


def test_fidelity_summary_leaves_out_disturbed_runs_and_failures_fail_the_check():
    from benchmarks.client_fidelity import checks, summarise

    def run(itl_p50, disturbed):
        return {"ttft_error_ms": {"p50": 1.0, "p99": 2.0}, "itl_error_ms": {"p50": itl_p50,
                "p99": 9.0}, "in_flight": {"max": 256, "median": 256}, "events_per_s": 1,
                "cpu_us_per_event": 1.0, "unmatched_requests": 0, "disturbed": disturbed,
                "others_on_client_core": 0.5 if disturbed else 0.0}

    row = summarise([run(9.0, True), run(1.5, False), run(1.0, False)])
    assert (row["itl_error_ms_p50"], row["runs_disturbed"], row["medians_of"]) == (
        1.0, 1, "undisturbed runs")
    assert checks({"benchledger/s256": row})["s256_in_flight_ge_240_and_itl_p50_lt_2ms"]
    # every run disturbed: the medians of all, said so
    assert summarise([run(9.0, True)])["medians_of"] == "all finished runs"
    failed = summarise([run(1.0, False), {"error": "client exited 1"}])
    assert failed["errors"] == ["client exited 1"]
    assert checks({"benchledger/s256": failed}) == {
        "s256_in_flight_ge_240_and_itl_p50_lt_2ms": False, "s64_itl_p50_lt_1ms": None}


def test_client_fidelity_reports_plausible_errors_for_both_clients(tmp_path):
    script = str(REPO / "benchmarks" / "client_fidelity.py")
    out = subprocess.run(
        [sys.executable, script, "--streams", "1", "4", "--tokens", "10", "--warmup", "1",
         "--repeat", "2", "--quiet-wait", "0", "--out", str(tmp_path / "fidelity.json")],
        capture_output=True, text=True, cwd=REPO, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, "exactly one JSON line"
    report = json.loads(lines[0])
    assert json.loads((tmp_path / "fidelity.json").read_text()) == report
    assert {"benchmark", "date", "commit", "uncommitted", "machine", "client_core",
            "server_core", "step_ms", "tokens_per_request", "checks", "summary",
            "runs"} <= set(report)
    assert report["benchmark"] == "client_fidelity"
    assert {"nproc", "cpu", "python", "httpx", "aiohttp", "uvloop",
            "load_average"} <= set(report["machine"])
    # neither must-show stream count was run: no verdict, rather than a made-up one
    assert report["checks"] == {"s256_in_flight_ge_240_and_itl_p50_lt_2ms": None,
                                "s64_itl_p50_lt_1ms": None}
    assert set(report["summary"]) == {f"{c}/s{n}" for c in ("lean", "benchledger")
                                      for n in (1, 4)}
    assert len(report["runs"]) == 8
    for run in report["runs"]:
        name = f"{run['client']}/s{run['streams']}"
        assert "error" not in run, (name, run.get("error"))
        n = run["streams"]
        assert (run["requests"], run["events"], run["unmatched_requests"]) == (n, 10 * n, 0)
        ttft, itl = run["ttft_error_ms"], run["itl_error_ms"]
        assert (ttft["n"], itl["n"]) == (n, 9 * n), name
        # the client stamps after the server's write, on the same clock; a loaded 2-core
        # machine adds milliseconds, never seconds
        assert 0 <= ttft["min"] <= ttft["p50"] <= ttft["p99"] < 1000, name
        assert 0 <= itl["min"] <= itl["p50"] <= itl["p99"] < 1000, name
        assert 1 <= run["in_flight"]["median"] <= run["in_flight"]["max"] <= n, name
        assert run["events_per_s"] > 0 and run["cpu_us_per_event"] > 0, name
        assert run["client_cores_allowed"] == [report["client_core"]], name
        # the summary's figures are medians of what its undisturbed runs measured (of both
        # where both or neither were: a busy test machine may disturb one)
        summary = report["summary"][name]
        both = [r for r in report["runs"] if (r["client"], r["streams"]) == (run["client"], n)]
        used = [r for r in both if not r["disturbed"]] or both
        assert summary["runs_finished"] == 2 and "errors" not in summary, name
        assert summary["runs_disturbed"] == sum(r["disturbed"] for r in both), name
        assert summary["itl_error_ms_p50"] == min(r["itl_error_ms"]["p50"] for r in used), name
        assert summary["in_flight_max"] in {r["in_flight"]["max"] for r in used}, name
        if run["client"] == "benchledger":
            assert set(run["accounting"]) == {"client_workers", "client_lag_p50_ms",
                                              "client_lag_p99_ms", "client_cpu_share",
                                              "bunched_event_fraction"}
            assert run["window_status"]["completed"] == n

    # the README's table of it: one row per client and stream count
    table = subprocess.run([sys.executable, script, "--table", str(tmp_path / "fidelity.json")],
                           capture_output=True, text=True, cwd=REPO, timeout=60).stdout
    assert [line.split(" | ")[:2] for line in table.splitlines()[2:6]] == [
        ["| 1", "lean"], ["| 1", "benchledger"], ["| 4", "lean"], ["| 4", "benchledger"]]


def test_answer_digests_measures_each_variant_against_none(tmp_path):
    """benchmarks/answer_digests.py (issue #42): the new columns' bytes, greedy answers (a
    digest per prompt) against sampled ones (a digest per row)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert answer_digests(["--requests", "3000", "--prompts", "50",
                               "--dir", str(tmp_path)]) == 0
    report = json.loads(out.getvalue())
    assert report["requests"] == 3000
    for variant in ("none", "greedy", "sampled"):
        rows = duckdb.connect(str(tmp_path / f"{variant}.duckdb"), read_only=True).execute(
            "SELECT count(*), count(DISTINCT answer_sha256) FROM request_records").fetchone()
        assert rows == (3000, {"none": 0, "greedy": 50, "sampled": 3000}[variant]), variant
    greedy, sampled = report["greedy"], report["sampled"]
    assert 0 < greedy["parquet_bytes_per_request_added"] < sampled[
        "parquet_bytes_per_request_added"]
