"""CLI behaviour that needs no Airflow run: bad input, read-only SQL, core import hygiene."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchledger.cli import main

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
    code = ("import sys, benchledger.cli, benchledger.restart, benchledger.client, "
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
