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
    monkeypatch.setattr(warm, "_started_with", (None, {}))  # no fork server yet
    env = dict(warm.os.environ)
    assert warm.cold_because(env) is None
    assert "PYTHONHASHSEED" in warm.cold_because({**env, "PYTHONHASHSEED": "7"})
    hook = tmp_path / "hook"
    hook.mkdir()
    assert warm.cold_because({**env, "PYTHONPATH": str(hook)}) is None
    (hook / "sitecustomize.py").write_text("")
    assert f"{hook} holds sitecustomize" in warm.cold_because({**env, "PYTHONPATH": str(hook)})


def test_auto_forks_from_a_process_second_run_on(monkeypatch):
    monkeypatch.setattr(warm, "_started_with", (None, {}))
    env = dict(warm.os.environ)
    monkeypatch.setattr(warm, "_runs", 0)
    assert [warm.forks("auto", env) for _ in range(3)] == [False, True, True]
    monkeypatch.setattr(warm, "_runs", 0)
    assert warm.forks("warm", env) and not warm.forks("fresh", env)
    assert not warm.forks("warm", {**env, "PYTHONHASHSEED": "7"})
