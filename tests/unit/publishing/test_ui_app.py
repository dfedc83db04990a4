"""The benchledger page's app (publishing/ui_app.py) against a small synthetic warehouse:
what each page shows is what the warehouse holds, a busy or missing warehouse is a message,
and no page ever opens the warehouse for writing. The page inside a real Airflow UI is
tests/integration/cluster/test_cluster.py's."""

from __future__ import annotations

import configparser
import hashlib
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from fastapi import Depends, HTTPException
from fastapi.testclient import TestClient

from benchledger.publishing import ui_app
from benchledger.publishing.history import history
from benchledger.raw.layout import RunLayout
from benchledger.warehouse.compare import derive_comparisons
from benchledger.warehouse.db import connect
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.validate import validate_run
from benchledger.warehouse.writer_waiting import WaitingWriter
from tests.sweeps import command_arm, sweep, write_sweep
from tests.synthetic import RUN_ID, request_row, write_synthetic_run

SWEEP = sweep(
    "ui-cmp",
    [
        command_arm("base", "serve --flavour a --port {port}"),
        command_arm("fast", "serve --flavour b --port {port}"),
        command_arm("fast-again", "serve --flavour b --port {port}"),
    ],
    defaults={"requests": 5, "restarts": 2},
    comparisons=[
        {"a": "fast", "b": "base", "metric": "decode_rate", "control": ["fast", "fast-again"]}
    ],
)
# decode seconds of each restart's requests: base about half as fast; one request of
# base's first restart fails, so base's window falls short of `requests` (blocked)
DECODE_S = {"base": [1.0, 1.02], "fast": [0.5, 0.51], "fast-again": [0.505, 0.5]}


# The sweep's second run, a day later (its history has two points).
NEXT_RUN_ID = "manual__2026-12-01T00:00:00+00:00"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ui")
    path = tmp / "wh.duckdb"
    for run_id, slower in ((RUN_ID, 1.0), (NEXT_RUN_ID, 1.1)):
        layout = RunLayout(tmp / "data", run_id)
        windows = {}
        for arm, per_restart in DECODE_S.items():
            for k, seconds in enumerate(per_restart):
                wid = layout.window_id(arm, k, "code", 1)
                rows = [request_row(wid, i, decode_s=seconds * slower * (1 + 0.01 * i),
                                    status="failed" if (arm, k, i) == ("base", 0, 0)
                                    else "completed") for i in range(5)]
                windows[(arm, k, "code")] = (rows, {})
        write_synthetic_run(tmp, SWEEP, windows, run_id=run_id,
                            config_sha256={"fast": "b", "fast-again": "b"})
        with connect(path) as con:
            load_run_dir(con, layout.run_dir)
            validate_run(con, run_id)
            derive_entries(con, run_id)
            derive_comparisons(con, run_id)
    return path


def rows(warehouse: Path, sql: str, *params) -> list[tuple]:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


@pytest.fixture
def client(warehouse) -> TestClient:
    return TestClient(ui_app.create_app(lambda: [warehouse.resolve()]))


def page(client: TestClient, path: str, **params) -> str:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert "Traceback" not in response.text
    return response.text


def attr(text: str, name: str, table: str) -> list[str]:
    body = re.search(rf"<table id=\"{table}\">(.*?)</table>", text, re.S)
    assert body is not None, table
    return re.findall(rf'{name}="([^"]*)"', body[1])


def cells(text: str, table: str) -> list[list[str]]:
    """The text of each body row's cells."""
    body = re.search(rf"<table id=\"{table}\">.*?<tbody>(.*?)</tbody>", text, re.S)[1]
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell))
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body)]


def test_the_sweeps_list_names_each_sweep_with_its_newest_run(client, warehouse):
    text = page(client, "/")
    (runs, newest), = rows(warehouse, "SELECT count(*), arg_max(run_id, started_at) FROM runs "
                                      "WHERE sweep_name = 'ui-cmp'")
    (published, blocked), = rows(warehouse, "SELECT count(*) FILTER (WHERE publishable), "
                                            "count(*) FILTER (WHERE NOT publishable) "
                                            "FROM current_entries WHERE run_id = ?", newest)
    (row,) = cells(text, "sweeps")
    assert [row[i] for i in (0, 1, 2, 4, 5)] == ["ui-cmp", str(runs), newest, str(published),
                                                 str(blocked)]
    assert runs == 2 and published and blocked
    assert 'href="run?warehouse=' in text and 'href="sweep?warehouse=' in text


def test_a_sweep_page_lists_its_runs_and_their_history(client, warehouse):
    text = page(client, "/sweep", warehouse=str(warehouse), sweep="ui-cmp")
    expected = rows(warehouse, "SELECT run_id FROM runs ORDER BY started_at DESC")
    assert [row[0] for row in cells(text, "runs")] == [r for r, in expected]
    verdicts = rows(warehouse, "SELECT DISTINCT verdict FROM comparisons")
    assert all(verdict in text for verdict, in verdicts)
    with duckdb.connect(str(warehouse), read_only=True) as con:
        lines = history(con, "ui-cmp")
    shown = cells(text, "history")
    assert len(shown) == len(lines) and {row[0] for row in shown} == {RUN_ID, NEXT_RUN_ID}
    assert sorted(row[9] for row in shown) == sorted(lines["change"])
    assert re.search(r"<figure id='history-chart'><svg", text)


def test_a_run_page_shows_its_verdicts_and_published_entries(client, warehouse):
    text = page(client, "/run", warehouse=str(warehouse), run=RUN_ID)
    expected = rows(warehouse, "SELECT comparison_id, verdict FROM comparisons "
                               "WHERE run_id = ? ORDER BY metric, workload, role DESC, a, b, "
                               "comparison_id", RUN_ID)
    assert list(zip(attr(text, "data-comparison-id", "verdicts"),
                    attr(text, "data-verdict", "verdicts"), strict=True)) == expected
    assert {verdict for _, verdict in expected} >= {"no finding"}
    published = rows(warehouse, "SELECT entry_id FROM published_entries WHERE run_id = ?",
                     RUN_ID)
    assert sorted(attr(text, "data-entry-id", "published")) == sorted(e for e, in published)


def test_a_blocked_entry_is_shown_blocked_with_its_rule(client, warehouse):
    text = page(client, "/run", warehouse=str(warehouse), run=RUN_ID)
    blocks = rows(warehouse, "SELECT b.entry_id, b.rule FROM entry_blocks b "
                             "JOIN current_entries e USING (entry_id) WHERE e.run_id = ?",
                  RUN_ID)
    shown = set(zip(attr(text, "data-entry-id", "blocked"), attr(text, "data-rule", "blocked"),
                    strict=True))
    assert shown == set(blocks) and blocks
    entry_id, rule = sorted(blocks)[0]
    entry = page(client, "/entry", warehouse=str(warehouse), entry=entry_id)
    assert "<span class='blocked'>blocked</span>" in entry
    assert f"<span class='blocked'>{rule}</span>" in entry


def test_an_entry_page_shows_its_lineage(client, warehouse):
    entry_id, = rows(warehouse, "SELECT entry_id FROM published_entries WHERE arm = 'fast' "
                                "AND metric = 'decode_rate' AND statistic = 'mean' "
                                "LIMIT 1")[0]
    text = page(client, "/entry", warehouse=str(warehouse), entry=entry_id)
    assert "<span class='published'>published</span>" in text
    windows = rows(warehouse, "SELECT DISTINCT window_id FROM entry_lineage "
                              "WHERE entry_id = ? AND window_id IS NOT NULL", entry_id)
    table = re.search(r'<table id="entry-windows">(.*?)</table>', text, re.S)[1]
    assert sorted(re.findall(r"<td>([^<]*/r\d/[^<]*)</td>", table)) == sorted(
        w for w, in windows) and windows
    files = rows(warehouse, "SELECT w.raw_file_sha256 FROM windows w JOIN entry_lineage l "
                            "USING (window_id) WHERE l.entry_id = ?", entry_id)
    explained = re.search(r"<pre id='explain'>(.*?)</pre>", text, re.S)[1]
    assert files and all(sha in explained for sha, in files)


def _holding_writer(warehouse: Path) -> subprocess.Popen:
    """Another process that holds the warehouse open for writing, as a load does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time\n"
                               f"con = duckdb.connect({str(warehouse)!r})\n"
                               "print('held', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_warehouse_a_run_is_writing_is_busy_reload_not_a_stack_trace(client, warehouse,
                                                                        monkeypatch):
    monkeypatch.setattr(ui_app, "READ_WAIT_S", 0.2)
    holder = _holding_writer(warehouse)
    try:
        for path, params in (("/run", {"warehouse": str(warehouse), "run": RUN_ID}),
                             ("/", {})):
            response = client.get(path, params=params)
            assert response.status_code == (503 if path != "/" else 200)
            assert "Warehouse busy, reload." in response.text
            assert "Traceback" not in response.text and "IOException" not in response.text
    finally:
        holder.kill()
        holder.wait()
    assert page(client, "/run", warehouse=str(warehouse), run=RUN_ID)


def test_a_writer_waiting_for_the_warehouse_is_given_way_at_once(client, warehouse):
    waiting = WaitingWriter(warehouse)
    waiting.hold()
    try:
        response = client.get("/run", params={"warehouse": str(warehouse), "run": RUN_ID})
    finally:
        waiting.release()
    assert response.status_code == 503 and "Warehouse busy, reload." in response.text


def test_a_missing_warehouse_is_a_message(tmp_path):
    missing = (tmp_path / "not-yet.duckdb").resolve()
    client = TestClient(ui_app.create_app(lambda: [missing]))
    assert "no run has been loaded into it yet" in page(client, "/")
    response = client.get("/run", params={"warehouse": str(missing), "run": RUN_ID})
    assert response.status_code == 503 and "no run has been loaded" in response.text
    assert not missing.exists()


def test_only_a_listed_warehouse_is_opened(client, warehouse, tmp_path):
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    response = client.get("/run", params={"warehouse": str(other), "run": RUN_ID})
    assert response.status_code == 404
    assert "is not a warehouse of this deployment" in response.text


def test_no_page_opens_the_warehouse_for_writing(warehouse, monkeypatch):
    opened = []
    real_connect = ui_app.connect

    def spy(path, read_only=False, **kwargs):
        opened.append(read_only)
        return real_connect(path, read_only=read_only, **kwargs)

    monkeypatch.setattr(ui_app, "connect", spy)
    before = hashlib.sha256(warehouse.read_bytes()).hexdigest()
    entry_id, = rows(warehouse, "SELECT entry_id FROM current_entries LIMIT 1")[0]
    warehouse.chmod(0o444)  # a write would fail here
    try:
        client = TestClient(ui_app.create_app(lambda: [warehouse.resolve()]))
        page(client, "/")
        page(client, "/sweep", warehouse=str(warehouse), sweep="ui-cmp")
        page(client, "/run", warehouse=str(warehouse), run=RUN_ID)
        page(client, "/entry", warehouse=str(warehouse), entry=entry_id)
    finally:
        warehouse.chmod(0o644)
    assert opened and all(opened)
    assert hashlib.sha256(warehouse.read_bytes()).hexdigest() == before


def test_pages_are_guarded_and_send_a_visitor_to_the_login(warehouse):
    def not_logged_in():
        raise HTTPException(401, "Not authenticated")

    app = ui_app.create_app(lambda: [warehouse], dependencies=[Depends(not_logged_in)],
                            login_url=lambda request: f"/auth/login?next={request.url.path}")
    response = TestClient(app).get("/run", params={"warehouse": str(warehouse), "run": RUN_ID},
                                   follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303,
                                                                     "/auth/login?next=/run")


def test_the_warehouses_are_those_of_the_installed_sweeps_and_the_setting(tmp_path):
    from benchledger.cluster.run import install_sweep
    from benchledger.sweep.spec import load_sweep

    sweep_file = tmp_path / "ui.toml"
    write_sweep(sweep_file, SWEEP)
    dags = tmp_path / "dags"
    install_sweep(dags, sweep_file, load_sweep(sweep_file), tmp_path / "wh.duckdb",
                  tmp_path / "data")
    (dags / "benchledger_broken.py").write_text("WAREHOUSE = (")
    assert ui_app.warehouses_in_dags(dags) == [tmp_path / "wh.duckdb"]
    listed = ui_app.listed_warehouses(f" {tmp_path}/a.duckdb, {tmp_path / 'wh.duckdb'}", dags)
    assert listed == [(tmp_path / "a.duckdb").resolve(), (tmp_path / "wh.duckdb").resolve()]


def test_cluster_up_installs_the_plugin_that_airflow_registers(tmp_path):
    """The file `cluster up` writes into the deployment's plugins folder, loaded as
    Airflow's API server loads plugins: the pages mounted under /benchledger and a nav
    entry showing them; the folder is the head's (a joining worker's settings lack it)."""
    from airflow._shared.plugins_manager.plugins_manager import (
        _load_plugins_from_plugin_directory,
    )

    from benchledger.cluster.config import install_ui_plugin, write_config, write_join_file

    _, api_url = write_config(tmp_path)
    installed = install_ui_plugin(tmp_path)
    plugins, errors = _load_plugins_from_plugin_directory(str(installed.parent))
    assert errors == {} and [p.name for p in plugins] == ["benchledger"]
    app, = plugins[0].fastapi_apps
    view, = plugins[0].external_views
    assert app["url_prefix"] == "/benchledger"
    assert (view["href"], view["destination"], view["url_route"]) == (
        "/benchledger/", "nav", "benchledger")
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(tmp_path / "airflow.cfg")
    assert cfg["core"]["plugins_folder"] == str(installed.parent)
    joined = json.loads(write_join_file(tmp_path, api_url).read_text())["airflow_cfg"]
    assert "plugins_folder" not in joined["core"]


# --- a run of 203,000 entries: every table paged (issue #39, item 13) --------------------

BIG_ENTRIES, BIG_COMPARISONS, BIG_RUNS, BIG_REQUESTS = 203_000, 1_200, 1_100, 200_000
BIG_RUN = f"big-{BIG_RUNS - 1:05d}"  # the sweep's newest run holds the entries


@pytest.fixture(scope="module")
def big_warehouse(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ui-big") / "big.duckdb"
    build_big_warehouse(path)
    return path


def build_big_warehouse(path: Path) -> None:
    """A hand-made warehouse: one sweep of 1,100 runs, the newest with 203,000 entries (one
    in four blocked, one in eight of those by two rules), 1,200 comparisons, and an entry
    resting on 200,000 requests; made by DuckDB from range(), never row by row
    (benchmarks/ui_pages.py measures its pages)."""
    with connect(path) as con:
        con.execute(f"""
            INSERT INTO runs BY NAME
            SELECT 'big-' || lpad(i::VARCHAR, 5, '0') AS run_id, 'big' AS sweep_name,
                   's' AS sweep_sha256, 'test' AS harness_version, 'rerun' AS evidence,
                   TIMESTAMPTZ '2026-11-01 00:00:00+00' + to_minutes(i) AS started_at
            FROM range({BIG_RUNS}) t(i)""")
        con.execute(f"""
            INSERT INTO entries BY NAME
            SELECT 'e' || lpad(i::VARCHAR, 6, '0') AS entry_id, 'k' || i AS entry_key,
                   '{BIG_RUN}' AS run_id, 'arm-' || i % 4 AS arm, 'code' AS workload,
                   'decode_rate' AS metric, 'tok/s' AS unit, 'decode' AS phase,
                   'single_stream' AS scope, 1 + i % 8 AS concurrency,
                   'c' || (1 + i % 8) AS load_point, 'output_tokens' AS numerator,
                   'mean' AS statistic, 20.0 + i % 97 AS value, 19.0 + i % 97 AS ci95_low,
                   21.0 + i % 97 AS ci95_high, 50 AS n_requests, 3 AS n_restarts,
                   'rerun' AS evidence, i % 4 <> 3 AS publishable,
                   CASE WHEN i % 4 = 3 THEN 'clock_under_load' END AS blocked_by,
                   'test' AS harness_version,
                   TIMESTAMPTZ '2026-11-02 00:00:00+00' AS derived_at
            FROM range({BIG_ENTRIES}) t(i)""")
        con.execute("""
            INSERT INTO entry_blocks BY NAME
            SELECT entry_id, 'clock_under_load' AS rule, 'r0' AS subject,
                   'ratio >= 0.9' AS expected, 'ratio 0.2' AS found
            FROM entries WHERE NOT publishable
            UNION ALL
            SELECT entry_id, 'n_at_least_min', 'w0', 'n >= 5', 'n 3'
            FROM entries WHERE NOT publishable AND concurrency = 8""")
        # the first entry rests on one window of 200,000 requests
        con.execute(f"""
            INSERT INTO windows BY NAME
            SELECT 'w-big' AS window_id, '{BIG_RUN}' AS run_id, 'arm-0' AS arm,
                   'code' AS workload, {BIG_REQUESTS} AS submitted,
                   {BIG_REQUESTS} AS completed, 0 AS failed, 0 AS unresolved,
                   'complete' AS drain_status, 60.0 AS elapsed_s, 5 AS min_requests,
                   'f' AS raw_file_sha256, 'q' AS requests_file_sha256""")
        con.execute(f"""
            INSERT INTO request_records BY NAME
            SELECT 'w-big/m' || lpad(i::VARCHAR, 6, '0') AS request_id,
                   'w-big' AS window_id, i AS seq, false AS is_warmup,
                   'completed' AS status, 21 AS output_tokens, 'usage' AS token_source,
                   'q' AS raw_file_sha256
            FROM range({BIG_REQUESTS}) t(i)""")
        con.execute("INSERT INTO entry_lineage BY NAME "
                    "SELECT 'e000000' AS entry_id, 'w-big' AS window_id")
        con.execute(f"""
            INSERT INTO comparisons BY NAME
            SELECT 'c' || lpad(i::VARCHAR, 5, '0') AS comparison_id, '{BIG_RUN}' AS run_id,
                   'ab' AS role, 'arm-0' AS a, 'arm-1' AS b, 'code' AS workload,
                   'decode_rate' AS metric, 1 + i % 8 AS concurrency,
                   'c' || (1 + i % 8) AS load_point, 1.5 AS difference,
                   'no finding' AS verdict, 'the 95% interval includes 0' AS reason,
                   'test' AS harness_version,
                   TIMESTAMPTZ '2026-11-02 00:00:00+00' AS derived_at
            FROM range({BIG_COMPARISONS}) t(i)""")


@pytest.fixture
def big_client(big_warehouse) -> TestClient:
    return TestClient(ui_app.create_app(lambda: [big_warehouse.resolve()]))


def table_rows(text: str, table: str) -> list[str]:
    body = re.search(rf"<table id=\"{table}\">.*?<tbody>(.*?)</tbody>", text, re.S)[1]
    return re.findall(r"<tr[^>]*>.*?</tr>", body)


def pager_link(text: str, table: str, rel: str) -> str | None:
    """The href of a table's next or previous page (unescaped), None where there is none."""
    pager = re.search(rf"<p class='pager' id='{table}-pager'>(.*?)</p>", text, re.S)
    assert pager is not None, table
    link = re.search(rf'<a href="([^"]*)" rel="{rel}">', pager[1])
    return None if link is None else html.unescape(link[1])


def test_a_run_of_203000_entries_is_one_bounded_page_per_table(big_client, big_warehouse,
                                                               monkeypatch):
    frames = []
    real = ui_app.read.query_frame

    def counting(con, name, **params):
        frames.append((name, len(found := real(con, name, **params))))
        return found

    monkeypatch.setattr(ui_app.read, "query_frame", counting)
    text = page(big_client, "/run", warehouse=str(big_warehouse), run=BIG_RUN)
    bound = 500  # rows of one table on one page
    assert len(text.encode()) < 1_500_000, len(text.encode())  # (before: 70 MB)
    # every read of the page is bounded: never all rows of the run into the server
    assert frames and max(n for _, n in frames) <= bound, frames
    assert bound == ui_app.PAGE_ROWS
    published, blocked = BIG_ENTRIES * 3 // 4, BIG_ENTRIES // 4
    block_rows = blocked + blocked // 2  # the blocked entries at c8 have two rules
    assert len(table_rows(text, "published")) == bound
    assert len(table_rows(text, "blocked")) == bound
    assert len(table_rows(text, "verdicts")) == bound
    assert f"<h2>Published entries ({published:,})</h2>" in text
    assert f"<h2>Blocked entries ({blocked:,})</h2>" in text
    assert f"<h2>Verdicts ({BIG_COMPARISONS:,})</h2>" in text
    assert f"entries 1-500 of {published:,}" in text
    assert f"rows 1-500 of {block_rows:,}" in text
    assert f"verdicts 1-500 of {BIG_COMPARISONS:,}" in text
    assert pager_link(text, "published", "prev") is None


def test_the_next_page_of_a_table_shows_the_next_rows_in_order(big_client, big_warehouse):
    first = page(big_client, "/run", warehouse=str(big_warehouse), run=BIG_RUN)
    following = pager_link(first, "published", "next")
    assert following is not None and following.startswith("run?")
    second = big_client.get("/" + following)
    assert second.status_code == 200
    expected = rows(big_warehouse, "SELECT entry_id FROM published_entries WHERE run_id = ? "
                                   "ORDER BY arm, workload, concurrency, metric, scope, "
                                   "statistic, entry_id", BIG_RUN)
    ids = attr(first, "data-entry-id", "published") + attr(second.text, "data-entry-id",
                                                           "published")
    assert ids == [e for e, in expected[:1000]]
    assert "entries 501-1,000 of 152,250" in second.text
    # the other tables stay where they were; the way back is a link too
    assert attr(second.text, "data-entry-id", "blocked") == attr(first, "data-entry-id",
                                                                 "blocked")
    back = big_client.get("/" + pager_link(second.text, "published", "prev"))
    assert attr(back.text, "data-entry-id", "published") == ids[:500]


def test_the_last_page_ends_the_table_and_a_page_beyond_it_is_refused(big_client,
                                                                      big_warehouse):
    last = -(-BIG_COMPARISONS // ui_app.PAGE_ROWS)
    text = page(big_client, "/run", warehouse=str(big_warehouse), run=BIG_RUN,
                verdicts_page=last)
    assert len(table_rows(text, "verdicts")) == BIG_COMPARISONS - (last - 1) * 500
    assert f"verdicts 1,001-1,200 of {BIG_COMPARISONS:,}" in text
    assert pager_link(text, "verdicts", "next") is None
    beyond = big_client.get("/run", params={"warehouse": str(big_warehouse), "run": BIG_RUN,
                                            "verdicts_page": last + 1})
    assert beyond.status_code == 404
    assert f"verdicts_page {last + 1}: beyond the last page ({last})" in beyond.text
    for bad in ("0", "-1", "two"):
        refused = big_client.get("/run", params={"warehouse": str(big_warehouse),
                                                 "run": BIG_RUN, "published_page": bad})
        assert refused.status_code == 422 and "published_page" in refused.text
        assert "<html" in refused.text  # a page, not a stack trace or bare JSON


def test_a_sweep_of_1100_runs_lists_them_page_by_page(big_client, big_warehouse):
    text = page(big_client, "/sweep", warehouse=str(big_warehouse), sweep="big")
    assert len(text.encode()) < 1_500_000, len(text.encode())  # (before: 84 MB)
    assert len(table_rows(text, "runs")) == ui_app.PAGE_ROWS
    assert f"runs 1-500 of {BIG_RUNS:,}" in text
    # the history's 203,000 headline rows (decode rate means) too, newest run first
    assert len(table_rows(text, "history")) == ui_app.PAGE_ROWS
    assert f"rows 1-500 of {BIG_ENTRIES:,}" in text
    history_next = pager_link(text, "history", "next")
    assert "history_page=2" in history_next and "runs_page=1" in history_next
    assert cells(text, "runs")[0][0] == BIG_RUN  # newest first
    third = big_client.get("/" + pager_link(
        big_client.get("/" + pager_link(text, "runs", "next")).text, "runs", "next"))
    assert f"runs 1,001-1,100 of {BIG_RUNS:,}" in third.text
    assert cells(third.text, "runs")[-1][0] == "big-00000"


def test_an_entry_of_200000_requests_lists_a_few_and_counts_them_all(big_client,
                                                                     big_warehouse,
                                                                     monkeypatch):
    from benchledger.publishing import explain

    frames = []
    for module in (ui_app.read, explain):
        real = module.query_frame

        def counting(con, name, _real=real, **params):
            frames.append((name, len(found := _real(con, name, **params))))
            return found

        monkeypatch.setattr(module, "query_frame", counting)
    text = page(big_client, "/entry", warehouse=str(big_warehouse), entry="e000000")
    assert frames and max(n for _, n in frames) <= ui_app.PAGE_ROWS, frames
    lineage = html.unescape(re.search(r"<pre id='explain'>(.*?)</pre>", text, re.S)[1])
    assert f"Requests ({BIG_REQUESTS}):" in lineage
    assert lineage.count("  w-big/m") == 20  # what `benchledger explain` shows by default
    assert f"... {BIG_REQUESTS - 20} more (benchledger sql:" in lineage
