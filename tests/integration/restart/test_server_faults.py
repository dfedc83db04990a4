"""Servers under test that fail: through restart.py's own steps, then the warehouse.

Each case drives one restart slot the way the DAG does (launch_restart, await_restart,
measure_restart_workload, stop_restart) against a real server process or a loopback
server (tests/faults/fault_server.py), then loads, validates and derives the run:

- a server that exits in the middle of its ninth stream (external, and started by
  benchledger), or whose process stays but stops answering, is a crashed restart: its
  window is kept (every request a row), nothing of it is published;
- an API key named by arms.api_key_env reaches the server and no raw file or warehouse row;
- a raw folder that cannot be written (a failing writer, a full filesystem) fails the
  step with the path and the errno, and leaves no partial window the loader could take.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchledger.publishing.export import export_run
from benchledger.raw.layout import RunLayout, read_json
from benchledger.raw.records import file_sha256
from benchledger.restart import steps as restart
from benchledger.server import lifecycle
from benchledger.sweep.spec import load_sweep
from benchledger.warehouse.load import load_run_dir
from tests import sweeps
from tests.faults.fault_server import serve_in_thread
from tests.synthetic import derived_warehouse

pytestmark = pytest.mark.integration

FAULT_SERVER = Path(__file__).resolve().parents[2] / "faults" / "fault_server.py"
# Every server here serves /metrics (the secrets case needs it guarded by the key).
SERVES_METRICS = "--metrics"
RUN_ID = "manual__faults"
DEAD_HANDLE = {"base_url": "http://127.0.0.1:9", "pid": None, "port": None, "command": None,
               "command_template": None, "log_path": None}


def write_sweep(tmp_path: Path, arm: dict, **defaults) -> Path:
    """A one-arm, one-workload sweep: 2 warm-ups, then 15 measured requests, one at a time
    (the issue's case: the ninth stream is the seventh measured request)."""
    return sweeps.write_sweep(tmp_path / "sweep.toml", sweeps.sweep("faults", [arm], defaults={
        "requests": 15, "warmup": 2, "max_tokens": 8, **sweeps.NO_CLOCK, "drain_timeout_s": 3,
        **defaults}))


def command_arm(mode: str, *flags: str, name: str = "srv", **keys) -> dict:
    command = (f"{sys.executable} {FAULT_SERVER} --port {{port}} --mode {mode} "
               f"{SERVES_METRICS} {' '.join(flags)}")
    return sweeps.command_arm(name, command, model="fault-model", **keys)


def external_arm(base_url: str, name: str = "ext") -> dict:
    return sweeps.external_arm(name, base_url, model="fault-model")


def run_slot(tmp_path: Path, sweep_path: Path, arm: str) -> tuple[RunLayout, Exception | None]:
    """One restart slot through restart.py's steps; the measure step's error, if any.
    The teardown runs whatever happened, as in the DAG."""
    sweep = load_sweep(sweep_path)
    layout = RunLayout(tmp_path / "data", RUN_ID)
    restart.write_run_manifest(layout, sweep_path)
    handle = restart.launch_restart(layout, sweep, arm, 0)
    error = None
    try:
        restart.await_restart(layout, sweep, arm, 0, handle)
        restart.measure_restart_workload(layout, sweep, arm, 0, handle, "code")
    except Exception as exc:
        error = exc
    finally:
        restart.stop_restart(layout, arm, 0, handle)
    return layout, error


def load_validate_derive(tmp_path: Path, layout: RunLayout):
    """The warehouse side of the run; returns the open connection (caller closes)."""
    return derived_warehouse(layout.run_dir, layout.run_id, tmp_path / "wh.duckdb")


def window_manifest(layout: RunLayout, arm: str, concurrency: int = 1) -> dict:
    return read_json(layout.window_files(arm, 0, "code", concurrency).manifest)


def assert_balanced(window: dict) -> None:
    assert window["submitted"] == window["completed"] + window["failed"] + window["unresolved"]


def assert_nothing_published_and_crash_marked(con, arm: str) -> None:
    assert con.execute("SELECT count(*) FROM published_entries WHERE run_id = ?",
                       [RUN_ID]).fetchone() == (0,)
    status, error = con.execute("SELECT status, error FROM restarts WHERE arm = ?",
                                [arm]).fetchone()
    assert status == "crashed" and f"{RUN_ID}/{arm}/r0/code-c1" in error
    # The crashed restart's window and every one of its requests stay, marked by it.
    windows, requests = con.execute(
        "SELECT count(DISTINCT w.window_id), count(*) FROM windows w "
        "JOIN request_records r USING (window_id) WHERE w.arm = ?", [arm]).fetchone()
    assert windows == 1 and requests == 17  # 2 warm-ups + 15 measured
    blocked = con.execute("SELECT count(*), count(*) FILTER (WHERE blocked_by LIKE "
                          "'%restart_healthy%') FROM entries WHERE arm = ?", [arm]).fetchone()
    assert blocked[0] > 0 and blocked[0] == blocked[1]


# --- a server that dies during a window -------------------------------------------------

@pytest.fixture
def dying_external_server():
    """A server benchledger did not start, which exits in the middle of its 9th stream."""
    port = lifecycle.free_port()
    proc = subprocess.Popen([sys.executable, str(FAULT_SERVER), "--port", str(port),
                             "--mode", "exit-mid-stream", "--nth", "9", SERVES_METRICS],
                            stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        handle = lifecycle.ServerHandle(base, None, None, None, None, None)
        while (lifecycle.server_gone(handle, "/health", timeout_s=1)
               and time.monotonic() < deadline):
            time.sleep(0.1)
        yield base
    finally:  # never left running, whatever failed
        proc.kill()
        proc.wait(timeout=10)


def test_an_external_server_that_dies_mid_window_is_a_crashed_restart(tmp_path,
                                                                      dying_external_server):
    layout, error = run_slot(tmp_path, write_sweep(tmp_path, external_arm(
        dying_external_server)), "ext")
    assert isinstance(error, restart.ServerCrashed)
    assert "the server died during window manual__faults/ext/r0/code-c1" in str(error)
    assert "no longer answers its readiness path" in str(error)
    window = window_manifest(layout, "ext")  # the window's raw files were still written
    assert (window["completed"], window["failed"], window["unresolved"]) == (6, 9, 0)
    assert_balanced(window)
    observed = read_json(layout.window_files("ext", 0, "code", 1).manifest.with_suffix(
        ".observed.json"))
    assert observed["server_after_window"]["alive"] is False
    manifest = read_json(layout.restart_manifest("ext", 0))
    assert manifest["status"] == "crashed"
    assert manifest["crashed_in_window"] == "manual__faults/ext/r0/code-c1"
    con = load_validate_derive(tmp_path, layout)
    try:
        assert_nothing_published_and_crash_marked(con, "ext")
        # Loading the same raw files again adds nothing.
        again = load_run_dir(con, layout.run_dir)
        assert again["requests"] == 0 and again["windows"] == 0
    finally:
        con.close()


def test_a_started_server_that_dies_ends_its_restart_at_that_window(tmp_path):
    layout, error = run_slot(tmp_path, write_sweep(
        tmp_path, command_arm("exit-mid-stream", "--nth", "9"), concurrency=[1, 2]), "srv")
    exited = "exited:3"  # exit-mid-stream's status (the fault server's EXIT_STATUS)
    assert isinstance(error, restart.ServerCrashed)
    assert "server process" in str(error) and exited in str(error)
    assert_balanced(window_manifest(layout, "srv", 1))
    # Checked after the window, not after the whole workload: c2 never ran on a dead server.
    assert not layout.window_files("srv", 0, "code", 2).manifest.exists()
    # A retried measure step must not overwrite the crashed window with a dead server's.
    crashed_window = layout.window_files("srv", 0, "code", 1).manifest.read_bytes()
    with pytest.raises(restart.ServerCrashed, match="not measured: the restart already "
                                                    "crashed"):
        restart.measure_restart_workload(layout, load_sweep(tmp_path / "sweep.toml"), "srv",
                                         0, DEAD_HANDLE, "code")
    assert layout.window_files("srv", 0, "code", 1).manifest.read_bytes() == crashed_window
    manifest = read_json(layout.restart_manifest("srv", 0))
    assert manifest["status"] == "crashed"  # the teardown kept it (not overwritten)
    assert manifest["stop_status"].startswith(f"already ended before stop ({exited})")
    con = load_validate_derive(tmp_path, layout)
    try:
        assert_nothing_published_and_crash_marked(con, "srv")
    finally:
        con.close()


def test_a_server_that_lives_on_but_stops_answering_is_crashed_too(tmp_path):
    layout, error = run_slot(tmp_path, write_sweep(
        tmp_path, command_arm("sicken-mid-stream", "--nth", "9")), "srv")
    assert isinstance(error, restart.ServerCrashed)
    assert "no longer answers its readiness path" in str(error)
    assert "/health: HTTP 503" in str(error)
    manifest = read_json(layout.restart_manifest("srv", 0))
    assert manifest["status"] == "crashed"
    assert manifest["stop_status"].startswith("stopped by SIGTERM")  # it was still running
    con = load_validate_derive(tmp_path, layout)
    try:
        assert_nothing_published_and_crash_marked(con, "srv")
    finally:
        con.close()


# --- secrets ----------------------------------------------------------------------------

SECRET = "sk-fault-9f8e7d6c5b4a"
HF_SECRET = "hf_fault_token_0123456789"


def test_the_api_key_reaches_the_server_and_no_raw_file_or_row(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_FAULT_KEY", SECRET)
    monkeypatch.setenv("VLLM_API_KEY", SECRET)  # recorded by prefix: must be redacted
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)  # a secret by its name
    arm = command_arm("clean", "--require-key-env", "BENCH_FAULT_KEY",
                      api_key_env="BENCH_FAULT_KEY")
    layout, error = run_slot(tmp_path, write_sweep(tmp_path, arm), "srv")
    assert error is None
    window = window_manifest(layout, "srv")
    assert window["completed"] == 15  # the key was accepted: a 401 would fail them all
    # The server is careless: it logged the key, so the log slice had it to redact.
    server_log = (layout.slot_dir("srv", 0) / "server.log").read_text()
    assert f"Authorization: Bearer {SECRET}" in server_log
    observed = read_json(layout.window_files("srv", 0, "code", 1).manifest.with_suffix(
        ".observed.json"))
    assert observed["metrics"]["errors"] == []  # /metrics needed the key and got it
    assert any("Bearer <redacted>" in line for line in observed["log"]["lines"])
    manifest = read_json(layout.restart_manifest("srv", 0))
    environment = manifest["effective_config"]["environment"]
    assert environment["VLLM_API_KEY"] == environment["HF_TOKEN"] == "<redacted>"
    assert manifest["effective_config"]["models"]["data"][0]["owned_by"] == "key <redacted>"
    # server.log is the server's own business; every other raw file holds neither secret.
    for path in sorted(layout.run_dir.rglob("*")):
        if path.is_file() and path.name != "server.log":
            data = path.read_bytes()
            assert SECRET.encode() not in data and HF_SECRET.encode() not in data, path
    con = load_validate_derive(tmp_path, layout)
    try:
        # every column of every table and view, whatever its type (JSON, lists, ...)
        for table, column in con.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'main'").fetchall():
            found = con.execute(f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS '
                                f'VARCHAR) LIKE ? OR CAST("{column}" AS VARCHAR) LIKE ?',
                                [f"%{SECRET}%", f"%{HF_SECRET}%"]).fetchone()
            assert found == (0,), f"{table}.{column}"
        # and the publication: entries, report, manifest, Data Docs
        exported = export_run(con, layout.run_id, tmp_path / "published")
    finally:
        con.close()
    files = [p for p in exported.rglob("*") if p.is_file()]
    assert any(p.name == "entries.json" for p in files)
    for path in files:
        data = path.read_bytes()
        assert SECRET.encode() not in data and HF_SECRET.encode() not in data, path


def test_a_missing_api_key_fails_the_restart_before_a_server_starts(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCH_FAULT_KEY", raising=False)
    sweep_path = write_sweep(tmp_path, command_arm("clean", api_key_env="BENCH_FAULT_KEY"))
    layout = RunLayout(tmp_path / "data", RUN_ID)
    restart.write_run_manifest(layout, sweep_path)
    with pytest.raises(lifecycle.ApiKeyMissing, match="BENCH_FAULT_KEY, which is not set"):
        restart.launch_restart(layout, load_sweep(sweep_path), "srv", 0)
    manifest = read_json(layout.restart_manifest("srv", 0))
    assert manifest["status"] == "failed" and "BENCH_FAULT_KEY" in manifest["error"]
    assert "pid" not in manifest  # nothing was started for a restart that cannot measure


# --- raw files that cannot be written ---------------------------------------------------

@pytest.fixture
def loopback_server():
    server, base = serve_in_thread(SERVES_METRICS)
    yield base
    server.shutdown()
    server.server_close()


def leftover_tmp_files(layout: RunLayout) -> list[Path]:
    return sorted(layout.run_dir.rglob("*.tmp"))


def test_a_full_disk_while_writing_the_requests_leaves_no_partial_window(
        tmp_path, monkeypatch, loopback_server):
    real_write_table = pq.write_table

    def write_half_then_fail(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half a file")  # what a full disk leaves behind
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", write_half_then_fail)
    layout, error = run_slot(tmp_path, write_sweep(tmp_path, external_arm(loopback_server)),
                             "ext")
    monkeypatch.setattr(pq, "write_table", real_write_table)
    assert isinstance(error, restart.RawWriteError)
    parquet, manifest_path = (layout.window_files("ext", 0, "code", 1).requests,
                              layout.window_files("ext", 0, "code", 1).manifest)
    assert f"{parquet}.tmp: ENOSPC (No space left on device)" in str(error)
    assert "manual__faults/ext/r0/code-c1" in str(error)
    assert leftover_tmp_files(layout) == []
    assert not parquet.exists() and not manifest_path.exists()
    assert not manifest_path.with_suffix(".observed.json").exists()
    manifest = read_json(layout.restart_manifest("ext", 0))
    assert manifest["status"] == "failed" and "ENOSPC" in manifest["error"]
    assert manifest["unwritten_windows"] == ["manual__faults/ext/r0/code-c1"]
    con = load_validate_derive(tmp_path, layout)
    try:
        assert con.execute("SELECT count(*) FROM windows").fetchone() == (0,)
        assert con.execute("SELECT status FROM restarts").fetchone() == ("failed",)
        failed = {rule for rule, in con.execute(
            "SELECT expectation FROM validations WHERE NOT success").fetchall()}
        assert {"restart_healthy", "windows_present"} <= failed
        assert con.execute("SELECT count(*) FROM published_entries").fetchone() == (0,)
    finally:
        con.close()


def test_a_restart_manifest_that_cannot_be_written_is_named(tmp_path, monkeypatch,
                                                            loopback_server):
    sweep_path = write_sweep(tmp_path, external_arm(loopback_server))
    sweep = load_sweep(sweep_path)
    layout = RunLayout(tmp_path / "data", RUN_ID)
    restart.write_run_manifest(layout, sweep_path)
    handle = restart.launch_restart(layout, sweep, "ext", 0)
    real_write_text = Path.write_text

    def no_space_for_json(self, *args, **kwargs):
        if self.name.endswith(".json.tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", no_space_for_json)
    with pytest.raises(restart.RawWriteError) as caught:
        restart.await_restart(layout, sweep, "ext", 0, handle)
    assert str(caught.value) == (
        f"{RUN_ID}/ext/r0: the restart manifest could not be written: "
        f"{layout.restart_manifest('ext', 0)}: ENOSPC (No space left on device)")
    with pytest.raises(restart.RawWriteError) as caught:
        restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code")
    text = str(caught.value)  # the window failed, and recording that failed too: both said
    assert "its raw files could not be written" in text and ".observed.json.tmp: ENOSPC" in text
    assert "recording it failed too" in text and "restart.json: ENOSPC" in text
    assert leftover_tmp_files(layout) == []


@pytest.fixture
def small_filesystem(tmp_path):
    """A 512 KiB tmpfs at tmp_path/small (needs root and mount rights; skipped without)."""
    mountpoint = tmp_path / "small"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs",
                              str(mountpoint)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def test_a_really_full_filesystem_mid_run_fails_the_window_cleanly(tmp_path,
                                                                   small_filesystem,
                                                                   loopback_server):
    sweep_path = write_sweep(tmp_path, external_arm(loopback_server))
    sweep = load_sweep(sweep_path)
    layout = RunLayout(small_filesystem, RUN_ID)
    restart.write_run_manifest(layout, sweep_path)
    handle = restart.launch_restart(layout, sweep, "ext", 0)
    restart.await_restart(layout, sweep, "ext", 0, handle)
    filler = small_filesystem / "filler"
    with open(filler, "wb", buffering=0) as out:  # the disk fills up while the run is going
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with pytest.raises(restart.RawWriteError, match="ENOSPC") as caught:
        restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code")
    assert "manual__faults/ext/r0/code-c1" in str(caught.value)
    assert leftover_tmp_files(layout) == []
    assert not layout.window_files("ext", 0, "code", 1).manifest.exists()
    filler.unlink()  # space again: the retried step writes the whole window
    summaries = restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code")
    assert summaries[0]["completed"] == 15
    manifest = read_json(layout.restart_manifest("ext", 0))
    assert manifest["status"] == "external" and not manifest.get("unwritten_windows")
    assert window_manifest(layout, "ext")["requests_file_sha256"] == file_sha256(
        layout.window_files("ext", 0, "code", 1).requests)
