"""The warehouse file lock between processes: a writer waits (bounded, saying for whom)
while another process holds the file, then goes ahead when it lets go; past the bound it
fails naming the holder. Readers wait too, briefly. Real processes hold the lock."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from benchledger.warehouse.db import WarehouseBusy, WarehouseError, connect, lock_wait_s
from tests.conftest import REPO

pytestmark = pytest.mark.integration

# Opens the warehouse (read-only or read-write), says so, holds it for `hold_s`, exits.
HOLDER = """
import sys, time
import duckdb
con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "read")
print("held", flush=True)
time.sleep(float(sys.argv[3]))
con.close()
"""


def hold(path, mode: str, hold_s: float) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), mode, str(hold_s)],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


@pytest.fixture
def warehouse(tmp_path):
    path = tmp_path / "wh.duckdb"
    connect(path).close()
    return path


def test_a_writer_waits_for_a_reader_then_writes(warehouse, caplog):
    holder = hold(warehouse, "read", 2.0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="benchledger.warehouse.db"):
        con = connect(warehouse, wait_s=60)
    waited = time.monotonic() - started
    try:
        con.execute("INSERT INTO schema_migrations VALUES (9999, 'probe', now())")
    finally:
        con.close()
        holder.wait(timeout=30)
    # it found the file locked and waited (the message below), then wrote once the reader
    # let go after its 2 s: long before its own 60 s bound
    assert waited < 60 / 2
    (message,) = [r.getMessage() for r in caplog.records]
    assert f"is locked by PID {holder.pid} (" in message and "waiting up to" in message


def test_a_writer_gives_up_after_its_bound_naming_the_holder(warehouse):
    holder = hold(warehouse, "read", 30.0)
    try:
        started = time.monotonic()
        with pytest.raises(WarehouseBusy) as busy:
            connect(warehouse, wait_s=1.5)
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    # at its bound (never before it), not when the reader let go 30 s later
    assert 1.5 <= waited < 30 / 2
    message = str(busy.value)
    assert f"the warehouse {warehouse} is locked by PID {holder.pid} (" in message
    assert "gave up after waiting 1.5 s (set BENCHLEDGER_LOCK_TIMEOUT_S to wait longer)" in (
        message)


def test_a_reader_waits_for_a_writer_and_readers_share(warehouse):
    writer = hold(warehouse, "write", 1.5)
    try:
        with connect(warehouse, read_only=True, wait_s=60) as con:
            assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]
    finally:
        writer.wait(timeout=30)
    reader = hold(warehouse, "read", 30.0)
    try:
        # wait_s=0: one try, WarehouseBusy if the reader held it exclusively; that it
        # opens at all is the proof that readers share (no stopwatch needed)
        with connect(warehouse, read_only=True, wait_s=0) as con:
            assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]
    finally:
        reader.kill()
        reader.wait()


def test_the_cli_says_the_warehouse_is_busy(warehouse, monkeypatch, capsys):
    from benchledger.cli import main

    monkeypatch.setenv("BENCHLEDGER_READ_LOCK_TIMEOUT_S", "0.5")
    writer = hold(warehouse, "write", 30.0)
    try:
        assert main(["sql", "--warehouse", str(warehouse), "SELECT 1"]) == 2
    finally:
        writer.kill()
        writer.wait()
    err = capsys.readouterr().err
    assert f"benchledger sql: the warehouse {warehouse} is locked by PID {writer.pid}" in err
    assert "BENCHLEDGER_READ_LOCK_TIMEOUT_S" in err


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "1e9"])
def test_a_bad_lock_timeout_setting_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("BENCHLEDGER_LOCK_TIMEOUT_S", value)
    with pytest.raises(WarehouseError, match=f"BENCHLEDGER_LOCK_TIMEOUT_S={value!r}"):
        lock_wait_s(read_only=False)
