"""Runners started warm: forked from a server process that has already imported the
libraries every run imports, instead of a fresh interpreter that imports them again.

Each embedded run's runner (benchledger/local/runner.py) is a new process, because Airflow
reads AIRFLOW_HOME and its configuration once, at import, and every run has its own home.
A fresh interpreter then also imports great_expectations (about 3 s of CPU: it registers
every expectation), pandas, pyarrow, duckdb, scipy.stats, aiohttp and Airflow's heavy
dependencies before its first task: a small run's imports were about 40% of its CPU
(py-spy). A process that runs many sweeps (the test suite, a notebook, a loop over sweep
files) pays most of that once here: multiprocessing's fork server imports PRELOAD once and
forks a runner per run, about 3 to 4 s of CPU less per run on this project's 2-core
machine (docs/runner.md has the measurement).

Nothing whose import reads the environment or Airflow's configuration is preloaded
(Airflow itself, the project's own modules): the forked runner first takes the caller's
environment for this run, as a fresh interpreter would have, then imports them. The fork
server runs no Python thread (forking one that does is unsafe). The imports of numpy
(OpenBLAS), pandas and GX start three native threads, which a forked child does not
have; those libraries are made to be forked so (OpenBLAS registers a fork handler), as
Airflow's forking executors and the Edge worker (benchledger/cluster/edge_worker.py),
which fork after the same imports, rely on. It is started on first use, and exits when
the process that started it does; a runner's parent is then the fork server, so the
runner watches that process (runner.py `_die_with_parent`), and the fork server's end
follows its starter's.

The runner's standard streams and the descriptors it must hold (`keep_fds`: the run's
lock) are passed as descriptors, so it writes where a subprocess would. The caller's main
module is not re-imported in the runner (multiprocessing's default for the spawn and
forkserver methods): for `benchledger run` that would import the CLI, for an Airflow task
its task runner.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import threading
from collections.abc import Mapping
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn
from pathlib import Path
from typing import Any

# The libraries a run imports whose import reads nothing of the run's environment or of
# Airflow's configuration: GX and the data stack, and what Airflow imports (SQLAlchemy,
# FastAPI and Cadwyn for the in-process execution API, structlog, libcst, ...).
PRELOAD = ["great_expectations", "pandas", "pyarrow", "pyarrow.parquet", "duckdb",
           "scipy.stats", "aiohttp", "uvloop", "sqlalchemy", "sqlalchemy.orm", "httpx",
           "jinja2", "fastapi", "cadwyn", "pendulum", "libcst", "structlog", "jsonschema",
           "rich", "a2wsgi", "psutil", "svcs", "upath", "fsspec", "tenacity", "jwt"]
# What the runner's command line is shown as (ps, /proc/PID/cmdline): the same as a
# runner started by `python -m`, so that whoever looks for it finds it.
PROCESS_NAME = "benchledger-runner"


class _Fd:
    """A file descriptor handed to the runner: duplicated into it when the Process is
    pickled for the fork server (multiprocessing's DupFd), taken back by `take()`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Received, (reduction.DupFd(self.fd),))


class _Received:
    def __init__(self, dup: Any) -> None:
        self._dup = dup

    def take(self) -> int:
        fd: int = self._dup.detach()
        return fd


class _Popen(popen_forkserver.Popen):
    """The fork server's Popen, without the caller's main module in what the child
    prepares from (see the module's docstring)."""

    def _launch(self, process_obj: Any) -> None:
        real = spawn.get_preparation_data

        def without_main(name: str) -> dict[str, Any]:
            data: dict[str, Any] = real(name)
            data.pop("init_main_from_name", None)
            data.pop("init_main_from_path", None)
            return data

        spawn.get_preparation_data = without_main
        try:
            super()._launch(process_obj)  # type: ignore[misc]  # not in typeshed
        finally:
            spawn.get_preparation_data = real


class _Process(context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:  # noqa: N802 (multiprocessing's name)
        return _Popen(process_obj)


def _preload() -> None:
    """The fork server's preload list (read when it starts, on the first run)."""
    forkserver.set_forkserver_preload(PRELOAD)


def _runner(argv: list[str], env: dict[str, str], stdio: list[_Received],
            keep: list[_Received]) -> None:
    """The forked runner: the caller's streams on 0-2, its environment, then
    `python -m benchledger.local.runner ARGV` as runner.py's __main__ runs it."""
    # The fork server hands each child a copy of the starter's end of its "alive" pipe (so
    # that a child may fork through it too), and exits only when every copy is closed. A
    # runner holding one kept the fork server alive after its starter was killed, and the
    # runner, which watches its parent (the fork server), went on headless.
    server = forkserver._forkserver
    if server._forkserver_alive_fd is not None:  # type: ignore[attr-defined]
        os.close(server._forkserver_alive_fd)  # type: ignore[attr-defined]
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]
    try:  # before the environment changes: setproctitle writes over argv and environ
        import setproctitle

        setproctitle.setproctitle(" ".join([sys.executable, "-m", "benchledger.local.runner",
                                            *argv]))
    except ImportError:
        pass
    for target, received in enumerate(stdio):
        fd = received.take()
        os.dup2(fd, target)
        os.close(fd)
    held = [received.take() for received in keep]  # open until the runner exits
    os.environ.clear()
    os.environ.update(env)
    if "--parent-pid" in argv:  # the caller's fork server is this runner's parent
        argv = list(argv)
        argv[argv.index("--parent-pid") + 1] = str(os.getppid())
    sys.argv = ["-m", *argv]
    for entry in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):  # as at start-up
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (fd 0, the caller's)
    # What `python -m` does: runner.py run as __main__ (its main(), then its gc.freeze(),
    # which skips collecting Airflow's object graph, then sys.exit).
    try:
        runpy.run_module("benchledger.local.runner", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    # What an interpreter's exit does, in its order: wait for non-daemon threads, then
    # atexit (Airflow's DB dispose, log flush). multiprocessing's own end would run no
    # atexit handler.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    del held
    os._exit(code)


HOOKS = ("sitecustomize", "usercustomize")  # what `site` imports at an interpreter's start


def _python_vars(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}


def _server_python_vars() -> dict[str, str]:
    """The PYTHON* variables the fork server's interpreter started with: its environment
    as /proc shows it (what it started with) where it runs, else this process's, which a
    fork server started now gets."""
    pid = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    if pid is not None:
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone (the next run starts another) or no /proc
            pass
        else:
            return _python_vars(dict(item.split("=", 1) for item in
                                     os.fsdecode(raw).split("\0") if "=" in item))
    return _python_vars(dict(os.environ))


def cold_because(env: Mapping[str, str]) -> str | None:
    """Why a fork of the fork server would not be the interpreter `env` starts, or None.
    A forked runner skipped an interpreter's start: the PYTHON* variables it reads then
    (PYTHONHASHSEED, PYTHONWARNINGS, PYTHONMALLOC, ...) are the fork server's, and a
    sitecustomize or usercustomize on the run's PYTHONPATH is never imported (a test hook
    that starved the client's event loop that way was silently not run)."""
    expected = _server_python_vars()
    if _python_vars(env) != expected:
        changed = sorted(set(_python_vars(env).items()) ^ set(expected.items()))
        return f"the run's Python variables differ from the fork server's: {changed}"
    for entry in filter(None, env.get("PYTHONPATH", "").split(os.pathsep)):
        for hook in HOOKS:
            if (Path(entry) / f"{hook}.py").exists() or (Path(entry) / hook).is_dir():
                return f"{entry} holds {hook}, which only an interpreter's start imports"
    return None


_runs = 0  # runs this process has started (auto: its first starts fresh)


def forks(mode: str, env: Mapping[str, str]) -> bool:
    """Whether this run's runner is forked (settings' runner_start: `warm`, `fresh`, or
    `auto`, warm from this process's second run on: a process that runs one sweep, as
    `benchledger run` does, would pay the fork server's preload and gain nothing, about
    2.5 s of CPU more than a fresh runner, measured), and a fork would be the interpreter
    the run asks for (`cold_because`). Counts the run."""
    global _runs
    _runs += 1
    wanted = mode == "warm" or (mode == "auto" and _runs > 1)
    return wanted and cold_because(env) is None


def run(argv: list[str], env: dict[str, str], keep_fds: tuple[int, ...] = ()) -> int:
    """Run `python -m benchledger.local.runner ARGV` forked from the fork server, with
    `env` as its whole environment and `keep_fds` held open; its exit code, or minus the
    signal that ended it (as subprocess reports). The caller asks `forks` first."""
    _preload()
    process = _Process(target=_runner, name=PROCESS_NAME,
                       args=(argv, env, [_Fd(0), _Fd(1), _Fd(2)],
                             [_Fd(fd) for fd in keep_fds]))
    process.start()
    process.join()
    code = process.exitcode
    return code if code is not None else 1
