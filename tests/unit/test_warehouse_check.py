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

import pytest

from benchledger.warehouse.db import WarehouseError, check_warehouse, connect
from benchledger.warehouse.load import load_run_dir
from benchmarks.synthetic_run import write_scale_run
from tests.conftest import REPO

REPORT = REPO / "tests" / "fixtures" / "imports" / "report" / "field-notes.csv"
# In the model name of the sweep's server: any process whose argv carries it is one the
# refused run started.
TAG = "sim-model-check-7f3a"
SWEEP = textwrap.dedent(f"""
    [sweep]
    name = "checked"
    [defaults]
    requests = 5
    warmup = 0
    restarts = 1
    max_tokens = 8
    clock_source = "none"
    require_clock_check = false
    [[arms]]
    name = "sim"
    server = "simulator"
    model = "{TAG}"
    [[workloads]]
    name = "code"
""")


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
    sweep.write_text(SWEEP)
    data = tmp_path / "data"
    done = cli("run", str(sweep), "--warehouse", str(truncated), "--data-dir", str(data))
    one_line(done, "run", truncated)
    assert "running sweep" not in done.stdout  # Airflow never started
    assert not (data / "raw").exists() and not list(data.glob("**/restart.json"))
    assert not (data / "airflow").exists()
    assert tagged_processes() == []


def test_import_refuses_a_truncated_warehouse_in_one_line(truncated):
    done = cli("import", "report", str(REPORT), "--warehouse", str(truncated))
    one_line(done, "import", truncated)


def test_sql_refuses_a_truncated_warehouse_even_for_a_query_that_reads_no_table(truncated):
    done = cli("sql", "--warehouse", str(truncated), "SELECT 1")
    one_line(done, "sql", truncated)
