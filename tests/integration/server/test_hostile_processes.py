"""Hostile server processes, end to end through `benchledger run` (issue #22, items 4, 5):

- a command full of secrets (`env HF_TOKEN=... OPENAI_API_KEY=... sh -c '...' --api-key
  ...`): the server gets every value as written, and none of them is anywhere benchledger
  writes: no table or view of the warehouse, no file under the data dir (raw files,
  manifests, the Airflow metadata DB, task logs, the exports, report.html), nor the
  terminal;
- a server that leaves a daemon behind (double fork into its own session, reparented to
  init): after the run it is gone, the restart record names it, and the run says so.

One sweep, one run, two arms (the fault server in mode clean behind a shell).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from tests.conftest import pids_tagged
from tests.integration.local.test_fault_suite import (
    FAULT_SERVER,
    Fault,
    processes_tagged,
    published,
    query,
    restart,
    run_cli,
)

pytestmark = pytest.mark.integration

HF = "hf_plantedXYZabcdefghij0123456789"
OPENAI = "sk-plantedABCdefghij0123456789"
FLAG = "plantedFlagValue42"
SHORT = "pw7Xq2z"  # below 8 characters: redacted where it is a whole word only
PLANTED = (HF, OPENAI, FLAG, SHORT)
SECRETIVE, DAEMON = "secretive", "daemon"


@dataclass(frozen=True)
class ShellArm(Fault):
    """An arm whose command is a shell around the fault server (mode clean)."""

    prefix: str = ""  # before `sh -c`
    before: str = ""  # the script's first lines, before it execs the server
    after: str = ""  # arguments after the script (the shell's $0, $1, ...)

    def command(self, tag: str) -> str:
        # {port} unquoted: the harness fills it in (shlex.quote would quote the braces)
        server = " ".join([shlex.join([sys.executable, str(FAULT_SERVER), "--port"]), "{port}",
                           shlex.join(["--mode", "clean", "--tag", tag])])
        return f"{self.prefix}sh -c {shlex.quote(self.before + 'exec ' + server)} {self.after}"


def arms(received: Path, daemon_tag: str) -> tuple[ShellArm, ShellArm]:
    keep = f'printf "%s\\n" "$HF_TOKEN" "$OPENAI_API_KEY" "$@" > {shlex.quote(str(received))}; '
    secretive = ShellArm(SECRETIVE, "clean", prefix=f"env HF_TOKEN={HF} OPENAI_API_KEY={OPENAI} ",
                         before=keep, after=f"sh --api-key {FLAG} --hf-token={SHORT}")
    sleeper = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(300)' {daemon_tag}"
    daemon = ShellArm(DAEMON, "clean", before=f"(setsid {sleeper} &); ")
    return secretive, daemon


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("hostile")
    tag, daemon_tag = f"hostile-{uuid.uuid4().hex}", f"daemon-{uuid.uuid4().hex}"
    received = workdir / "received.txt"  # outside the data dir: what the server got
    try:
        run = run_cli(workdir, "hostile", arms(received, daemon_tag), tag)
        yield run, received, daemon_tag
    finally:
        for pid in pids_tagged(daemon_tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def secret_hits(data: bytes) -> list[str]:
    return [secret for secret in PLANTED if secret.encode() in data]


def test_no_table_or_view_of_the_warehouse_holds_a_secret(hostile_run):
    run, _, _ = hostile_run
    with duckdb.connect(str(run.warehouse), read_only=True) as con:
        relations = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()]
        assert {"runs", "restarts", "published_entries"} <= set(relations)
        found = {}
        for relation in relations:
            rows = con.execute(f'SELECT CAST(COLUMNS(*) AS VARCHAR) FROM "{relation}"').fetchall()
            text = json.dumps(rows, default=str).encode()
            if hits := secret_hits(text):
                found[relation] = hits
    assert found == {}
    row = restart(run, SECRETIVE)
    assert "<redacted>" in row["command"] and "<redacted>" in row["effective_config"]
    sweep_toml, = query(run.warehouse, "SELECT sweep_toml FROM runs WHERE run_id = ?",
                        [run.run_id])
    assert sweep_toml["sweep_toml"].count("<redacted>") == 4


def _bytes(path: Path) -> bytes:
    """A file's bytes; nothing for a SQLite journal that went between listing and reading
    (the last connection to airflow.db closing folds it into airflow.db, read too)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        if path.name.endswith(("-wal", "-journal", "-shm")):
            return b""
        raise


def test_no_file_benchledger_wrote_holds_a_secret(hostile_run):
    """Raw files, manifests, server logs, the Airflow metadata DB (XCom, rendered fields,
    the DAG's code), the task logs, the exports and report.html: every file under the data
    dir, as bytes; the warehouse file; what the terminal showed."""
    run, received, _ = hostile_run
    # The server got every value as written (its script wrote them outside the data dir).
    assert received.read_text().split("\n")[:5] == [HF, OPENAI, "--api-key", FLAG,
                                                    f"--hf-token={SHORT}"], run.output
    assert restart(run, SECRETIVE)["status"] == "ok"
    assert published(run, SECRETIVE), "the secretive arm measured nothing publishable"
    files = [p for p in run.data_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    # journals first: one that goes before it is read has gone into its database, read after
    files.sort(key=lambda p: not p.name.endswith(("-wal", "-journal", "-shm")))
    names = {p.name for p in files}
    assert {"airflow.db", "run.json", "restart.json", "report.html", "entries.md"} <= names
    found = {str(p): hits for p in files if (hits := secret_hits(_bytes(p)))}
    found |= {str(p): hits for p in run.warehouse.parent.glob(f"{run.warehouse.name}*")
              if (hits := secret_hits(p.read_bytes()))}
    if hits := secret_hits(run.output.encode()):
        found["the terminal"] = hits
    assert found == {}


def test_a_daemon_the_server_left_is_stopped_and_named(hostile_run):
    run, _, daemon_tag = hostile_run
    assert processes_tagged(daemon_tag) == [], "the daemon survived the teardown"
    assert processes_tagged(run.tag) == [], "a server survived the teardown"
    row = restart(run, DAEMON)
    assert row["status"] == "ok"  # its windows count: it measured like any server
    stray, = json.loads(row["stray_processes"])
    assert daemon_tag in stray["command"] and stray["why"] == "had left the server's process group"
    assert stray["signal"] == "SIGTERM" and not stray["alive"]
    assert daemon_tag in row["stop_status"]
    assert restart(run, SECRETIVE)["stray_processes"] is None
    # The run says so: finalize fails, the terminal names the process, the entries stand.
    assert run.tasks["finalize"] == "failed" and run.exit_status == 1, run.output
    assert f"{DAEMON} r0: its teardown had to stop 1 process(es)" in run.output
    assert daemon_tag in run.output
    assert published(run, DAEMON)
    assert run.tasks["load"] == "success" and run.tasks["derive"] == "success", run.output
