"""What the deployment tests share (test_cluster, test_cluster_scheduler, test_cluster_postgres,
test_multi_host, test_cluster_secrets): `benchledger` in a child process, a deployment of
two nodes brought up for a test module, a run followed until one of its windows starts, the
check that a deployment's published entries are what an embedded derivation of the same
raw files gives, and what another local user can read of a deployment. The small simulator
sweep they run is tests.sweeps.cluster_sweep."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.conftest import requirement_missing

NODES = ["node-a", "node-b"]
KEY = ["arm", "workload", "metric", "phase", "scope", "concurrency", "numerator", "statistic"]


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`benchledger ARGS` in a child process, as a user types it; output captured."""
    return subprocess.run([sys.executable, "-m", "benchledger.cli", *args], text=True,
                          capture_output=True, timeout=timeout, check=False)


def cluster_up(home: Path, *settings: str) -> None:
    """`benchledger cluster up` of NODES in `home`, each of `settings` a --config."""
    started = cli("cluster", "up", "--home", str(home), "--nodes", ",".join(NODES),
                  *(arg for setting in settings for arg in ("--config", setting)),
                  timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "cluster up: http://127.0.0.1:" in started.stdout


def start_run(sweep: Path, warehouse: Path, deployment: Path) -> subprocess.Popen:
    """`benchledger run SWEEP --cluster DEPLOYMENT` in the background, its output piped."""
    return subprocess.Popen([sys.executable, "-m", "benchledger.cli", "run", str(sweep),
                             "--warehouse", str(warehouse), "--cluster", str(deployment)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def window_started(run: subprocess.Popen, raw_root: Path, pattern: str,
                   bound_s: float = 180) -> Path | None:
    """The `.started` mark matching `pattern` under `raw_root` once a window of the run
    begins; None when the run ended or `bound_s` passed first."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline and run.poll() is None:
        mark = next(raw_root.glob(pattern), None) if raw_root.exists() else None
        if mark is not None:
            return mark
        time.sleep(0.2)
    return None


def published_and_embedded(warehouse: Path, run_id: str,
                           run_dir: Path | None = None) -> tuple[list, list]:
    """(the run's published entries in the deployment's warehouse, the same entries from
    an embedded derivation of its raw files: `run_dir`, else the run's folder beside the
    warehouse), each row KEY + value, interval and counts."""
    from benchledger.raw.layout import RunLayout
    from tests.synthetic import derived_warehouse

    cols = ", ".join(KEY + ["value", "ci95_low", "ci95_high", "n_requests", "n_restarts"])
    query = f"SELECT {cols} FROM published_entries WHERE run_id = ? ORDER BY {', '.join(KEY)}"
    with duckdb.connect(str(warehouse), read_only=True) as con:
        deployed = con.execute(query, [run_id]).fetchall()
    embedded = derived_warehouse(run_dir or RunLayout(warehouse.parent / "wh-data",
                                                      run_id).run_dir, run_id)
    try:
        again = embedded.execute(query, [run_id]).fetchall()
    finally:
        embedded.close()
    return deployed, again


def assert_same_entries(deployed: list, again: list) -> None:
    """The same rows and counts; values equal up to the order DuckDB summed them in."""
    assert [row[:len(KEY)] + row[-2:] for row in deployed] == \
        [row[:len(KEY)] + row[-2:] for row in again]
    for mine, theirs in zip(deployed, again, strict=True):
        for a, b in zip(mine[len(KEY):-2], theirs[len(KEY):-2], strict=True):
            assert a == b or (None not in (a, b) and a == pytest.approx(b, rel=1e-12)), mine


# --- another local user (issue #39) ----------------------------------------------------------

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def require_another_user() -> None:
    """Tests that act as another local user (nobody) need root and util-linux's setpriv;
    without them the test is skipped with a message, except under CI, where that fails."""
    import os
    import shutil

    if os.geteuid() == 0 and shutil.which("setpriv"):
        return
    requirement_missing("acting as another local user needs root and setpriv")


@contextlib.contextmanager
def open_folder(prefix: str) -> Iterator[Path]:
    """A folder other local users may enter (0755, like a home directory on a shared
    machine), removed afterwards: pytest's own temporary folders are 0700, and a test of
    what another user can read inside one would pass whatever the files' modes."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def files_holding(roots: list[Path], secrets: list[str]) -> list[Path]:
    """Every file under `roots` (read as this user) that holds one of `secrets`."""
    found = []
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            with contextlib.suppress(OSError):  # gone meanwhile (a rotated log)
                data = path.read_bytes()
                if any(secret.encode() in data for secret in secrets):
                    found.append(path)
    return found


def readable_by_another_user(paths: list[Path]) -> list[str]:
    """Those of `paths` the user nobody can read a byte of (its shell and cat only: the
    project's interpreter may live where nobody cannot run it)."""
    script = 'for f; do if head -c 1 -- "$f" >/dev/null 2>&1; then echo "$f"; fi; done'
    done = subprocess.run([*NOBODY, "sh", "-c", script, "sh", *map(str, paths)],
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.splitlines()


def read_as_another_user(path: Path) -> str:
    """What the user nobody reads of a file ("" when it may not)."""
    return subprocess.run([*NOBODY, "cat", "--", str(path)], capture_output=True, text=True,
                          timeout=60, check=False).stdout
