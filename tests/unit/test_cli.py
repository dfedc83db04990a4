"""CLI behaviour that needs no Airflow run: bad input, read-only SQL, core import hygiene."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchledger.cli import main
from tests.sweeps import HTTP_CLOCK, simulator_arm, sweep, variant, write_sweep

REPO = Path(__file__).resolve().parents[2]


def test_run_with_bad_sweep_fails_before_airflow_naming_file_and_key(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[sweep]\nname = "x"\n[[arms]]\nname = "a"\nserver = "simulator"\n'
                   'model = "m"\nrestarts = "two"\n[[workloads]]\nname = "code"\n')
    assert main(["run", str(bad), "--warehouse", str(tmp_path / "w.duckdb")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: arms[0].restarts:" in err and "'two'" in err
    assert not (tmp_path / "w-data").exists()  # nothing half-ran


def test_sql_on_missing_warehouse_is_a_clear_error(tmp_path, capsys):
    assert main(["sql", "--warehouse", str(tmp_path / "nope.duckdb"), "SELECT 1"]) == 2
    assert "no warehouse at" in capsys.readouterr().err


def test_sql_refuses_writes(tmp_path, capsys):
    from benchledger.warehouse.db import connect

    path = tmp_path / "w.duckdb"
    connect(path).close()
    assert main(["sql", "--warehouse", str(path), "SELECT count(*) AS n FROM entries"]) == 0
    assert main(["sql", "--warehouse", str(path),
                 "INSERT INTO runs (run_id) VALUES ('x')"]) == 2
    assert "read-only" in capsys.readouterr().err


def test_core_package_never_imports_airflow():
    code = ("import sys, benchledger.cli, benchledger.restart.steps, benchledger.client, "
            "benchledger.simulator.server, benchledger.stats, benchledger.warehouse.derive; "
            "print('airflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"


def test_simulator_takes_its_own_flags(capsys):
    with pytest.raises(SystemExit) as done:
        main(["simulator", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: benchledger simulator") and "--step-ms" in out


SWEEP = sweep("cli", [simulator_arm("a")], defaults={"requests": 5})


@pytest.fixture
def loaded_not_derived(tmp_path):
    """A warehouse holding one run whose raw files were loaded, and nothing derived."""
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.load import load_run_dir
    from tests.synthetic import RUN_ID, request_row, write_synthetic_run

    layout = write_synthetic_run(tmp_path, SWEEP, {
        ("a", 0, "code"): ([request_row("w", i) for i in range(5)], {})})
    path = tmp_path / "wh.duckdb"
    with connect(path) as con:
        load_run_dir(con, layout.run_dir)
    return path, RUN_ID


def test_publish_of_an_unknown_run_fails_naming_the_known_runs(loaded_not_derived, tmp_path,
                                                               capsys):
    warehouse, run_id = loaded_not_derived
    out = tmp_path / "out"
    assert main(["publish", "--warehouse", str(warehouse), "--out", str(out),
                 "--run", "manual__nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"benchledger publish: no run 'manual__nope' in the warehouse; known runs: "
                   f"{run_id}")
    assert not out.exists()  # nothing written for a run that is not there


def test_publish_of_a_run_with_nothing_derived_fails_and_writes_nothing(loaded_not_derived,
                                                                       tmp_path, capsys):
    warehouse, run_id = loaded_not_derived
    out = tmp_path / "out"
    assert main(["publish", "--warehouse", str(warehouse), "--out", str(out),
                 "--run", run_id]) == 2
    captured = capsys.readouterr()
    assert f"run {run_id} has no derived entries, so there is nothing to publish" in captured.err
    assert "published" not in captured.out
    assert not out.exists()


def test_simulator_options_after_the_subcommand_reach_the_simulator():
    # argparse's REMAINDER refused these ("unrecognized arguments: --port") on the parser
    # path; the README's `benchledger simulator --port 8000 --speculative` must parse
    from benchledger.cli import parse_args

    args = parse_args(["simulator", "--port", "8000", "--speculative"])
    assert args.command == "simulator"
    assert args.simulator_args == ["--port", "8000", "--speculative"]
    assert parse_args(["simulator"]).simulator_args == []
    assert parse_args(["sql", "--warehouse", "w", "SELECT 1"]).query == "SELECT 1"


def test_sql_refusal_names_the_statement_in_one_line(tmp_path, capsys):
    from benchledger.warehouse.db import connect

    path = tmp_path / "w.duckdb"
    connect(path).close()
    target = tmp_path / "x.csv"
    assert main(["sql", "--warehouse", str(path), f"COPY (SELECT 1) TO '{target}'"]) == 2
    assert capsys.readouterr().err == ("benchledger sql: refused: COPY reads and writes "
                                       "files; the auditor's door only reads the warehouse\n")
    assert not target.exists()


def test_a_second_run_of_a_sweep_is_refused_at_once_naming_the_holder(tmp_path):
    """The sweep lock, held by another process, refuses `benchledger run` before Airflow
    starts (the end-to-end case with two real runs is in tests/integration)."""
    sweep = tmp_path / "s.toml"
    # the clock read over HTTP: nvidia-smi (the default) would be refused first here
    write_sweep(sweep, variant(SWEEP, {"defaults": HTTP_CLOCK}))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from benchledger.local.run import sweep_lock\n"
         "with sweep_lock(Path(sys.argv[1]), 'cli'):\n    print('held', flush=True)\n"
         "    time.sleep(60)\n", str(tmp_path / "wh-data")],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        done = subprocess.run([sys.executable, "-m", "benchledger.cli", "run", str(sweep),
                               "--warehouse", str(tmp_path / "wh.duckdb")], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2
    assert f"sweep 'cli' is already running on {tmp_path / 'wh-data'} (PID {holder.pid}:" in (
        done.stderr)
    assert "two runs of one sweep never measure at once" in done.stderr
    assert not (tmp_path / "wh-data" / "airflow").exists()  # refused before Airflow


# Issue #43, item 4: `sql` for people. A request id is about 90 characters: cut to 60 (the
# old default) it lost its window and request, the part an auditor greps for.
LONG_ID = ("manual__2026-12-07T07:00:00.123456+00:00/spec-on-with-a-long-name/r12/"
           "prose-c64/m000123")


def test_sql_prints_whole_values_and_null_apart_from_nan(tmp_path, capsys):
    from benchledger.warehouse.db import connect

    path = tmp_path / "w.duckdb"
    connect(path).close()
    query = (f"SELECT '{LONG_ID}' AS request_id, NULL::DOUBLE AS missing, "
             "'nan'::DOUBLE AS not_a_number, 1.5 AS value, NULL::VARCHAR AS label")
    assert main(["sql", "--warehouse", str(path), query]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["request_id", "missing", "not_a_number", "value", "label"]
    assert row.split() == [LONG_ID, "NULL", "NaN", "1.5", "NULL"]
    assert main(["sql", "--warehouse", str(path), "--max-width", "20", query]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == LONG_ID[:17] + "..."


def test_sql_ends_quietly_when_its_reader_stops(tmp_path):
    """`benchledger sql ... | head -1`: head exits after its line; the writer's next write
    meets a closed pipe. It ends without a word, with a shell's status for SIGPIPE."""
    from benchledger.warehouse.db import connect

    path = tmp_path / "w.duckdb"
    connect(path).close()
    writer = subprocess.Popen(
        [sys.executable, "-m", "benchledger.cli", "sql", "--warehouse", str(path),
         "--max-rows", "50000", "SELECT range AS n FROM range(50000)"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout is not None and writer.stderr is not None
    first = writer.stdout.readline()
    writer.stdout.close()  # the reader stops, as head does
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=120) == 141, err
    assert first.split() == [b"n"] and err == "", err
