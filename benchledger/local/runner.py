"""Run one DAG to completion with ``dag.test()``: no scheduler, executor or api-server.

Airflow reads its configuration once, at import time, so each run happens in a fresh
process whose environment comes from :func:`airflow_env`.  Callers use
:func:`run_in_subprocess`; ``python -m benchledger.local.runner`` is what that process executes.

Exit codes: 0 = DagRun success, 1 = DagRun failed, 2 = could not run it at all.
Airflow's verbose output (task logs included) goes to the log file; stdout gets only the
``task_id: state`` summary and stderr at most one line.  See docs/runner.md for the why.

The runner never outlives the process that started it: when that parent dies (even by
SIGKILL) the runner stops the servers its tasks started and exits, and a caller whose
runner died stops what it left behind (:func:`benchledger.restart.steps.stop_leftover_servers`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import gc
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchledger.local import execution_api, warm
from benchledger.operators import FAILURES_ENV
from benchledger.settings import settings
from benchledger.warehouse import POOL_DESCRIPTION, WAREHOUSE_POOL, WAREHOUSE_POOL_SLOTS

if TYPE_CHECKING:  # Airflow is imported after airflow_env() has set its environment
    from airflow.models.dagrun import DagRun
    from airflow.sdk import DAG

EXIT_CODES = {"success": 0, "failed": 1}
SETUP_ERROR = 2
# Put on PYTHONPATH so `-m benchledger.local.runner` (and DAG files importing the project) resolve
# whether or not the project is pip-installed.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
_LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
# Linux prctl(2): deliver a signal to this process when its parent dies.
_PR_SET_PDEATHSIG = 1
# How often the runner checks that the process that started it is still there.
PARENT_CHECK_S = 0.25
# The exit status of a runner that gave up because its parent died (128 + SIGTERM).
ABANDONED = 128 + signal.SIGTERM
# The embedded run's Airflow metadata DB, in its AIRFLOW_HOME.
METADATA_DB = "airflow.db"


def airflow_env(airflow_home: Path, dags_folder: Path) -> dict[str, str]:
    """Environment variables to set before the runner process imports Airflow."""
    home = Path(airflow_home).resolve()
    return {
        "AIRFLOW_HOME": str(home),
        # Ignore any airflow.cfg the caller's environment points at.
        "AIRFLOW_CONFIG": str(home / "airflow.cfg"),
        # dag.test() re-parses and serializes the whole dags-folder bundle; a DAG outside
        # it fails with "the dag is not serialized".
        "AIRFLOW__CORE__DAGS_FOLDER": str(Path(dags_folder).resolve()),
        # Exactly one bundle, the dags folder (the default, pinned against inherited config):
        # dag.test() parses every file of the bundle that owns the DAG on each call.
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
            [{"name": "dags-folder", "classpath": _LOCAL_BUNDLE, "kwargs": {}}]
        ),
        # sqlite needs an absolute path (settings.py refuses relative ones).
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / METADATA_DB}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # An inherited unit-test mode would swap in Airflow's test config.
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        # Plain text in the log file; no ANSI colours.
        "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }


@dataclass(frozen=True)
class RunResult:
    state: str  # "success" | "failed"
    run_id: str | None
    tasks: dict[str, str]  # task_id -> final state
    # Failed tasks in the order they failed: {"task_id", "error", ...} (FAILURES_ENV).
    failures: list[dict] = field(default_factory=list)
    # The run of the `Then` DAG, where the runner ran one after this run.
    then: RunResult | None = None
    # Why a `Then` DAG did not run (state `skipped`) or could not (`failed`, no run id).
    error: str | None = None


@dataclass(frozen=True)
class Then:
    """A second DAG of the same file the runner runs after the first, in the same process:
    the sweep's publish DAG. A runner of its own would import Airflow, parse the file and
    build the in-process execution API again, some 8 s on 2 cores for a task of a second
    or two. It runs only where the first run derived entries into `warehouse` (what the
    caller checks again afterwards), with `conf_key` set to the first run's id."""

    dag_id: str
    conf_key: str
    warehouse: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))


def entry_counts(warehouse: Path, run_id: str,
                 wait_s: float | None = None) -> dict[str, int] | None:
    """The run's derived and publishable entry counts, None when the run is not in the
    warehouse (or there is no warehouse); readers wait `wait_s` for a writer (default:
    the reader's wait, which run_in_subprocess's `env` sets for the runner)."""
    from benchledger.publishing.read import run_entry_counts
    from benchledger.warehouse.db import connect

    if not Path(warehouse).exists():
        return None
    with connect(warehouse, read_only=True, wait_s=wait_s) as con:
        return run_entry_counts(con, run_id)


class RunnerDied(RuntimeError):
    """The runner process ended abnormally (killed by a signal, or an unknown exit code):
    its teardown tasks may not have run."""

    def __init__(self, message: str, returncode: int, failures: list[dict]):
        super().__init__(message)
        self.returncode = returncode
        self.failures = failures


def run_in_subprocess(
    dag_file: Path, dag_id: str, airflow_home: Path, conf: dict, log_file: Path,
    keep_fds: tuple[int, ...] = (), env: dict[str, str] | None = None,
    then: Then | None = None,
) -> RunResult:
    """Run the DAG in a fresh interpreter; return its state, run id and task states (and,
    with `then`, the second DAG's run as `.then` where it ran).

    The child's stdout (the task summary) and stderr are inherited; `keep_fds` are passed
    on to it (a lock the run must hold for as long as the runner lives); `env` is added to
    its environment (over this process's, under Airflow's own variables). Raises
    RuntimeError if the run could not happen at all (exit code 2: bad DAG file, DB
    error, ...) and RunnerDied if the runner was killed or crashed.
    """
    dag_file = Path(dag_file).resolve()
    result_file = Path(log_file).resolve().with_suffix(".result.json")
    failures_file = Path(log_file).resolve().with_suffix(".failures.jsonl")
    then_file = result_file.with_suffix(".then.json")
    for stale in (result_file, failures_file, then_file):
        stale.unlink(missing_ok=True)
    child_env = {**os.environ, **(env or {}), **airflow_env(airflow_home, dag_file.parent)}
    child_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PROJECT_ROOT), child_env.get("PYTHONPATH")]))
    child_env[FAILURES_ENV] = str(failures_file)
    cmd = [
        sys.executable, "-m", "benchledger.local.runner",
        "--dag-file", str(dag_file), "--dag-id", dag_id,
        "--airflow-home", str(Path(airflow_home).resolve()),
        "--conf", json.dumps(conf or {}), "--log-file", str(Path(log_file).resolve()),
        "--result-file", str(result_file), "--parent-pid", str(os.getpid()),
    ]  # fmt: skip
    if then is not None:
        cmd += ["--then", then.to_json(), "--then-result-file", str(then_file)]
    # No pipes on purpose: servers spawned by tasks could inherit them and then a
    # communicate() would block until those servers exit.
    if warm.forks(settings().runner_start, child_env):
        rc = warm.run(cmd[3:], child_env, keep_fds)
    else:
        rc = subprocess.run(cmd, env=child_env, check=False, pass_fds=keep_fds).returncode
    failures = read_failures(failures_file)
    if rc in EXIT_CODES.values() and result_file.exists():
        return _result(result_file, failures,
                       _result(then_file, failures) if then_file.exists() else None)
    if rc == SETUP_ERROR:
        raise RuntimeError(f"runner could not run DAG {dag_id!r} (exit {rc}); see {log_file}")
    how = (f"killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals()
           else f"exit {rc}")
    raise RunnerDied(f"the runner of DAG {dag_id!r} died ({how}) before the run finished; "
                     f"see {log_file}", rc, failures)


def _result(path: Path, failures: list[dict], then: RunResult | None = None) -> RunResult:
    result = json.loads(path.read_text())
    return RunResult(result["state"], result["run_id"], result["tasks"],
                     [f for f in failures if result["run_id"]
                      and f.get("run_id") == result["run_id"]], then, result.get("error"))


def read_failures(path: Path) -> list[dict]:
    """The failed tasks the on_failure_callback recorded, oldest first; a line cut short
    by a kill is reported as such rather than dropped."""
    if not Path(path).exists():
        return []
    failures = []
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            failures.append(json.loads(line))
        except ValueError:
            failures.append({"task_id": "?", "error": f"unreadable failure record {line!r}"})
    return failures


def _never_migrated(metadata_db: Path) -> bool:
    """Whether the SQLite metadata DB has no Alembic stamp yet (a new AIRFLOW_HOME)."""
    if not metadata_db.exists():
        return True
    with contextlib.closing(sqlite3.connect(metadata_db)) as con:
        return con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                           "AND name = 'alembic_version'").fetchone()[0] == 0


def metadata_template() -> Path:
    """Where a freshly migrated, empty metadata DB for this installation is kept: every
    embedded run starts in a new AIRFLOW_HOME, and copying this file takes milliseconds
    where `airflow db migrate` takes over a second (about 1.3 s on 2 cores) per run. Its
    name holds what the migration's result depends on: the installed Airflow distributions
    (core and providers with tables of their own, edge3's) and the log templates it
    records; a new version makes a new template, never a stale one."""
    from importlib import metadata

    from airflow.configuration import conf as airflow_conf

    versions = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                      if (d.metadata["Name"] or "").lower().startswith("apache-airflow"))
    recorded = [airflow_conf.get("logging", "log_filename_template", fallback=""),
                airflow_conf.get("elasticsearch", "log_id_template", fallback="")]
    key = hashlib.sha256(json.dumps([sys.prefix, versions, recorded]).encode()).hexdigest()
    return settings().home / "cache" / f"airflow-metadata-{key[:16]}.db"


def _keep_as_template(metadata_db: Path, template: Path) -> None:
    """Keep the just-migrated DB as the template: a consistent copy (SQLite's backup, the
    DB being in WAL mode) written beside it and renamed, so concurrent runs never read a
    half-written template. A template that cannot be written costs only the time saved."""
    partial = template.with_name(f"{template.name}.{os.getpid()}.partial")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(metadata_db)) as source, \
                contextlib.closing(sqlite3.connect(partial)) as copy:
            source.backup(copy)
        os.replace(partial, template)
    except (OSError, sqlite3.Error) as exc:
        partial.unlink(missing_ok=True)
        print(f"[runner] cannot keep the migrated metadata DB as {template}: {exc}", flush=True)


def _ensure_db_and_pool(airflow_home: Path) -> None:
    from airflow.models.pool import Pool
    from airflow.utils import db

    # A new home (every embedded run in a fresh folder) goes straight to the migration:
    # check_migrations() on an empty DB parses every Alembic script, sleeps a second and
    # raises, about 2 s of each run for nothing.
    metadata_db = Path(airflow_home) / METADATA_DB
    fresh = _never_migrated(metadata_db)
    try:
        if not fresh:
            db.check_migrations(timeout=0)  # ~0.3 s when up to date; raises after 1 s if not
    except TimeoutError:
        fresh = True
    if fresh:
        t0 = time.monotonic()
        template = metadata_template()
        if template.exists() and not metadata_db.exists():
            shutil.copyfile(template, metadata_db)
            how = f"copied from {template}"
        else:
            db.upgradedb()  # == `airflow db migrate`; on an empty DB: ORM create_all + stamp
            _keep_as_template(metadata_db, template)
            how = "migrated"
        print(f"[runner] metadata DB {how} in {time.monotonic() - t0:.1f}s", flush=True)
    # dag.test() ignores pools, but a scheduler-run of the same DAG would wait forever on a
    # missing one, so keep the metadata DB honest.  provide_session commits.
    pool = Pool.get_pool(WAREHOUSE_POOL)
    if pool is None or pool.slots != WAREHOUSE_POOL_SLOTS:
        Pool.create_or_update_pool(WAREHOUSE_POOL, WAREHOUSE_POOL_SLOTS,
                                  POOL_DESCRIPTION, False)


def _load_dags(dag_file: Path, dag_ids: list[str]) -> list[DAG]:
    from airflow.configuration import conf as airflow_conf
    from airflow.dag_processing.dagbag import BundleDagBag

    dags_folder = Path(airflow_conf.get("core", "dags_folder")).resolve()
    if not dag_file.resolve().is_relative_to(dags_folder):
        raise RuntimeError(f"{dag_file} is not under [core] dags_folder {dags_folder}")
    # Parse just this file; dag.test() itself then syncs the bundle to the DB.
    bag = BundleDagBag(dag_folder=str(dag_file), bundle_path=dags_folder, bundle_name="dags-folder")
    if bag.import_errors:
        for err in bag.import_errors.values():
            print(err)  # full traceback to the log; just its last line to stderr
        last_lines = [err.strip().splitlines()[-1] for err in bag.import_errors.values()]
        raise RuntimeError(f"cannot import {dag_file}: {'; '.join(last_lines)}")
    for dag_id in dag_ids:
        if dag_id not in bag.dags:
            raise RuntimeError(f"no DAG {dag_id!r} in {dag_file} (found {sorted(bag.dags)})")
    return [bag.dags[dag_id] for dag_id in dag_ids]


# Allocations between collections of the youngest generation (Python's default: 700).
GC_THRESHOLD = (20_000, 20, 20)


def _spare_the_collector() -> None:
    """Once Airflow, the project and the DAG are loaded: move every object to the
    collector's permanent generation (gc.freeze, as Airflow's own executors do before they
    fork) and collect less often. The run's cyclic collections otherwise traverse the
    whole loaded graph (Airflow, SQLAlchemy, pandas, Great Expectations) again and again:
    a sweep of 8 restarts took 27-31 s of user CPU without this and 21-26 s with it
    (docs/runner.md, "CPU"). Frozen objects are never collected, even those that become
    garbage later; the runner lives for one run (two with `Then`) and what it loaded
    before it (modules, the parsed DAGs) is used to its end."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def run_dag(
    dag_file: Path, dag_id: str, airflow_home: Path, conf: dict, log_file: Path,
    result_file: Path | None = None, then: Then | None = None,
    then_result_file: Path | None = None,
) -> str:
    """Run the DAG in *this* process and return the DagRun state; then, with `then`, its
    second DAG where the first run derived entries (its outcome in then_result_file).

    The environment from airflow_env() must be in place before Airflow is first imported.
    Prints ``task_id: state`` lines (in execution order) to stdout.
    """
    if Path(os.environ.get("AIRFLOW_HOME", "")).resolve() != Path(airflow_home).resolve():
        raise RuntimeError("AIRFLOW_HOME differs from airflow_home: set airflow_env() first")
    Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    # Redirect fds 1/2 (not just sys.stdout) so Airflow's logging, print()s in tasks (they
    # run in this process) and processes spawned by tasks all write to the log file.
    saved = os.dup(1), os.dup(2)
    with open(log_file, "a", buffering=1) as log:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            t0 = time.monotonic()
            _ensure_db_and_pool(Path(airflow_home))
            dags = _load_dags(Path(dag_file), [dag_id] + ([then.dag_id] if then else []))
            execution_api.serve_only_the_sdk_version()  # about 3 s of CPU a run
            _spare_the_collector()
            t1 = time.monotonic()
            dr = dags[0].test(run_conf=conf or {})
            t2 = time.monotonic()
            print(f"[runner] setup {t1 - t0:.1f}s, dag.test {t2 - t1:.1f}s", flush=True)
            summary = _record(dr, result_file)
            state = str(dr.state)
            if then is not None:
                summary += _run_then(dags[1], then, conf, dr.run_id, then_result_file)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
    print(summary, flush=True)
    return state


def _record(dr: DagRun, result_file: Path | None) -> str:
    """Write the run's outcome where the caller reads it back; its task summary."""
    # Execution order; TIs that never started (no start_date) go last.
    tis = sorted(dr.get_task_instances(),
                 key=lambda ti: (ti.start_date is None, ti.start_date or 0))
    if result_file is not None:  # what the caller (benchledger run) reads back
        Path(result_file).write_text(json.dumps({
            "run_id": dr.run_id, "state": str(dr.state),
            "tasks": {ti.task_id: str(ti.state) for ti in tis}}))
    summary = "\n".join(f"{ti.task_id}: {ti.state}" for ti in tis)
    print(summary)
    return summary


def _run_then(dag: DAG, then: Then, conf: dict, run_id: str | None,
              result_file: Path | None) -> str:
    """The second DAG, where the first run derived entries. Whatever happens, result_file
    says it (ran: its state; `skipped` or `failed` with an `error`), so the caller never
    mistakes a second DAG that did not run, or could not, for the first run's failure."""
    outcome: dict[str, Any]
    try:
        counts = entry_counts(Path(then.warehouse), run_id) if run_id else None
        if not counts or not counts["entries"]:
            outcome = {"run_id": None, "state": "skipped", "tasks": {},
                       "error": f"run {run_id} derived no entries"}
        else:
            t0 = time.monotonic()
            second = dag.test(run_conf={**conf, then.conf_key: run_id})
            print(f"[runner] {then.dag_id}: dag.test {time.monotonic() - t0:.1f}s", flush=True)
            return "\n" + _record(second, result_file)
    except Exception as exc:  # the first run stands: its result is written already
        traceback.print_exc()
        outcome = {"run_id": None, "state": "failed", "tasks": {},
                   "error": f"{type(exc).__name__}: {exc}"}
    if result_file is not None:
        Path(result_file).write_text(json.dumps(outcome))
    print(f"[runner] {then.dag_id}: {outcome['state']}: {outcome['error']}", flush=True)
    return ""


_abandoning = threading.Lock()


def _abandon(reason: str, data_dir: str | None) -> None:
    """The process that started this runner is gone: nobody would read the result, and
    the servers the tasks started would run on forever. Stop them and exit now."""
    if not _abandoning.acquire(blocking=False):
        return  # the signal handler and the watchdog thread both noticed
    print(f"[runner] {reason}: stopping the servers this run started, then exiting",
          file=sys.stderr, flush=True)
    try:
        if data_dir:
            from benchledger.restart.steps import stop_leftover_servers

            for line in stop_leftover_servers(Path(data_dir), parent_pid=os.getpid()):
                print(f"[runner] {line}", file=sys.stderr, flush=True)
        for pid in _child_pids():  # anything else a task started (no manifest)
            with contextlib.suppress(OSError):
                own_group = os.getpgid(pid) == pid  # a server's session: its whole tree
                os.kill(-pid if own_group else pid, signal.SIGKILL)
    finally:
        os._exit(ABANDONED)


def _child_pids() -> list[int]:
    children = []
    for path in Path("/proc/self/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            children += [int(pid) for pid in path.read_text().split()]
    return children


def _die_with_parent(parent_pid: int, data_dir: str | None) -> None:
    """Never finish headless. Linux: PR_SET_PDEATHSIG sends SIGTERM when the parent dies,
    handled here until Airflow's task runner replaces the SIGTERM handler (it does, for
    each task, with one that only calls the operator's on_kill). So a watchdog thread also
    checks the parent every PARENT_CHECK_S; that one works everywhere."""
    signal.signal(signal.SIGTERM, lambda signum, frame: _abandon("SIGTERM", data_dir))
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        _abandon(f"the process that started this run (PID {parent_pid}) is gone", data_dir)

    threading.Thread(target=watch, name="benchledger-parent-watchdog", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchledger.local.runner", description=__doc__)
    p.add_argument("--dag-file", type=Path, required=True)
    p.add_argument("--dag-id", required=True)
    p.add_argument("--airflow-home", type=Path, required=True)
    p.add_argument("--conf", default="{}", help="JSON object passed as the DagRun conf")
    p.add_argument("--log-file", type=Path, help="default: AIRFLOW_HOME/runner.log")
    p.add_argument("--result-file", type=Path, help="write run id, state and task states here")
    p.add_argument("--parent-pid", type=int, help="stop this run's servers and exit when "
                                                   "this process is gone")
    p.add_argument("--then", type=lambda text: Then(**json.loads(text)),
                   help="JSON of a Then: a second DAG to run after the first")
    p.add_argument("--then-result-file", type=Path, help="the second DAG's outcome")
    args = p.parse_args(argv)
    log_file = args.log_file or args.airflow_home / "runner.log"
    if args.parent_pid:
        _die_with_parent(args.parent_pid, json.loads(args.conf).get("data_dir"))
    if "airflow" not in sys.modules:  # lets a human run the module without run_in_subprocess
        os.environ.update(airflow_env(args.airflow_home, args.dag_file.resolve().parent))
    try:
        state = run_dag(
            args.dag_file, args.dag_id, args.airflow_home, json.loads(args.conf), log_file,
            args.result_file, args.then, args.then_result_file,
        )
    except Exception as exc:  # keep stderr to one line; the traceback goes to the log
        with open(log_file, "a") as log:
            traceback.print_exc(file=log)
        print(f"runner: {type(exc).__name__}: {exc} (see {log_file})", file=sys.stderr)
        return SETUP_ERROR
    return EXIT_CODES.get(state, SETUP_ERROR)


if __name__ == "__main__":
    code = main()
    # Interpreter shutdown would spend ~2 s garbage-collecting Airflow's object graph;
    # freezing it skips that while atexit handlers (DB dispose, log flush) still run.
    gc.freeze()
    sys.exit(code)
