"""The auditor's door: `benchledger sql` and every read-only connection read the warehouse
and nothing else (issue #11). Each refusal is one line naming what was refused, and
nothing is written or read outside the warehouse."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from benchledger.cli import main
from benchledger.warehouse.db import READ_ONLY_CONFIG, WarehouseError, connect

REPO = Path(__file__).resolve().parents[3]
DOOR = "the auditor's door"


@pytest.fixture
def warehouse(tmp_path):
    path = tmp_path / "wh.duckdb"
    connect(path).close()  # migrated: every table and view
    return path


@pytest.fixture
def outside(tmp_path):
    """A folder outside the warehouse, with a file in it to (not) read."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.csv").write_text("user,password\nroot,hunter2\n")
    return folder


def sql(warehouse, query, capsys) -> tuple[int, str, str]:
    code = main(["sql", "--warehouse", str(warehouse), query])
    out, err = capsys.readouterr()
    return code, out, err


def refused(warehouse, query, capsys, *names: str) -> str:
    """Run `query` through `benchledger sql`; it must be refused in one line that names
    each of `names`. Returns that line."""
    code, out, err = sql(warehouse, query, capsys)
    assert code == 2, (query, out, err)
    line = err.strip()
    assert "\n" not in line, line  # one line, whatever DuckDB's message looked like
    assert line.startswith("benchledger sql: refused: "), line
    for name in names:
        assert name in line, (name, line)
    assert "hunter2" not in out + err
    return line


def test_copy_to_a_file_is_refused_and_writes_nothing(warehouse, outside, capsys):
    target = outside / "dump.csv"
    refused(warehouse, f"COPY (SELECT * FROM runs) TO '{target}'", capsys, "COPY", DOOR)
    refused(warehouse, f"COPY runs TO '{target}' (FORMAT parquet)", capsys, "COPY")
    refused(warehouse, f"EXPORT DATABASE '{outside / 'export'}'", capsys, "EXPORT")
    # the same statement hidden behind EXPLAIN ANALYZE (which runs it) meets the lockdown
    refused(warehouse, f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'", capsys,
            "Permission Error", str(target))
    assert sorted(p.name for p in outside.iterdir()) == ["secret.csv"]


@pytest.mark.parametrize("reader", ["read_csv", "read_csv_auto", "read_text", "read_blob",
                                    "read_parquet", "read_json", "glob"])
def test_reading_files_outside_the_warehouse_is_refused(warehouse, outside, capsys, reader):
    for path in (outside / "secret.csv", Path("/etc/passwd")):
        line = refused(warehouse, f"SELECT * FROM {reader}('{path}')", capsys,
                       "Permission Error", str(path), DOOR)
        assert "disabled by configuration" in line


def test_a_file_named_as_a_table_is_not_read(warehouse, outside, capsys):
    code, out, err = sql(warehouse, f"SELECT * FROM '{outside / 'secret.csv'}'", capsys)
    assert code == 2 and "hunter2" not in out + err


@pytest.mark.parametrize("statement", ["INSTALL httpfs", "LOAD httpfs", "FORCE INSTALL json",
                                       "INSTALL httpfs FROM community"])
def test_installing_and_loading_extensions_is_refused(warehouse, capsys, statement):
    refused(warehouse, statement, capsys, "INSTALL and LOAD", DOOR)


def test_an_autoloaded_extension_stays_unloaded(warehouse, capsys):
    # https:// would autoload httpfs (and reach the network) on a default connection
    refused(warehouse, "SELECT * FROM read_csv('https://example.invalid/x.csv')", capsys,
            "Permission Error")


def test_attach_is_refused_and_creates_no_file(warehouse, outside, capsys):
    other = outside / "other.duckdb"
    refused(warehouse, f"ATTACH '{other}' AS other", capsys, "ATTACH", DOOR)
    refused(warehouse, f"ATTACH '{warehouse}' AS again (READ_ONLY)", capsys, "ATTACH")
    refused(warehouse, "ATTACH ':memory:' AS scratch", capsys, "ATTACH")
    refused(warehouse, "DETACH wh", capsys, "DETACH")
    assert not other.exists()


@pytest.mark.parametrize("statement", [
    "SET enable_external_access = true", "RESET enable_external_access",
    "SET lock_configuration = false", "SET allow_community_extensions = true",
    "SET autoinstall_known_extensions = true", "SET memory_limit = '1GB'", "USE memory",
    "PRAGMA enable_profiling", "SET VARIABLE x = 1"])
def test_settings_cannot_be_changed(warehouse, capsys, statement):
    refused(warehouse, statement, capsys, DOOR)


@pytest.mark.parametrize("query", ["SELECT 1; SELECT 2", "SELECT 1;;SELECT 2",
                                   "SELECT count(*) FROM runs; DROP TABLE runs"])
def test_more_than_one_statement_is_refused(warehouse, capsys, query):
    refused(warehouse, query, capsys, "2 statements", "exactly one statement")


def test_a_second_statement_never_runs(warehouse, outside, capsys):
    target = outside / "second.csv"
    refused(warehouse, f"SELECT 1; COPY (SELECT 1) TO '{target}'", capsys, "2 statements")
    assert not target.exists()


@pytest.mark.parametrize("query", ["", "  ;  ", "-- only a comment"])
def test_no_statement_is_refused(warehouse, capsys, query):
    refused(warehouse, query, capsys, "0 statements")


@pytest.mark.parametrize("statement", [
    "INSERT INTO runs (run_id) VALUES ('x')", "DELETE FROM entries", "DROP VIEW requests",
    "CREATE TABLE t AS SELECT 1", "UPDATE runs SET ended_at = now()", "CHECKPOINT",
    "CALL pragma_version()", "BEGIN TRANSACTION", "VACUUM", "PIVOT runs ON sweep_name",
    "CREATE MACRO m() AS 1"])
def test_writes_and_non_reads_are_refused(warehouse, capsys, statement):
    refused(warehouse, statement, capsys, DOOR)


def test_a_syntax_error_is_one_line_naming_the_query_failure(warehouse, capsys):
    code, _, err = sql(warehouse, "SELEC 1", capsys)
    assert code == 2 and err.startswith("benchledger sql: query failed: Parser Error")
    assert "\n" not in err.strip()


def documented_relations() -> set[str]:
    """Every relation named in the first column of docs/protocol.md's relation tables."""
    text = (REPO / "docs" / "protocol.md").read_text()
    section = text.split("## Warehouse relations", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)`", section, re.M))


def test_every_documented_relation_reads_through_the_door(warehouse, capsys):
    with connect(warehouse, read_only=True) as con:
        relations = {name for name, in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT internal UNION "
            "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    documented = documented_relations()
    assert len(documented) > 20 and documented <= relations
    for name in sorted(relations):
        code, out, err = sql(warehouse, f"SELECT * FROM {name} LIMIT 1", capsys)
        assert code == 0 and out.strip() and not err, (name, err)
    # the readers an auditor uses besides SELECT
    for query in ("DESCRIBE requests", "SHOW TABLES", "SUMMARIZE runs", "FROM published_entries",
                  "EXPLAIN SELECT * FROM entries", "SELECT * FROM duckdb_settings() LIMIT 1",
                  "WITH r AS (SELECT * FROM runs) SELECT count(*) FROM r"):
        code, _, err = sql(warehouse, query, capsys)
        assert code == 0, (query, err)


def test_the_lockdown_is_in_every_read_only_connection(warehouse, outside):
    """publish, report and explain use connect(read_only=True) directly, without the
    CLI's statement check: the connection itself refuses."""
    with connect(warehouse, read_only=True) as con:
        settings = dict(con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ?",
            [list(READ_ONLY_CONFIG)]).fetchall())
        assert settings == {"enable_external_access": "false",
                            "autoinstall_known_extensions": "false",
                            "autoload_known_extensions": "false",
                            "allow_community_extensions": "false",
                            "lock_configuration": "true"}
        for statement in (f"COPY (SELECT 1) TO '{outside / 'x.csv'}'",
                          f"SELECT * FROM read_csv('{outside / 'secret.csv'}')",
                          f"ATTACH '{outside / 'o.duckdb'}'", "INSTALL httpfs",
                          "LOAD httpfs", "SET enable_external_access = true",
                          "SET lock_configuration = false"):
            with pytest.raises(duckdb.Error):
                con.execute(statement)
        # what publishing does still works: registered frames and plain reads
        import pandas as pd

        con.register("frame", pd.DataFrame({"x": [1, 2]}))
        assert con.execute("SELECT sum(x) FROM frame").fetchall() == [(3,)]
        assert con.execute("SELECT count(*) FROM published_entries").fetchall() == [(0,)]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.csv"]


def test_a_plain_connection_beside_the_door_is_a_clear_error(warehouse):
    with duckdb.connect(str(warehouse), read_only=True), \
            pytest.raises(WarehouseError, match="already has the warehouse .* open with other"):
        connect(warehouse, read_only=True)
