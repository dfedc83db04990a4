"""A damaged warehouse is refused before anything depends on it (issue #22, item 12).

A real warehouse, holding a loaded run, cut to half its size (a full disk, an interrupted
copy): `benchledger run` refuses it at once, before Airflow or any server starts, and
`benchledger import` and `benchledger sql` say so too: each in one line naming the file
and what is wrong, never a traceback. The commands run as a user types them, in child
processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from benchledger.warehouse.db import WarehouseError, check_warehouse, connect
from benchledger.warehouse.load import load_run_dir
from benchmarks.synthetic_run import write_scale_run
from tests.conftest import REPO
from tests.sweeps import NO_CLOCK, defaults, simulator_arm, sweep, write_sweep

REPORT = REPO / "tests" / "fixtures" / "imports" / "report" / "field-notes.csv"
# In the model name of the sweep's server: any process whose argv carries it is one the
# refused run started.
TAG = "sim-model-check-7f3a"
SWEEP = sweep("checked", [simulator_arm("sim", model=TAG)],
              defaults=defaults(requests=5, warmup=0, restarts=1, max_tokens=8, clock=NO_CLOCK))


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """A warehouse with one loaded run (several blocks of the file in use)."""
    folder = tmp_path_factory.mktemp("whole")
    path = folder / "wh.duckdb"
    with connect(path) as con:
        load_run_dir(con, write_scale_run(folder / "raw", 4000, restarts=2, events=10,
                                          seed=5).run_dir)
    return path


@pytest.fixture
def truncated(whole, tmp_path) -> Path:
    path = tmp_path / "wh.duckdb"
    shutil.copy(whole, path)
    os.truncate(path, path.stat().st_size // 2)
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchledger.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def one_line(done: subprocess.CompletedProcess, command: str, path: Path) -> str:
    err = done.stderr.strip()
    assert done.returncode == 2, (done.stdout, err)
    assert "Traceback" not in err and "\n" not in err, err
    assert err.startswith(f"benchledger {command}: the warehouse {path} is truncated"), err
    return err


def tagged_processes() -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if TAG.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_a_whole_or_a_missing_warehouse_passes(whole, tmp_path):
    check_warehouse(whole)
    check_warehouse(tmp_path / "not-yet.duckdb")  # the first load creates it
    assert not (tmp_path / "not-yet.duckdb").exists()


def test_the_check_names_the_file_and_what_is_wrong(truncated):
    for opening in (lambda: check_warehouse(truncated), lambda: connect(truncated),
                    lambda: connect(truncated, read_only=True)):
        with pytest.raises(WarehouseError) as refused:
            opening()
        message = str(refused.value)
        assert message.startswith(f"the warehouse {truncated} is truncated: its "), message
        assert "rebuild the warehouse from the raw files" in message


@pytest.mark.parametrize("cut", [1, 4096, 262_145])
def test_a_file_cut_short_by_a_little_is_refused_too(whole, tmp_path, cut):
    path = tmp_path / "wh.duckdb"
    shutil.copy(whole, path)
    os.truncate(path, path.stat().st_size - cut)
    with pytest.raises(WarehouseError, match="is truncated"):
        check_warehouse(path)


def test_run_refuses_a_truncated_warehouse_before_any_server_starts(truncated, tmp_path):
    sweep = tmp_path / "checked.toml"
    write_sweep(sweep, SWEEP)
    data = tmp_path / "data"
    done = cli("run", str(sweep), "--warehouse", str(truncated), "--data-dir", str(data))
    one_line(done, "run", truncated)
    assert "running sweep" not in done.stdout  # Airflow never started
    assert not (data / "raw").exists() and not list(data.glob("**/restart.json"))
    assert not (data / "airflow").exists()
    assert tagged_processes() == []


def test_run_refuses_a_data_dir_or_warehouse_folder_it_cannot_write(tmp_path):
    """Named with the option that chose it, before any server starts (it was the bare
    OSError: "[Errno 20] Not a directory: '.../locks'")."""
    sweep = tmp_path / "checked.toml"
    write_sweep(sweep, SWEEP)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    done = cli("run", str(sweep), "--warehouse", str(tmp_path / "wh.duckdb"),
               "--data-dir", str(a_file))
    assert done.returncode == 2, done
    assert done.stderr == (f"benchledger run: the data dir {a_file} is a file, not a folder: "
                           "choose another with --data-dir (default: <warehouse>-data beside "
                           "the warehouse)\n"), done.stderr
    done = cli("run", str(sweep), "--warehouse", str(a_file / "wh.duckdb"))
    assert done.returncode == 2, done
    assert done.stderr.startswith(f"benchledger run: the warehouse's folder {a_file} is a "
                                  "file, not a folder: choose another with --warehouse"), \
        done.stderr
    assert "running sweep" not in done.stdout and tagged_processes() == []


def test_import_refuses_a_truncated_warehouse_in_one_line(truncated):
    done = cli("import", "report", str(REPORT), "--warehouse", str(truncated))
    one_line(done, "import", truncated)


def test_sql_refuses_a_truncated_warehouse_even_for_a_query_that_reads_no_table(truncated):
    done = cli("sql", "--warehouse", str(truncated), "SELECT 1")
    one_line(done, "sql", truncated)


# A first load killed -9 in its first moments (issue #39): DuckDB has made the file, and the
# migration (one transaction) has begun but not committed. What the kill leaves is a file
# without a table of its own, perhaps with a write-ahead log.
_CUT_FIRST_MIGRATION = textwrap.dedent("""
    import sys, time
    import duckdb
    from benchledger.warehouse.db import MIGRATIONS
    con = duckdb.connect(sys.argv[1])
    con.execute("BEGIN TRANSACTION")
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                "name VARCHAR NOT NULL, applied_at TIMESTAMPTZ NOT NULL)")
    con.execute(sorted(MIGRATIONS.glob("0001_*.sql"))[0].read_text())
    print("migrating", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def cut_first_load(tmp_path) -> Path:
    path = tmp_path / "cut.duckdb"
    child = subprocess.Popen([sys.executable, "-c", _CUT_FIRST_MIGRATION, str(path)],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "migrating"
    finally:
        child.kill()  # SIGKILL: no rollback, no checkpoint, no clean close
        child.wait()
    assert path.exists()
    return path


def test_a_first_load_killed_midway_leaves_a_warehouse_run_and_import_migrate(
        cut_first_load, tmp_path):
    with duckdb.connect(str(cut_first_load), read_only=True) as con:  # what the kill left
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE NOT internal"
                           ).fetchone() == (0,)
    check_warehouse(cut_first_load)  # `run`'s check: it refused this file for ever
    sweep = tmp_path / "checked.toml"
    write_sweep(sweep, SWEEP)
    done = cli("run", str(sweep), "--warehouse", str(cut_first_load), "--data-dir",
               str(tmp_path / "data"))
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    with duckdb.connect(str(cut_first_load), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] > 20


def test_import_migrates_the_same_file(cut_first_load):
    done = cli("import", "report", str(REPORT), "--warehouse", str(cut_first_load))
    assert done.returncode == 0, done.stderr
    check_warehouse(cut_first_load)


def test_a_file_with_tables_but_no_migrations_is_still_refused(tmp_path):
    """Not every file without schema_migrations is empty: one holding other tables is not a
    warehouse this code wrote, and is refused, naming it."""
    path = tmp_path / "other.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE notes AS SELECT 1 AS x")
    with pytest.raises(WarehouseError, match=r"cannot be read: .*schema_migrations"):
        check_warehouse(path)
