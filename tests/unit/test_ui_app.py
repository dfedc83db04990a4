"""The benchledger page's app (publishing/ui_app.py) against a small synthetic warehouse:
what each page shows is what the warehouse holds, a busy or missing warehouse is a message,
and no page ever opens the warehouse for writing. The page inside a real Airflow UI is
tests/integration/test_cluster.py's."""

from __future__ import annotations

import configparser
import hashlib
import html
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest
from fastapi import Depends, HTTPException
from fastapi.testclient import TestClient

from benchledger.publishing import ui_app
from benchledger.publishing.history import history
from benchledger.raw import RunLayout
from benchledger.warehouse.compare import derive_comparisons
from benchledger.warehouse.db import connect
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.validate import validate_run
from benchledger.warehouse.writer_waiting import WaitingWriter
from tests.synthetic import RUN_ID, request_row, write_synthetic_run

SWEEP = textwrap.dedent("""
    [sweep]
    name = "ui-cmp"
    [defaults]
    requests = 5
    restarts = 2
    [[workloads]]
    name = "code"
    [[arms]]
    name = "base"
    server = "command"
    command = "serve --flavour a --port {port}"
    model = "m"
    [[arms]]
    name = "fast"
    server = "command"
    command = "serve --flavour b --port {port}"
    model = "m"
    [[arms]]
    name = "fast-again"
    server = "command"
    command = "serve --flavour b --port {port}"
    model = "m"
    [[comparisons]]
    a = "fast"
    b = "base"
    metric = "decode_rate"
    control = ["fast", "fast-again"]
""")
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
    from benchledger.cluster_run import install_sweep
    from benchledger.sweep import load_sweep

    sweep_file = tmp_path / "ui.toml"
    sweep_file.write_text(SWEEP)
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

    from benchledger.cluster_config import install_ui_plugin, write_config, write_join_file

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
