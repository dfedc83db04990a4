"""The warm runner's fork server (benchledger/local/warm.py) preloads libraries by name."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from benchledger.local import warm


def test_every_preloaded_module_exists():
    # the fork server skips a name it cannot import: a renamed one would only make every
    # run slower, unnoticed
    missing = [name for name in warm.PRELOAD if importlib.util.find_spec(name) is None]
    assert missing == []


def test_no_preloaded_module_imports_airflow_or_the_project():
    """What the fork server imports must not read a run's configuration: Airflow reads
    AIRFLOW_HOME at import, and the project's modules may read settings."""
    code = ("import sys\n"
            f"for name in {warm.PRELOAD!r}: __import__(name)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'airflow', 'benchledger', 'operators', 'expectations', 'warehouse'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"


def test_a_run_whose_interpreter_start_would_differ_is_not_forked(tmp_path, monkeypatch):
    """A fork skips an interpreter's start: a run whose PYTHON* variables differ from the
    fork server's, or whose PYTHONPATH holds a sitecustomize, is started fresh."""
    # no fork server yet: it would start with this process's environment
    monkeypatch.setattr(warm.forkserver._forkserver, "_forkserver_pid", None)
    env = dict(warm.os.environ)
    assert warm.cold_because(env) is None
    assert "PYTHONHASHSEED" in warm.cold_because({**env, "PYTHONHASHSEED": "7"})
    hook = tmp_path / "hook"
    hook.mkdir()
    assert warm.cold_because({**env, "PYTHONPATH": str(hook)}) is None
    (hook / "sitecustomize.py").write_text("")
    assert f"{hook} holds sitecustomize" in warm.cold_because({**env, "PYTHONPATH": str(hook)})


def test_auto_forks_from_a_process_second_run_on(monkeypatch):
    monkeypatch.setattr(warm.forkserver._forkserver, "_forkserver_pid", None)
    env = dict(warm.os.environ)
    monkeypatch.setattr(warm, "_runs", 0)
    assert [warm.forks("auto", env) for _ in range(3)] == [False, True, True]
    monkeypatch.setattr(warm, "_runs", 0)
    assert warm.forks("warm", env) and not warm.forks("fresh", env)
    assert not warm.forks("warm", {**env, "PYTHONHASHSEED": "7"})


def test_the_fork_servers_variables_are_those_it_started_with(monkeypatch):
    """Read from its /proc environ, not from this process's environment now (a process
    stands in for the fork server here: a real one takes seconds to preload)."""
    stand_in = subprocess.Popen(["sleep", "30"], env={"PYTHONHASHSEED": "3", "PATH": "/bin"})
    try:
        monkeypatch.setattr(warm.forkserver._forkserver, "_forkserver_pid", stand_in.pid)
        monkeypatch.setenv("PYTHONHASHSEED", "4")
        assert warm._server_python_vars() == {"PYTHONHASHSEED": "3"}
        assert "PYTHONHASHSEED" in warm.cold_because({"PYTHONHASHSEED": "4"})
        assert warm.cold_because({"PYTHONHASHSEED": "3"}) is None
    finally:
        stand_in.kill()
        stand_in.wait()
    # gone: a fork server started now gets this process's environment
    assert warm._server_python_vars()["PYTHONHASHSEED"] == "4"
