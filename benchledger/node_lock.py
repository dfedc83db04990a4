"""One restart at a time on a node, whichever sweep it belongs to (issue #25).

Within one sweep the DAG already runs a node's restarts one after another (operators/
dag_factory.py); two sweeps on one deployment know nothing of each other, and two servers
measured at once on one node would share its GPUs and both numbers would be wrong. So
the launch of an arm's server takes the node's lock, a file in the deployment's folder
on that host (`<cluster home>/run/node-<node>.lock`, which every worker of the host
shares), and its teardown gives it back. A launch that finds the lock held waits, saying
which restart holds it, up to BENCHLEDGER_NODE_WAIT_S (default 4 hours), then fails
naming the holder.

A holder that went away without its teardown (its worker killed, say) does not hold the
node for ever: once the server it recorded is gone, or it recorded none and took the lock
more than STALE_WITHOUT_SERVER_S ago without launching (its launch died), the lock is
taken over and the takeover logged.

Outside a deployment (an embedded `benchledger run`: no BENCHLEDGER_CLUSTER_HOME) there is
no lock: that run is the only sweep its Airflow knows of. The further nodes of an arm that
spans nodes are not locked across sweeps: two such sweeps taking their nodes in opposite
orders would wait on each other for ever; within a sweep they are serialised by the DAG.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

HOME_ENV = "BENCHLEDGER_CLUSTER_HOME"  # set by the deployment (cluster_config.HOME_ENV)
WAIT_ENV = "BENCHLEDGER_NODE_WAIT_S"
DEFAULT_WAIT_S = 4 * 3600.0
STALE_WITHOUT_SERVER_S = 900.0  # a launch records its server within seconds
POLL_S = 2.0
SAY_EVERY_S = 60.0


class NodeBusy(RuntimeError):
    """The node stayed held by another restart for longer than the wait allowed."""


LOCK_GLOB = "node-*.lock"  # `cluster down` removes them: no restart outlives it


def lock_path(node: str, env: dict[str, str] | None = None) -> Path | None:
    """The node's lock on this host, or None outside a deployment."""
    home = (os.environ if env is None else env).get(HOME_ENV)
    return Path(home) / "run" / LOCK_GLOB.replace("*", node) if home else None


def acquire(node: str, restart_id: str, wait_s: float | None = None,
            poll_s: float = POLL_S) -> Path | None:
    """Take the node for `restart_id` (already its own: a retried launch keeps it);
    returns the lock's path, or None where there is none to take."""
    path = lock_path(node)
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    wait_s = float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S)) if wait_s is None else wait_s
    start = time.monotonic()
    said = -SAY_EVERY_S
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if holder.get("restart_id") == restart_id:
                return path
            stale = _stale(holder, path)
            if stale:
                log.warning("node %s: taking over the lock of restart %s (%s)", node,
                            holder.get("restart_id"), stale)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            waited = time.monotonic() - start
            if waited > wait_s:
                raise NodeBusy(f"node {node} is still measuring restart "
                               f"{holder.get('restart_id')} (since {holder.get('since')}); "
                               f"waited {waited:.0f} s ({WAIT_ENV}) for it") from None
            if waited - said >= SAY_EVERY_S:
                log.info("node %s: waiting for restart %s (since %s) to finish", node,
                         holder.get("restart_id"), holder.get("since"))
                said = waited
            time.sleep(poll_s)
            continue
        with os.fdopen(fd, "w") as out:
            json.dump({"restart_id": restart_id, "since": datetime.now(UTC).isoformat(),
                       "server_pid": None}, out)
        return path


def note_server(path: Path | None, restart_id: str, pid: int | None) -> None:
    """Record the holder's server, by which a holder gone without its teardown is found.
    An external server has no pid here: its lock is held until its teardown (or `cluster
    down`), however long its windows take."""
    if path is None:
        return
    holder = _holder(path)
    if holder.get("restart_id") == restart_id:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({**holder, "server_pid": pid, "launched": True}))
        os.replace(tmp, path)


def release(node: str, restart_id: str) -> bool:
    """Give the node back, if `restart_id` holds it; whether it did."""
    path = lock_path(node)
    if path is None or _holder(path).get("restart_id") != restart_id:
        return False
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return True


def _holder(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}  # gone, or being written this instant: looked at again on the next poll


def _stale(holder: dict[str, Any], path: Path) -> str | None:
    """Why the holder no longer holds the node, or None while it does."""
    pid = holder.get("server_pid")
    if isinstance(pid, int):
        return None if psutil.pid_exists(pid) else f"its server, pid {pid}, is gone"
    if holder.get("launched"):  # an external server: no process here to look at
        return None
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None
    if age > STALE_WITHOUT_SERVER_S:
        return f"no server recorded in {age:.0f} s"
    return None
