"""The fault suite: servers that fail in every way we know of, driven end to end the way a
user runs a sweep (`benchledger run` in a child process, Airflow dag.test, DuckDB).

One sweep holds one `server = "command"` arm per fault (tests/faults/fault_server.py in
a mode), a clean arm as the control, and two external arms: one at a fault server the test
started itself, which exits in the middle of a stream (benchledger cannot watch its
process), one whose server answers the run's preflight and is gone when its restart
starts. One Airflow run covers them all. A second, small run holds the warehouse's file
lock from another process while the run loads.
docs/faults.md is the table of what each fault leaves in the warehouse and what the
operator sees; these tests are its evidence.

For every fault: every request is a row with a status (and an error when it did not
complete); every window balances (submitted = completed + failed + unresolved); the
teardown ran and no server is left; nothing from a damaged window is published (nor
exported); the DAG run's state and the CLI's exit status and lines say what happened; and
loading the run's raw files again adds nothing.

Request numbering (the fault server counts POSTs from 1): every arm runs one warm-up at
concurrency 1, so request 1 is the warm-up `w0000` and request n >= 2 is `m{n-2:04d}`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from benchledger.local.run import sweep_airflow_home
from benchledger.raw.layout import RunLayout, read_json
from benchledger.warehouse.db import connect
from benchledger.warehouse.load import load_run_dir
from tests.conftest import pids_tagged
from tests.sweeps import NO_CLOCK, command_arm, defaults, sweep, write_sweep

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
FAULT_SERVER = REPO / "tests" / "faults" / "fault_server.py"
CLI_TIMEOUT_S = 900  # the whole `benchledger run`; a hung run fails the suite, not CI

WARMUP = 1
MAX_TOKENS = 8
CLEAN_OUTPUT_TOKENS = 8  # the fault server streams min(8, max_tokens) words, usage says so
DRAIN_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 10.0
# Definite refusals (404 on every readiness path, 401) get a long readiness bound, so an
# arm that polls them for the whole bound is told apart from one that gives up at once.
REFUSAL_READY_TIMEOUT_S = 20.0
REFUSED_READY_TIMEOUT_S = 3.0  # connection refused: not definite, polled for the bound
# Rates no server here can reach: 8 tokens per request, streamed in ~40 ms.
IMPOSSIBLE_RATE_TOK_S = 1e6
STATUSES = {"completed", "failed", "unresolved"}


@dataclass(frozen=True)
class Fault:
    """One arm of the fault sweep and what its requests must look like afterwards."""

    arm: str  # no digits: CLI lines are matched by arm name and by the status code
    mode: str  # fault_server.py --mode
    hits: tuple[int, ...] = ()  # request numbers the fault hits (1 = the warm-up)
    requests: int = 5
    hit_statuses: frozenset[str] = frozenset({"failed"})  # what a hit request may become
    http_status: int | None = None  # the status a hit request must record
    damaged: bool = False  # nothing of this arm may ever be published
    extra_keys: dict = field(default_factory=dict)

    def command(self, tag: str) -> str:
        nth = ["--nth", ",".join(map(str, self.hits))] if self.hits else []
        argv = [sys.executable, str(FAULT_SERVER), "--port", "{port}", "--mode", self.mode,
                *nth, "--tag", tag]
        return " ".join(part if part == "{port}" else shlex.quote(part) for part in argv)


def request_suffix(number: int) -> str:
    """The request id's last part for the fault server's request `number`."""
    return f"w{number - 1:04d}" if number <= WARMUP else f"m{number - WARMUP - 1:04d}"


EITHER = frozenset({"failed", "completed"})
ANY_STATUS = frozenset(STATUSES)
FAULTS = (
    Fault("clean", "clean"),
    # The process exits in the middle of request 8 (m0006): 6 completed before it, enough
    # for n >= 5, so only the crash itself can keep this arm from publishing.
    Fault("dies", "exit-mid-stream", hits=(8,), requests=8, damaged=True),
    # The warm-up and the last measured request hang with no byte after the headers.
    Fault("hang", "hang", hits=(1, 6), hit_statuses=frozenset({"unresolved"})),
    Fault("garbage", "garbage-line", hits=(3, 6), hit_statuses=EITHER),
    Fault("truncated", "truncated-json", hits=(3, 6), hit_statuses=EITHER),
    Fault("nonutf", "non-utf8-byte", hits=(3, 6), hit_statuses=EITHER),
    Fault("nodone", "no-done", hits=(3, 6)),
    Fault("ratelimited", "http-429", hits=(3, 6), http_status=429),
    Fault("servererror", "http-500", hits=(3, 6), http_status=500),
    Fault("unavailable", "http-503", hits=(3, 6), http_status=503),
    Fault("reset", "reset", hits=(3, 6)),
    Fault("oddint", "data-42", hits=(3, 6), hit_statuses=EITHER),
    Fault("oddchoices", "choices-str", hits=(3, 6), hit_statuses=EITHER),
    # One impossible count among 6 measured requests: even if it counted as a failure,
    # 5 would complete (n >= 5), so only a usage rule can block these arms.
    Fault("negusage", "usage-negative", hits=(5,), requests=6, hit_statuses=ANY_STATUS,
          damaged=True),
    Fault("hugeusage", "usage-absurd", hits=(5,), requests=6, hit_statuses=ANY_STATUS,
          damaged=True),
    Fault("overmax", "usage-over-max", hits=(5,), requests=6, hit_statuses=ANY_STATUS,
          damaged=True),
    Fault("nonint", "usage-non-integer", hits=(3, 5, 7), requests=8,
          hit_statuses=ANY_STATUS, damaged=True),
    # No request reports prompt_tokens: output-token rates may publish, nothing built on
    # prompt tokens may.
    Fault("noprompt", "usage-no-prompt", hits=tuple(range(1, 7)),
          hit_statuses=frozenset({"completed"})),
    Fault("notfound", "health-404", damaged=True,
          extra_keys={"ready_timeout_s": REFUSAL_READY_TIMEOUT_S}),
    Fault("unauthorized", "health-401", damaged=True,
          extra_keys={"ready_timeout_s": REFUSAL_READY_TIMEOUT_S}),
)
BY_ARM = {fault.arm: fault for fault in FAULTS}
# An independent (external) server that exits in the middle of request 8, started by the
# test: benchledger has no process to watch, only what the server answers.
EXTERNAL_DIES = Fault("extdies", "exit-mid-stream", hits=(8,), requests=8, damaged=True)
# External: a server that answers `benchledger run`'s preflight and then stops listening, so
# its restart meets a refused connection (a server gone between the check and the restart).
REFUSED_ARM = "refused"
EXTERNAL_ARMS = (EXTERNAL_DIES.arm, REFUSED_ARM)
NO_WINDOW_ARMS = ("notfound", "unauthorized", REFUSED_ARM)
WINDOW_FAULTS = [f for f in (*FAULTS, EXTERNAL_DIES) if f.arm not in NO_WINDOW_ARMS]
DAMAGED_ARMS = {f.arm for f in FAULTS if f.damaged} | {EXTERNAL_DIES.arm, REFUSED_ARM}
CRASH_WORDS = ("crash", "died", "ended", "exited", "gone")
# What the terminal must name for an arm whose restart failed (any one of these words).
CLI_CAUSES = {"dies": CRASH_WORDS, EXTERNAL_DIES.arm: CRASH_WORDS, "notfound": ("404",),
              "unauthorized": ("401",), REFUSED_ARM: ("connecterror", "refused")}
USAGE_MODES = {"usage-negative", "usage-absurd", "usage-over-max", "usage-non-integer",
               "usage-no-prompt"}
USAGE_VALUES = {"negusage": -CLEAN_OUTPUT_TOKENS, "hugeusage": 10**9,
                "overmax": MAX_TOKENS + 5}


# --- running sweeps the way a user does --------------------------------------------------


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fault_sweep(name: str, faults, tag: str, external: dict[str, dict] | None = None) -> dict:
    """The sweep: one command arm per fault, plus external arms (name -> their keys)."""
    arms = [command_arm(fault.arm, fault.command(tag), model="fault-model",
                        requests=fault.requests, **fault.extra_keys) for fault in faults]
    arms += [{"name": arm, "server": "external", "model": "fault-model", **arm_keys}
             for arm, arm_keys in (external or {}).items()]
    return sweep(name, arms, defaults=defaults(
        requests=5, warmup=WARMUP, restarts=1, max_tokens=MAX_TOKENS, clock=NO_CLOCK,
        concurrency=[1], drain_timeout_s=DRAIN_TIMEOUT_S, request_timeout_s=REQUEST_TIMEOUT_S,
        ready_timeout_s=READY_TIMEOUT_S))


@dataclass
class CliRun:
    """One `benchledger run` and everything it left behind."""

    sweep_name: str
    exit_status: int
    output: str  # stdout + stderr, what the operator saw
    warehouse: Path
    data_dir: Path
    run_id: str
    dag_state: str
    tasks: dict[str, str]
    tag: str  # in every fault server's argv: finds any left running


def run_cli(workdir: Path, name: str, faults, tag: str,
            external: dict[str, dict] | None = None) -> CliRun:
    """`benchledger run SWEEP --warehouse W` in a child process, as a user types it.
    Output goes to files, not pipes: servers spawned by tasks could inherit a pipe."""
    sweep, warehouse, data = workdir / f"{name}.toml", workdir / "wh.duckdb", workdir / "data"
    write_sweep(sweep, fault_sweep(name, faults, tag, external))
    out, err = workdir / "cli.out", workdir / "cli.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        status = subprocess.run(
            [sys.executable, "-m", "benchledger.cli", "run", str(sweep), "--warehouse",
             str(warehouse), "--data-dir", str(data)],
            stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, cwd=REPO,
            timeout=CLI_TIMEOUT_S, check=False).returncode
    output = out.read_text(errors="replace") + err.read_text(errors="replace")
    try:
        run_id, state, tasks = airflow_outcome(data, name)
    except (sqlite3.Error, ValueError) as exc:
        raise AssertionError(f"no Airflow run of {name} ({exc}); the CLI said:\n{output}") from exc
    return CliRun(name, status, output, warehouse, data, run_id, state, tasks, tag)


def airflow_outcome(data_dir: Path, sweep_name: str) -> tuple[str, str, dict[str, str]]:
    """The sweep DAG run's id, state and task states, from the sweep's own metadata DB."""
    dag_id = f"benchledger_{sweep_name}"
    with sqlite3.connect(sweep_airflow_home(data_dir, sweep_name) / "airflow.db") as db:
        (run_id, state), = db.execute("SELECT run_id, state FROM dag_run WHERE dag_id = ?",
                                      [dag_id]).fetchall()
        tasks = dict(db.execute("SELECT task_id, state FROM task_instance "
                                "WHERE dag_id = ? AND run_id = ?", [dag_id, run_id]).fetchall())
    return run_id, state, tasks


def task_tries(run: CliRun) -> dict[str, int]:
    """task_id -> try_number of the sweep run's tasks, from its metadata DB."""
    with sqlite3.connect(sweep_airflow_home(run.data_dir, run.sweep_name) / "airflow.db") as db:
        return dict(db.execute("SELECT task_id, try_number FROM task_instance "
                               "WHERE dag_id = ? AND run_id = ?",
                               [f"benchledger_{run.sweep_name}", run.run_id]).fetchall())


def query(warehouse: Path, sql: str, params=()) -> list[dict]:
    """Rows as dicts over a read-only connection that is closed again at once."""
    with duckdb.connect(str(warehouse), read_only=True) as con:
        cursor = con.execute(sql, list(params))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def processes_tagged(tag: str) -> list[str]:
    """Command lines of live (non-zombie) processes whose argv holds `tag`."""
    found = []
    for pid in pids_tagged(tag):
        with contextlib.suppress(OSError):  # ended since
            argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
            found.append(" ".join(a.decode(errors="replace") for a in argv if a))
    return found


# --- the fault sweep (one Airflow run) -----------------------------------------------------


def start_fault_server(fault: Fault, tag: str, log_path: Path) -> tuple[subprocess.Popen, str]:
    """A fault server the test runs itself (an external arm's server); waits for health."""
    port = closed_port()
    argv = shlex.split(fault.command(tag).replace("{port}", str(port)))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    base_url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return proc, base_url
        assert proc.poll() is None, f"fault server exited ({proc.returncode}); see {log_path}"
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"fault server not listening after 30 s; see {log_path}")


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory) -> CliRun:
    workdir, tag = tmp_path_factory.mktemp("faults"), f"fault-suite-{uuid.uuid4().hex}"
    # Its own tag: the servers benchledger started are the ones that must not be left.
    proc, base_url = start_fault_server(EXTERNAL_DIES, f"{tag}-external",
                                        workdir / "extdies.log")
    gone_log = workdir / "refused.log"
    gone, gone_url = start_fault_server(Fault(REFUSED_ARM, "clean"), f"{tag}-gone", gone_log)
    stopper = threading.Thread(target=_stop_after_the_probe, args=(gone, gone_log), daemon=True)
    stopper.start()
    external = {EXTERNAL_DIES.arm: {"base_url": base_url, "requests": EXTERNAL_DIES.requests},
                REFUSED_ARM: {"base_url": gone_url, "ready_timeout_s": REFUSED_READY_TIMEOUT_S}}
    try:
        return run_cli(workdir, "faults", FAULTS, tag, external)
    finally:
        for server in (proc, gone):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)  # it should have exited by itself
            server.wait(timeout=30)
        stopper.join(timeout=5)


def _stop_after_the_probe(server: subprocess.Popen, log_path: Path) -> None:
    """Kill the refused arm's server once it has answered `benchledger run`'s preflight
    probe (its log says so, after the answer's last byte): the run found it answering, and
    its restart, seconds later, finds nothing listening."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and server.poll() is None:
        if "preflight probe: answered" in log_path.read_text(errors="replace"):
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)


def restart(run: CliRun, arm: str) -> dict:
    row, = query(run.warehouse, "SELECT * FROM restarts WHERE run_id = ? AND arm = ?",
                 [run.run_id, arm])
    return row


def window_and_requests(run: CliRun, arm: str) -> tuple[dict, dict[str, dict]]:
    windows = query(run.warehouse, "SELECT * FROM windows WHERE run_id = ? AND arm = ?",
                    [run.run_id, arm])
    assert len(windows) == 1, f"{arm}: expected its one window, found {len(windows)} (lost?)"
    window = windows[0]
    rows = query(run.warehouse, "SELECT * FROM request_records WHERE window_id = ?",
                 [window["window_id"]])
    return window, {r["request_id"].rsplit("/", 1)[1]: r for r in rows}


def published(run: CliRun, arm: str | None = None) -> list[dict]:
    sql = "SELECT * FROM published_entries WHERE run_id = ?"
    return query(run.warehouse, sql + (" AND arm = ?" if arm else ""),
                 [run.run_id] + ([arm] if arm else []))


@pytest.mark.parametrize("fault", WINDOW_FAULTS, ids=lambda f: f.arm)
def test_every_request_is_a_row_and_the_window_balances(fault_run, fault):
    window, rows = window_and_requests(fault_run, fault.arm)
    measured = {k: r for k, r in rows.items() if not r["is_warmup"]}
    warmup = {k: r for k, r in rows.items() if r["is_warmup"]}
    assert window["submitted"] == fault.requests == len(measured)
    assert window["warmup_submitted"] == WARMUP == len(warmup)
    assert window["submitted"] == window["completed"] + window["failed"] + window["unresolved"]
    for status in STATUSES:
        assert window[status] == sum(r["status"] == status for r in measured.values()), status
    for suffix, row in rows.items():
        assert row["status"] in STATUSES, (suffix, row["status"])
        if row["status"] != "completed":
            assert row["error"], f"{fault.arm} {suffix}: {row['status']} without an error"


@pytest.mark.parametrize("fault", WINDOW_FAULTS, ids=lambda f: f.arm)
def test_each_request_records_what_happened_to_it(fault_run, fault):
    """Hit requests end as the fault allows; the others are served cleanly and complete
    with the server's own usage (an odd request never takes its window down with it)."""
    _, rows = window_and_requests(fault_run, fault.arm)
    crashed_at = fault.hits[0] if fault.mode == "exit-mid-stream" else None
    for number in range(1, WARMUP + fault.requests + 1):
        row = rows[request_suffix(number)]
        where = f"{fault.arm} request {number} ({request_suffix(number)})"
        if crashed_at and number > crashed_at:  # the server is gone: refused connections
            assert row["status"] == "failed" and row["error"], where
        elif number in fault.hits:
            assert row["status"] in fault.hit_statuses, (where, row["status"], row["error"])
            if fault.http_status:
                assert row["http_status"] == fault.http_status, where
                assert str(fault.http_status) in row["error"], where
            if row["status"] == "completed" and fault.mode not in USAGE_MODES:
                # An odd event that was skipped must not change what the server reported.
                assert (row["token_source"], row["output_tokens"]) == (
                    "usage", CLEAN_OUTPUT_TOKENS), where
        else:
            assert row["status"] == "completed", (where, row["error"])
            assert (row["token_source"], row["output_tokens"], row["error"]) == (
                "usage", CLEAN_OUTPUT_TOKENS, None), where
            assert row["prompt_tokens"] and row["prompt_tokens"] > 0, where



def test_teardown_ran_for_every_restart_and_no_server_is_left(fault_run):
    restarts = query(fault_run.warehouse, "SELECT arm, stopped_at, stop_status, pid "
                                          "FROM restarts WHERE run_id = ?", [fault_run.run_id])
    assert {r["arm"] for r in restarts} == set(BY_ARM) | set(EXTERNAL_ARMS)
    for r in restarts:
        assert r["stopped_at"] is not None and r["stop_status"], r
    stops = {task: state for task, state in fault_run.tasks.items()
             if task.endswith(".stop_server")}
    assert len(stops) == len(restarts)
    assert set(stops.values()) == {"success"}, stops
    assert processes_tagged(fault_run.tag) == []


@pytest.mark.parametrize("arm", ["dies", EXTERNAL_DIES.arm])
def test_a_crashed_server_is_a_failed_restart_whose_numbers_never_publish(fault_run, arm):
    row = restart(fault_run, arm)
    assert row["status"] in ("crashed", "failed") and row["error"], row
    window, _ = window_and_requests(fault_run, arm)  # kept in the warehouse, marked
    assert window["completed"] >= window["min_requests"]  # only the crash can block it
    healthy = query(fault_run.warehouse,
                    "SELECT success FROM validations WHERE run_id = ? AND subject = ? "
                    "AND expectation = 'restart_healthy'", [fault_run.run_id, row["restart_id"]])
    assert healthy and not any(v["success"] for v in healthy)
    assert published(fault_run, arm) == []
    # A crash is a result: its measure task failed once, not retried (the sweep's default
    # retries = 1 would have asked the dead server again after retry_delay_s)
    measures = {task: tries for task, tries in task_tries(fault_run).items()
                if task.startswith(f"{arm}__r") and ".measure_" in task}
    assert measures and set(measures.values()) == {1}, measures


def test_a_hung_warmup_is_cancelled_at_the_drain_deadline(fault_run):
    window, rows = window_and_requests(fault_run, "hang")
    warmup, first_measured, hung = rows["w0000"], rows["m0000"], rows[request_suffix(6)]
    assert warmup["status"] == "unresolved" and warmup["error"], warmup
    assert "drain deadline" in warmup["error"], warmup  # cancelled by the drain's bound
    # ... and so before its own request_timeout_s could end it: the first measured request
    # went out after the drain deadline and before the hung request's deadline
    waited_s = (first_measured["t_submit_ns"] - warmup["t_submit_ns"]) / 1e9
    assert DRAIN_TIMEOUT_S <= waited_s < REQUEST_TIMEOUT_S, (
        f"the hung warm-up held the window {waited_s:.1f} s (drain_timeout_s = "
        f"{DRAIN_TIMEOUT_S:g}, request_timeout_s = {REQUEST_TIMEOUT_S:g})")
    assert hung["status"] == "unresolved" and hung["error"]
    assert window["drain_status"] == "incomplete" and window["unresolved"] == 1


@pytest.mark.parametrize("arm", ["notfound", "unauthorized"])
def test_a_definite_refusal_fails_the_restart_at_once(fault_run, arm):
    row = restart(fault_run, arm)
    cause = CLI_CAUSES[arm][0]
    assert row["status"] == "failed" and cause in row["error"], row
    took_s = (row["stopped_at"] - row["started_at"]).total_seconds()
    # over before its ready_timeout_s: polled to the deadline, it would last at least that
    assert took_s < REFUSAL_READY_TIMEOUT_S, (
        f"{arm}: a definite HTTP {cause} was polled for {took_s:.1f} s "
        f"(ready_timeout_s = {REFUSAL_READY_TIMEOUT_S:g})")


def test_connection_refused_at_start_fails_the_restart_with_its_cause(fault_run):
    row = restart(fault_run, REFUSED_ARM)
    assert row["status"] == "failed", row
    assert any(word in row["error"].lower() for word in CLI_CAUSES[REFUSED_ARM]), row
    assert query(fault_run.warehouse, "SELECT * FROM windows WHERE run_id = ? AND arm = ?",
                 [fault_run.run_id, REFUSED_ARM]) == []


@pytest.mark.parametrize("arm", sorted(USAGE_VALUES))
def test_impossible_usage_is_recorded_and_blocked_never_a_rate(fault_run, arm):
    fault, value = BY_ARM[arm], USAGE_VALUES[arm]
    window, rows = window_and_requests(fault_run, arm)
    hit = rows[request_suffix(fault.hits[0])]
    assert hit["output_tokens"] == value or "completion_tokens" in (hit["error"] or ""), hit
    assert_blocked_by_a_failed_rule(fault_run, window)
    assert published(fault_run, arm) == []
    for entry in query(fault_run.warehouse, "SELECT metric, statistic, value FROM entries "
                                            "WHERE run_id = ? AND arm = ? AND unit = 'tok/s' "
                                            "AND value IS NOT NULL", [fault_run.run_id, arm]):
        assert 0 <= entry["value"] < IMPOSSIBLE_RATE_TOK_S, entry


def test_non_integer_usage_is_never_a_number(fault_run):
    fault = BY_ARM["nonint"]
    window, rows = window_and_requests(fault_run, "nonint")
    for number in fault.hits:  # true, 1.5 and "7" in turn
        hit = rows[request_suffix(number)]
        assert hit["output_tokens"] is None, hit
        assert "completion_tokens" in (hit["error"] or ""), hit
    assert_blocked_by_a_failed_rule(fault_run, window)
    assert published(fault_run, "nonint") == []


def assert_blocked_by_a_failed_rule(run: CliRun, window: dict) -> None:
    failed = query(run.warehouse, "SELECT expectation FROM validations WHERE run_id = ? "
                                  "AND subject = ? AND NOT success",
                   [run.run_id, window["window_id"]])
    assert failed, f"no rule failed on {window['window_id']}"
    entries = query(run.warehouse, "SELECT blocked_by FROM entries WHERE run_id = ? AND arm = ?",
                    [run.run_id, window["arm"]])
    assert entries and all(e["blocked_by"] for e in entries)


def test_missing_prompt_tokens_are_null_and_nothing_built_on_them_publishes(fault_run):
    _, rows = window_and_requests(fault_run, "noprompt")
    assert all(r["prompt_tokens"] is None for r in rows.values())  # never 0
    on_prompts = [e for e in published(fault_run, "noprompt")
                  if e["numerator"] in ("input_plus_output_tokens", "prompt_tokens")]
    assert on_prompts == []


def test_nothing_damaged_is_published_or_exported(fault_run):
    entries = published(fault_run)
    assert not {e["arm"] for e in entries} & DAMAGED_ARMS
    for e in entries:  # a window that lost requests publishes only what it says it is
        if e["n_failed"] or e["n_unresolved"]:
            assert e["population"] in ("completed_only", "finished_only"), e
    exported = RunLayout(fault_run.data_dir, fault_run.run_id).export_dir / "entries.json"
    ids = {e["entry_id"] for e in json.loads(exported.read_text())}
    assert ids == {e["entry_id"] for e in entries}


def test_the_clean_arm_publishes_and_says_its_counters_went_unchecked(fault_run):
    entries = published(fault_run, "clean")
    assert {(e["metric"], e["scope"]) for e in entries} >= {("decode_rate", "single_stream"),
                                                          ("throughput", "aggregate")}
    for e in entries:  # the fault server has no /metrics: nothing was reconciled
        texts = " ".join(str(v) for v in e.values() if isinstance(v, str)).lower()
        assert "no counter" in texts, (e["metric"], e["statistic"])


def test_the_dag_run_fails_and_says_which_restarts(fault_run):
    assert fault_run.dag_state == "failed"
    tasks = fault_run.tasks
    assert (tasks["load"], tasks["validate"], tasks["derive"]) == ("success",) * 3
    assert tasks["finalize"] == "failed"


def test_the_cli_exits_non_zero_and_names_each_first_cause(fault_run):
    assert fault_run.exit_status == 1, fault_run.output[-3000:]
    assert f"DAG run {fault_run.run_id}: failed" in fault_run.output
    assert "Traceback (most recent call last)" not in fault_run.output
    lines = fault_run.output.lower().splitlines()
    for arm, causes in CLI_CAUSES.items():
        named = [line for line in lines if arm in line
                 and any(cause in line.replace(arm, "") for cause in causes)]
        assert named, f"no terminal line names {arm!r} with its cause ({' / '.join(causes)})"


def test_loading_the_run_again_adds_nothing(fault_run):
    tables = ("runs", "restarts", "windows", "request_records", "raw_files")
    with connect(fault_run.warehouse) as con:
        before = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
        counts = load_run_dir(con, RunLayout(fault_run.data_dir, fault_run.run_id).run_dir)
        after = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    assert set(counts.values()) == {0}, counts
    assert before == after


# --- the warehouse locked by another process at load time ----------------------------------

# Holds a read-write connection (DuckDB's file lock) from the start of the run until the
# run's log says the load task started, then HOLD_AFTER_LOAD_S longer, then lets go and
# writes when it acquired and released. The log line is Airflow dag.test's
# "[DAG TEST] starting task_id=load"; without it the holder gives up after its bound and
# says so (saw_load_start false), and the test fails naming that.
LOCK_HOLDER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import duckdb
    warehouse, log, marker = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    hold_s, bound_s = float(sys.argv[4]), float(sys.argv[5])
    con = duckdb.connect(warehouse)
    acquired = time.time()
    marker.write_text(json.dumps({"acquired": acquired}))
    deadline, seen = time.monotonic() + bound_s, False
    while time.monotonic() < deadline and not seen:
        seen = log.exists() and "starting task_id=load" in log.read_text(errors="replace")
        time.sleep(0.1)
    if seen:
        time.sleep(hold_s)
    con.close()
    marker.write_text(json.dumps({"acquired": acquired, "released": time.time(),
                                  "saw_load_start": seen}))
""")
HOLD_AFTER_LOAD_S = 4.0
HOLDER_BOUND_S = 600.0


@pytest.fixture(scope="module")
def locked_run(tmp_path_factory) -> tuple[CliRun, dict]:
    workdir = tmp_path_factory.mktemp("lock")
    name, marker = "faultslock", workdir / "holder.json"
    log = workdir / "data" / "logs" / f"{name}.log"
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(workdir / "wh.duckdb"),
                               str(log), str(marker), str(HOLD_AFTER_LOAD_S),
                               str(HOLDER_BOUND_S)], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():  # the lock is held before the run starts
            assert holder.poll() is None and time.monotonic() < deadline, "holder did not start"
            time.sleep(0.1)
        run = run_cli(workdir, name, [BY_ARM["clean"]], f"fault-lock-{uuid.uuid4().hex}")
        holder.wait(timeout=HOLDER_BOUND_S + 60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    return run, json.loads(marker.read_text())


def test_a_locked_warehouse_makes_the_load_wait_then_succeed(locked_run):
    run, holder = locked_run
    assert holder.get("saw_load_start"), f"the load never started while the lock was held: {holder}"
    assert run.tasks["load"] == "success", run.output[-3000:]
    assert run.dag_state == "success" and run.exit_status == 0, run.output[-3000:]
    loaded = query(run.warehouse, "SELECT min(loaded_at) AS first FROM raw_files")[0]["first"]
    assert loaded.timestamp() >= holder["released"], (
        "rows were loaded while another process held the lock")
    _, rows = window_and_requests(run, "clean")
    assert len(rows) == WARMUP + BY_ARM["clean"].requests
    assert published(run, "clean")
    assert "published" in run.output and f"DAG run {run.run_id}: success" in run.output


def test_the_locked_run_left_no_server_behind(locked_run):
    run, _ = locked_run
    manifests = [read_json(p) for p in
                 RunLayout(run.data_dir, run.run_id).run_dir.glob("*/r*/restart.json")]
    assert manifests and all(m.get("stopped_at") for m in manifests), manifests
    assert processes_tagged(run.tag) == []
