"""Whole sweeps through Airflow dag.test() into a temporary DuckDB file (`benchledger run`).

Two sweeps on one data dir (each with its own Airflow home and metadata DB):
- a passing sweep: a speculative simulator arm with two restarts, and an `external` arm
  pointing at a simulator the test started itself (checked against its own /metrics);
- a failing sweep: a simulator that reports no usage, and a "server" that never
  becomes healthy.
"""

from __future__ import annotations

import json
import re

import duckdb
import httpx
import pytest

from benchledger.cli import main as cli_main
from benchledger.client.probe import PROBE_MAX_TOKENS
from benchledger.local.run import execute_sweep
from tests import sweeps
from tests.sweeps import write_sweep

pytestmark = pytest.mark.integration


def generation_tokens(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=5).text
    return sum(float(m.group(1)) for m in
               re.finditer(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$", text, re.M))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("pipeline")


@pytest.fixture(scope="module")
def external_server():
    from tests.conftest import start_simulator, stop_process_group

    proc, base = start_simulator("--speculative", "--seed", "7")
    yield base
    stop_process_group(proc)


@pytest.fixture(scope="module")
def passing_run(workdir, external_server):
    sweep = write_sweep(workdir / "good.toml", sweeps.sweep(
        # the simulator logs each request's X-Request-Id, as vLLM's --enable-log-requests
        "it-good", [sweeps.simulator_arm("spec", {"speculative": True, "log_requests": True}),
                    sweeps.external_arm("ext", external_server, speculative=True)],
        defaults=sweeps.defaults(), workloads=["code", "prose"]))
    before = generation_tokens(external_server)
    warehouse = workdir / "wh.duckdb"
    outcome = execute_sweep(sweep, warehouse, workdir / "data", publish=True)
    assert outcome.not_published is None, outcome.not_published
    run_id, state = outcome.run_id, outcome.state
    after = generation_tokens(external_server)
    return {"run_id": run_id, "state": state, "warehouse": warehouse,
            "external_generated": after - before}


@pytest.fixture(scope="module")
def failing_run(workdir, passing_run):
    sweep = write_sweep(workdir / "bad.toml", sweeps.sweep(
        "it-bad", [sweeps.simulator_arm("nousage", {"usage": False}),
                   sweeps.command_arm("dead", "python3 -c 'import time; time.sleep(120)'",
                                      ready_timeout_s=3)],
        defaults=sweeps.defaults(requests=5, warmup=0, restarts=1, max_tokens=8)))
    outcome = execute_sweep(sweep, passing_run["warehouse"], workdir / "data")
    run_id, state = outcome.run_id, outcome.state
    return {"run_id": run_id, "state": state, "warehouse": passing_run["warehouse"]}


def query(warehouse, sql, params=None):
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_passing_sweep_publishes_every_arm_and_workload(passing_run):
    assert passing_run["state"] == "success"
    rows = query(passing_run["warehouse"],
                 "SELECT arm, workload, metric, value, ci95_low, ci95_high, n_requests, "
                 "n_restarts FROM published_entries WHERE run_id = ? AND statistic = 'mean' "
                 "AND scope = 'single_stream' AND metric IN ('decode_rate', 'ttft', 'e2e_rate')",
                 [passing_run["run_id"]])
    cells = {(a, w, m) for a, w, m, *_ in rows}
    assert cells == {(a, w, m) for a in ("spec", "ext") for w in ("code", "prose")
                     for m in ("decode_rate", "ttft", "e2e_rate")}
    for arm, _, _, value, low, high, n, restarts in rows:
        assert low < value < high
        assert (n, restarts) == ((30, 2) if arm == "spec" else (15, 1))


def test_speculative_tokens_come_from_usage_not_chunks(passing_run):
    (tpc, missing), = query(
        passing_run["warehouse"],
        "SELECT avg(output_tokens / chunks), count(*) FILTER (token_source <> 'usage') "
        "FROM requests r JOIN windows w USING (window_id) "
        "WHERE w.run_id = ? AND w.arm = 'spec' AND NOT is_warmup", [passing_run["run_id"]])
    assert tpc > 1.5 and missing == 0


def test_external_arm_tokens_match_the_servers_own_counter(passing_run):
    (delivered, restarts), = query(
        passing_run["warehouse"],
        "SELECT sum(r.output_tokens), count(DISTINCT w.restart_id) FROM requests r "
        "JOIN windows w USING (window_id) WHERE w.run_id = ? AND w.arm = 'ext'",
        [passing_run["run_id"]])
    assert restarts == 1
    # and the one probe request `run` sent it before anything ran (benchledger.client.probe:
    # its max_tokens, which the simulator always fills)
    assert delivered + PROBE_MAX_TOKENS == passing_run["external_generated"] > 0
    (single, status), = query(passing_run["warehouse"],
                              "SELECT single_instance, status FROM restarts "
                              "WHERE run_id = ? AND arm = 'ext'", [passing_run["run_id"]])
    assert single and status == "external"


def test_every_request_row_names_the_request_the_server_logged(passing_run, workdir):
    """X-Request-Id: each row's request_id went out with its request, so the server's own
    records (its request log here, vLLM's log and traces alike) find it; calibration
    requests, which are no rows, go out under ids of their own."""
    ids = [r[0] for r in query(passing_run["warehouse"], """
        SELECT r.request_id FROM request_records r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.arm = 'spec'""", [passing_run["run_id"]])]
    assert ids and len(set(ids)) == len(ids)
    assert all(i.startswith(passing_run["run_id"] + "/spec/r") for i in ids), ids[:3]
    logs = [log for log in (workdir / "data").rglob("server.log")
            if log.parent.parent.name == "spec"]  # <run>/spec/r<k>/server.log
    logged = {m.group(1) for log in logs for m in re.finditer(
        r"Received request (?:chat)?cmpl-(\S+): ", log.read_text())}
    assert logs and set(ids) <= logged, sorted(set(ids) - logged)[:3]
    assert all(re.search(r"/c\d{4}$", other) for other in logged - set(ids))


def test_every_answer_is_digested_and_at_temperature_0_one_per_prompt(passing_run):
    """Issue #42: what came back, loaded like every other column. The simulator's greedy
    text is a function of the prompt, speculation or not (lossless): each prompt has one
    answer across both arms and every restart. The texts stay out (keep_output_text off)."""
    per_prompt = query(passing_run["warehouse"], """
        SELECT r.prompt_sha256, count(DISTINCT r.answer_sha256), min(r.answer_chars),
               count(r.answer_text), count(DISTINCT w.arm), count(*) - count(r.answer_sha256)
        FROM requests r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND r.status = 'completed' GROUP BY r.prompt_sha256""",
                       [passing_run["run_id"]])
    assert len(per_prompt) > 5
    assert {(answers, kept, missing) for _, answers, _, kept, _, missing in per_prompt} == {
        (1, 0, 0)}, per_prompt
    assert min(chars for _, _, chars, _, _, _ in per_prompt) > 0
    assert max(arms for *_, arms, _ in per_prompt) == 2  # the same prompts, both arms


def test_every_rule_result_is_a_validation_row(passing_run):
    rules = query(passing_run["warehouse"],
                  "SELECT DISTINCT expectation FROM validations WHERE run_id = ?",
                  [passing_run["run_id"]])
    from benchledger.rules import BY_NAME

    # No comparisons in this sweep: every other rule of the catalogue ran.
    assert {r for r, in rules} == {n for n, rule in BY_NAME.items()
                                   if rule.applies_to != "comparison"}


def test_missing_usage_and_dead_server_block_their_arms(failing_run):
    assert failing_run["state"] == "failed"  # the DAG run fails visibly
    wh, run_id = failing_run["warehouse"], failing_run["run_id"]
    assert query(wh, "SELECT count(*) FROM published_entries WHERE run_id = ?", [run_id]) == [(0,)]
    sources = query(wh, "SELECT DISTINCT token_source FROM requests r JOIN windows w "
                        "USING (window_id) WHERE w.run_id = ? AND w.arm = 'nousage'", [run_id])
    assert sources == [("missing",)]
    blocked = dict(query(wh, "SELECT arm, string_agg(blocked_by, ' | ') FROM entries "
                             "WHERE run_id = ? GROUP BY arm", [run_id]))
    assert "token_source_is_usage" in blocked["nousage"] and "'missing'" in blocked["nousage"]
    assert "restart_healthy" in blocked["dead"] and "windows_present" in blocked["dead"]
    (status, error, stop_status, stopped_at), = query(
        wh, "SELECT status, error, stop_status, stopped_at FROM restarts "
            "WHERE run_id = ? AND arm = 'dead'", [run_id])
    assert status == "failed" and "not healthy after 3 s" in error
    assert stopped_at is not None and "SIGTERM" in stop_status  # the teardown ran


def test_loading_the_same_raw_files_twice_adds_nothing(passing_run, workdir):
    from benchledger.raw.layout import RunLayout
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.load import load_run_dir

    con = connect(passing_run["warehouse"])
    try:
        before = con.execute("SELECT count(*) FROM request_records").fetchall()
        counts = load_run_dir(con, RunLayout(workdir / "data", passing_run["run_id"]).run_dir)
        after = con.execute("SELECT count(*) FROM request_records").fetchall()
    finally:
        con.close()
    assert set(counts.values()) == {0}
    assert before == after


def test_sql_and_publish_commands(passing_run, workdir, capsys):
    wh = str(passing_run["warehouse"])
    assert cli_main(["sql", "--warehouse", wh, "SELECT count(*) AS n FROM published_entries"]) == 0
    assert cli_main(["sql", "--warehouse", wh, "DELETE FROM entries"]) == 2
    assert "read-only" in capsys.readouterr().err
    assert query(wh, "SELECT count(*) FROM entries") != [(0,)]
    out = workdir / "export"
    assert cli_main(["publish", "--warehouse", wh, "--out", str(out),
                     "--run", passing_run["run_id"]]) == 0
    exported = json.loads((out / "entries.json").read_text())
    published = query(wh, "SELECT entry_id FROM published_entries WHERE run_id = ?",
                      [passing_run["run_id"]])
    assert sorted(e["entry_id"] for e in exported) == sorted(e for e, in published)


def test_the_publish_dag_exported_the_run(passing_run, workdir):
    from benchledger.raw.layout import RunLayout

    out = RunLayout(workdir / "data", passing_run["run_id"]).export_dir
    assert {"entries.json", "report.html", "MANIFEST.sha256"} <= {p.name for p in out.iterdir()}
    # the run's Data Docs stay with its data: their pages load from public CDNs, and a
    # publication opens offline
    assert not (out / "gx-data-docs").exists()
    docs = RunLayout(workdir / "data", passing_run["run_id"]).data_docs_dir
    assert (docs / "index.html").exists()
    exported = {e["entry_id"] for e in json.loads((out / "entries.json").read_text())}
    published = query(passing_run["warehouse"], "SELECT entry_id FROM published_entries "
                                                "WHERE run_id = ?", [passing_run["run_id"]])
    assert exported == {e for e, in published}
