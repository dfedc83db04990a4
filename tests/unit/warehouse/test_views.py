"""Views as files: migrations create and alter tables only; each view lives in exactly one
warehouse/views/<name>.sql with its current definition, and migrate() re-creates every
view on each call. Checked on a fresh warehouse, on one made by the old migrations (which
created the views themselves), in memory and on a file.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from benchledger.warehouse import db
from benchledger.warehouse.db import WarehouseError, connect, migrate

REPO = Path(__file__).resolve().parents[3]
# The last commit whose migrations created (and re-created) the views themselves.
OLD_COMMIT = "6bf2178"
# Views deliberately changed since they moved out of the migrations: a view named here is
# no longer compared with the definition OLD_COMMIT's migrations left. Issue #13: requests
# gained usage_output_tokens and itl_per_token_s (every earlier column is unchanged).
# Issue #27: variance_report groups by numerator and load point too (a rate ladder's points
# were pooled into one row of their concurrency).
CHANGED_SINCE_MOVE: set[str] = {"requests", "window_clocks", "variance_report"}


def view_names() -> set[str]:
    return {f.stem for f in db.VIEWS.glob("*.sql")}


def warehouse_views(con) -> dict[str, str]:
    """Every persistent view of the database, with its SQL as DuckDB normalised it."""
    return dict(con.execute(
        "SELECT view_name, sql FROM duckdb_views() "
        "WHERE NOT internal AND NOT temporary AND schema_name = 'main'").fetchall())


@pytest.fixture(scope="module")
def file_sql() -> dict[str, str]:
    """Each file's view as DuckDB normalises it, made from that file alone and read back
    at once: the tables come from the migrations run by hand (not migrate()), then every
    file is executed by itself, retried until what it reads exists. A migration or another
    file defining the same view differently makes the warehouse's SQL differ from this."""
    con = duckdb.connect()
    for sql_file in sorted(db.MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        con.execute(sql_file.read_text())
    assert warehouse_views(con) == {}, "a migration created a view"
    pending = {f.stem: f.read_text() for f in db.VIEWS.glob("*.sql")}
    made: dict[str, str] = {}
    while pending:
        created = []
        for name, text in sorted(pending.items()):
            try:
                con.execute(text)
            except duckdb.CatalogException:
                continue  # reads a view not made yet (or the name is taken: never passes)
            made[name] = warehouse_views(con)[name]
            created.append(name)
        assert created, f"views that cannot be created from their files: {sorted(pending)}"
        for name in created:
            del pending[name]
    con.close()
    return made


@pytest.fixture(params=["memory", "file"])
def target(request, tmp_path) -> str:
    return ":memory:" if request.param == "memory" else str(tmp_path / "wh.duckdb")


@pytest.fixture
def con(target):
    connection = connect(target)
    yield connection
    connection.close()


def test_fresh_warehouse_has_exactly_the_views_of_the_files(con, file_sql):
    views = warehouse_views(con)
    assert set(views) == view_names() == set(file_sql)
    for name in sorted(views):
        assert views[name] == file_sql[name], name
        con.execute(f"SELECT * FROM {name} LIMIT 0").fetchall()  # binds against the tables


def test_every_view_file_says_what_a_row_is():
    for sql_file in db.VIEWS.glob("*.sql"):
        first = sql_file.read_text().splitlines()[0]
        assert first.startswith("-- One row per"), sql_file.name


def test_no_migration_creates_a_view():
    create_view = re.compile(r"\bCREATE\s+(OR\s+REPLACE\s+)?(TEMP\w*\s+)?VIEW\b", re.I)
    for sql_file in sorted(db.MIGRATIONS.glob("*.sql")):
        assert not create_view.search(sql_file.read_text()), sql_file.name


def test_migrate_is_idempotent_and_recreates_views(con, file_sql):
    versions = con.execute("SELECT version, applied_at FROM schema_migrations").fetchall()
    assert migrate(con) == []
    assert con.execute("SELECT version, applied_at FROM schema_migrations").fetchall() \
        == versions
    assert warehouse_views(con) == file_sql

    con.execute("DROP VIEW published_entries")
    con.execute("DROP VIEW current_entries")  # what published_entries and variance_report read
    assert "published_entries" not in warehouse_views(con)
    assert migrate(con) == []
    assert warehouse_views(con) == file_sql
    con.execute("SELECT * FROM variance_report").fetchall()


def test_views_survive_reopening_a_file(tmp_path, file_sql):
    path = tmp_path / "wh.duckdb"
    connect(path).close()
    with connect(path) as again:
        assert warehouse_views(again) == file_sql
    with connect(path, read_only=True) as reader:
        assert warehouse_views(reader) == file_sql
        assert reader.execute("SELECT count(*) FROM published_entries").fetchall() == [(0,)]


# --- a warehouse made by the old migrations -----------------------------------------------


# Views created after the move to files (issue #14: imported and historical evidence;
# issue #10: lineage per window; issue #13: per-token gaps; issue #21: bursts per window;
# issue #39: the GPUs a deployment listed when it was ready).
VIEWS_ADDED_SINCE = {"entry_requests", "imported_windows", "report_series", "token_gaps",
                     "window_bursts", "window_speculation", "window_energy", "deployment_gpus"}


@functools.cache
def _old_migrations() -> tuple[tuple[str, str], ...] | None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], check=True,
                              capture_output=True, text=True).stdout

    try:
        names = git("ls-tree", "--name-only", OLD_COMMIT, "warehouse/migrations/").split()
        return tuple((Path(n).name, git("show", f"{OLD_COMMIT}:{n}")) for n in sorted(names)
                     if re.fullmatch(r"\d{4}_\w+\.sql", Path(n).name))
    except (OSError, subprocess.CalledProcessError):
        return None


def old_migrations() -> tuple[tuple[str, str], ...]:
    migrations = _old_migrations()
    if migrations is None:
        pytest.skip(f"needs git and commit {OLD_COMMIT} (the migrations that made the views)")
    return migrations


def build_old_warehouse(con) -> None:
    """What the old migrate() left: each old migration, views included, in its own
    transaction and recorded in schema_migrations."""
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                "name VARCHAR NOT NULL, applied_at TIMESTAMPTZ NOT NULL)")
    for name, sql in old_migrations():
        con.execute("BEGIN TRANSACTION")
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)",
                    [int(name[:4]), name, datetime.now(UTC)])
        con.execute("COMMIT")


def test_old_warehouse_is_upgraded_to_the_files(target, file_sql):
    raw = duckdb.connect(target)
    build_old_warehouse(raw)
    old_views = warehouse_views(raw)
    # The move added and removed no view; views added later are new files.
    assert set(old_views) == view_names() - VIEWS_ADDED_SINCE
    if target == ":memory:":
        upgraded, applied = raw, migrate(raw)
    else:
        raw.close()
        upgraded = connect(target)
        applied = [n for n, in upgraded.execute(
            "SELECT name FROM schema_migrations WHERE version > ? ORDER BY version",
            [int(old_migrations()[-1][0][:4])]).fetchall()]
    try:
        old_names = {name for name, _ in old_migrations()}
        assert applied == sorted(f.name for f in db.MIGRATIONS.glob("[0-9]*_*.sql")
                                 if f.name not in old_names)  # none re-applied
        assert warehouse_views(upgraded) == file_sql
        assert migrate(upgraded) == []
        assert warehouse_views(upgraded) == file_sql
    finally:
        upgraded.close()


def test_views_moved_unchanged_from_the_old_migrations(file_sql):
    """Users query these names and the published numbers must not change: each file holds
    exactly the definition the old migrations left last (same SQL, so same columns)."""
    raw = duckdb.connect()
    build_old_warehouse(raw)
    old_views = warehouse_views(raw)
    raw.close()
    for name in sorted(view_names() - CHANGED_SINCE_MOVE - VIEWS_ADDED_SINCE):
        assert old_views[name] == file_sql[name], name


def test_changed_views_keep_every_column_they_had(tmp_path):
    """A view named in CHANGED_SINCE_MOVE gained columns; every column the old migrations
    gave it is still there, in the same order, with the same type."""
    raw = duckdb.connect()
    build_old_warehouse(raw)
    old = {name: raw.execute(f"DESCRIBE {name}").fetchall() for name in CHANGED_SINCE_MOVE}
    raw.close()
    with connect(tmp_path / "new.duckdb") as con:
        for name, columns in old.items():
            new = con.execute(f"DESCRIBE {name}").fetchall()
            kept = [column[:2] for column in new if column[0] in {c[0] for c in columns}]
            assert kept == [column[:2] for column in columns], name


def test_read_only_connection_does_not_migrate(tmp_path, file_sql):
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as raw:
        build_old_warehouse(raw)
        old_views = warehouse_views(raw)
        versions = raw.execute("SELECT version FROM schema_migrations").fetchall()
    with connect(path, read_only=True) as reader:
        assert warehouse_views(reader) == old_views
        assert reader.execute("SELECT version FROM schema_migrations").fetchall() == versions
    connect(path).close()
    with connect(path, read_only=True) as reader:
        assert warehouse_views(reader) == file_sql
    with pytest.raises(WarehouseError, match="no warehouse"):
        connect(tmp_path / "missing.duckdb", read_only=True)


# --- how migrate() treats view files ------------------------------------------------------


@pytest.fixture
def views_dir(tmp_path, monkeypatch) -> Path:
    """A copy of warehouse/views that migrate() reads instead, to add files to."""
    folder = tmp_path / "views"
    shutil.copytree(db.VIEWS, folder)
    monkeypatch.setattr(db, "VIEWS", folder)
    return folder


def add_view(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.sql").write_text(f"-- One row per test row.\n{body}\n")


def test_a_view_is_created_after_the_views_it_reads(views_dir, file_sql):
    # Sorts before everything it depends on; published_entries itself reads current_entries.
    add_view(views_dir, "aaa_published_runs",
             "CREATE VIEW aaa_published_runs AS SELECT DISTINCT run_id FROM published_entries;")
    with connect(":memory:") as con:
        views = warehouse_views(con)
        assert set(views) == set(file_sql) | {"aaa_published_runs"}
        assert {n: views[n] for n in file_sql} == file_sql


def test_a_failing_view_leaves_the_previous_schema(views_dir, tmp_path, monkeypatch,
                                                   file_sql):
    con = connect(":memory:")
    before = warehouse_views(con)
    migrations = tmp_path / "migrations"
    shutil.copytree(db.MIGRATIONS, migrations)
    (migrations / "9999_test_only.sql").write_text("CREATE TABLE test_only (x INTEGER);\n")
    monkeypatch.setattr(db, "MIGRATIONS", migrations)
    add_view(views_dir, "broken", "CREATE VIEW broken AS SELECT x FROM no_such_table;")
    with pytest.raises(WarehouseError, match=r"view broken \(.*broken\.sql\).*no_such_table"):
        migrate(con)
    # Rolled back: the views dropped before the failure are back, the table migration is
    # neither applied nor recorded, and the connection is usable.
    assert warehouse_views(con) == before == file_sql
    assert con.execute("SELECT count(*) FROM duckdb_tables() "
                       "WHERE table_name = 'test_only'").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM schema_migrations "
                       "WHERE version = 9999").fetchall() == [(0,)]
    con.close()


def test_views_reading_each_other_in_a_cycle_are_refused(views_dir):
    add_view(views_dir, "cycle_a", "CREATE VIEW cycle_a AS SELECT * FROM cycle_b;")
    add_view(views_dir, "cycle_b", "CREATE VIEW cycle_b AS SELECT * FROM cycle_a;")
    with pytest.raises(WarehouseError, match="cycle"):
        connect(":memory:")


@pytest.mark.parametrize("text", [
    "-- One row.\nCREATE VIEW other_name AS SELECT 1 AS x;",  # it must name its own view
    "-- One row.\nCREATE OR REPLACE VIEW odd AS SELECT 1 AS x;",  # no quiet redefinitions
    "-- One row.\nCREATE VIEW odd AS SELECT 1 AS x; CREATE VIEW odd2 AS SELECT 2 AS x;",
    "CREATE VIEW odd AS SELECT 1 AS x;",  # no header saying what a row is
    "-- One row.\nCREATE VIEW odd AS SELEC 1 AS x;",  # a syntax error names the file too
])
def test_a_view_file_holds_a_header_and_one_create_view_of_its_name(views_dir, text):
    (views_dir / "odd.sql").write_text(text)
    with pytest.raises(WarehouseError, match="odd.sql"):
        connect(":memory:")


def test_views_of_removed_files_are_dropped_and_hand_made_ones_kept(con, file_sql):
    con.execute("CREATE VIEW retired AS SELECT 1 AS x")
    con.execute(f"COMMENT ON VIEW retired IS '{db.VIEW_COMMENT}retired.sql: gone'")
    con.execute("CREATE VIEW mine AS SELECT 2 AS x")
    migrate(con)
    views = warehouse_views(con)
    assert "retired" not in views and "mine" in views
    assert {n: v for n, v in views.items() if n != "mine"} == file_sql
