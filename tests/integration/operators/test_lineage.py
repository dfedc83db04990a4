"""OpenLineage: one small sweep through `benchledger run` (dag.test) with the provider's
file transport configured by environment; the COMPLETE events of load, validate, derive
and publish name the run's raw files, the warehouse tables and the published files.
Without a transport, reporting lineage does nothing at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from benchledger.local.run import execute_sweep
from benchledger.operators import lineage
from benchledger.publishing.export import DATA_DOCS, MARKER
from benchledger.publishing.report_charts import CHARTS_DIR
from benchledger.raw.layout import RunLayout
from tests.sweeps import defaults, simulator_arm, sweep, write_sweep

pytestmark = pytest.mark.integration

# Windows of five short requests last a few tenths of a second: the clock is read often
# enough that each has a reading under load (a CI run read none at the default 0.5 s, and
# clock_under_load rightly blocked every entry: no charts to publish)
SWEEP = sweep("lineage", [simulator_arm("plain")],
              defaults=defaults(requests=5, max_tokens=16, clock_interval_s=0.1))
NAMESPACE = "benchledger-lineage-test"


def _without_openlineage(monkeypatch) -> None:
    """No transport anywhere the provider looks (its settings, its legacy variables)."""
    for name in list(os.environ):
        if name.startswith(("AIRFLOW__OPENLINEAGE__", "OPENLINEAGE")):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def lineage_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lineage")
    events = tmp / "openlineage.jsonl"
    sweep = tmp / "lineage.toml"
    write_sweep(sweep, SWEEP)
    with pytest.MonkeyPatch.context() as mp:
        _without_openlineage(mp)
        # What a deployment sets in airflow.cfg as [openlineage] transport / namespace.
        mp.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(
            {"type": "file", "log_file_path": str(events), "append": True}))
        mp.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", NAMESPACE)
        outcome = execute_sweep(sweep, tmp / "wh.duckdb", tmp / "data", publish=True)
        assert outcome.not_published is None, outcome.not_published
        run_id, state = outcome.run_id, outcome.state
    records = [json.loads(line) for line in events.read_text().splitlines() if line]
    return {"run_id": run_id, "state": state, "warehouse": (tmp / "wh.duckdb").resolve(),
            "layout": RunLayout((tmp / "data").resolve(), run_id), "events": records}


def complete_event(run: dict, task_id: str) -> dict:
    found = [e for e in run["events"] if e["eventType"] == "COMPLETE"
             and e["job"]["name"].endswith(f".{task_id}")]
    assert len(found) == 1, [e["job"]["name"] for e in found]
    return found[0]


def datasets(event: dict, side: str) -> set[tuple[str, str]]:
    return {(d["namespace"], d["name"]) for d in event[side]}


def tables(run: dict, *names: str) -> set[tuple[str, str]]:
    return {(f"duckdb://{run['warehouse']}", f"wh.main.{name}") for name in names}


def files(*paths: Path) -> set[tuple[str, str]]:
    return {("file", str(Path(p).resolve())) for p in paths}


def warehouse_rows(run: dict, sql: str) -> list[tuple]:
    with duckdb.connect(str(run["warehouse"]), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_the_run_succeeded_and_emitted_events_in_the_configured_namespace(lineage_run):
    assert lineage_run["state"] == "success"
    assert {e["job"]["namespace"] for e in lineage_run["events"]} == {NAMESPACE}


def test_load_reads_the_files_the_warehouse_catalogued_and_writes_the_raw_tables(lineage_run):
    event = complete_event(lineage_run, "load")
    run_dir = str(lineage_run["layout"].run_dir)
    loaded = [Path(path) for path, in warehouse_rows(lineage_run, "SELECT path FROM raw_files")
              if path.startswith(run_dir)]
    assert {p.suffix for p in loaded} == {".json", ".parquet"}
    assert datasets(event, "inputs") == files(*loaded)
    assert datasets(event, "outputs") == tables(
        lineage_run, "runs", "restarts", "windows", "request_records", "raw_files",
        "server_metrics", "server_log_lines", "node_clocks")


def test_every_table_named_is_a_table_of_the_warehouse(lineage_run):
    """Views are named by their tables: every name is a base table the warehouse has."""
    base = {name for name, in warehouse_rows(
        lineage_run, "SELECT table_name FROM information_schema.tables "
                     "WHERE table_type = 'BASE TABLE'")}
    named = {name.removeprefix("wh.main.")
             for e in lineage_run["events"] if e["eventType"] == "COMPLETE"
             for side in ("inputs", "outputs") for namespace, name in datasets(e, side)
             if namespace.startswith("duckdb://")}
    assert named and named <= base


def test_validate_writes_validations_from_the_loaded_rows(lineage_run):
    event = complete_event(lineage_run, "validate")
    assert tables(lineage_run, "windows", "request_records") <= datasets(event, "inputs")
    assert datasets(event, "outputs") == tables(lineage_run, "reconciliations", "validations") \
        | files(lineage_run["layout"].data_docs_dir)


def test_derive_writes_entries_and_comparisons_from_validated_rows(lineage_run):
    event = complete_event(lineage_run, "derive")
    assert tables(lineage_run, "windows", "request_records", "validations") \
        <= datasets(event, "inputs")
    assert tables(lineage_run, "entries", "entry_lineage", "comparisons") \
        <= datasets(event, "outputs")


def test_publish_reads_entries_and_writes_exactly_the_published_files(lineage_run):
    event = complete_event(lineage_run, "publish")
    assert tables(lineage_run, "entries", "comparisons") <= datasets(event, "inputs")
    assert not files(lineage_run["layout"].data_docs_dir) & datasets(event, "inputs")
    export = lineage_run["layout"].export_dir
    # the chart files count one by one (a publishing job embeds each); the Data Docs stay
    # with the run's data, neither read nor written by the publication
    written = [export / name for name in os.listdir(export) if name not in (MARKER, CHARTS_DIR)]
    written += sorted((export / CHARTS_DIR).glob("*.svg"))
    assert export / DATA_DOCS not in written and export / "entries.json" in written
    assert any(path.suffix == ".svg" for path in written)
    assert datasets(event, "outputs") == files(*written)


def test_without_a_transport_reporting_does_nothing(monkeypatch, tmp_path):
    _without_openlineage(monkeypatch)
    assert not lineage.openlineage_enabled()
    # Outside any task, with no publication there: with OpenLineage on this would fail
    # (no manifest to read, no running task to report to); off, nothing is looked at.
    lineage.report_publish(tmp_path / "wh.duckdb", tmp_path / "missing")
    lineage.report_load(tmp_path / "missing", tmp_path / "wh.duckdb")


@pytest.mark.parametrize("name", ["wh.duckdb", "bench-2027.duckdb", "a.b.c", ".hidden.duckdb",
                                  "noext"])
def test_table_names_use_the_catalog_duckdb_gives_the_file(tmp_path, name):
    with duckdb.connect(str(tmp_path / name)) as con:
        (catalog,), = con.execute("SELECT current_database()").fetchall()
    assert lineage.duckdb_catalog(tmp_path / name) == catalog
