"""The processes of a deployment beyond its head: launched, watched and stopped on their own
nodes (an arm whose model spans nodes; docs/protocol.md, multi-node arms).

The head is the arm's own server, launched and stopped as any arm's (benchledger.restart.steps,
its manifest restart.json). Each other node's process has a manifest of its own,
`<slot>/nodes/<node>.json`, written only by that node's tasks (`launch_node_<node>` and
`stop_node_<node>` run on the node's Airflow queue, in parallel with the other nodes'), so
no two tasks ever rewrite one file at once. After each window the measuring task asks
whether every node's process still lives (`node_gone`); the teardown of each node says
whether its process had ended before it was stopped; `settle_restart`, the restart's last
task, folds every node's record into restart.json: the deployment it spanned and, when a
node's process died, the restart `crashed`, naming the node.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Unpack, cast

from benchledger.raw import layout as raw
from benchledger.raw.layout import NO_ATTEMPT, Attempt, NodeManifest, RunLayout
from benchledger.redaction import REDACTED
from benchledger.restart.manifest import RawWriteError, RestartRecord, os_error_text, utc_now
from benchledger.server import launchers, lifecycle
from benchledger.sweep import topology
from benchledger.sweep.spec import (
    Arm,
    Sweep,
    SweepError,
    parse_sweep,
    read_sweep_file,
    recorded_form,
)
from benchledger.sweep.topology import DeploymentNode

log = logging.getLogger(__name__)

NODE_PROBE_TIMEOUT_S = 5.0


class SecretsUnavailable(RuntimeError):
    """An arm whose commands' secrets the run did not record cannot be started: the sweep
    file they stay in is gone, or now holds another sweep."""


def as_written(layout: RunLayout, arm: Arm, sweep_path: Path | None) -> Arm:
    """The arm to start: the recorded one, or, when the run recorded its command (or one of
    its processes') with secrets redacted, the same arm read from the sweep file, provided
    the file's recorded form is still exactly the run's (the same sweep, secrets aside).
    The task's own path to the file comes first (a worker's DAG bundle), else the one plan
    recorded."""
    if not any(REDACTED in command for command in arm.commands):
        return arm
    manifest = raw.read_json(layout.run_manifest)
    path = Path(sweep_path or manifest.get("sweep_path") or "")
    try:
        text, file_sha256 = read_sweep_file(path)
        now = recorded_form(text, file_sha256, str(path))[1]
        if now == manifest.get("sweep_sha256"):
            return parse_sweep(text, source=str(path)).arm(arm.name).arm
        why = (f"it now holds another sweep (sha256 of its recorded form {now}, the run "
               f"recorded {manifest.get('sweep_sha256')})")
    except SweepError as exc:
        why = str(exc)
    raise SecretsUnavailable(
        f"arm {arm.name!r}: its command's secrets are kept out of the run's record, so it "
        f"is started from the sweep file {path}, but {why}; rerun the sweep")


class NodeRecord:
    """The manifest of one node's process of one restart slot."""

    def __init__(self, layout: RunLayout, arm: str, k: int, node: str) -> None:
        self.layout, self.arm, self.k, self.node = layout, arm, k, node
        self.path = layout.node_manifest(arm, k, node)

    def read(self) -> NodeManifest:
        return cast(NodeManifest, raw.read_manifest(self.path))

    def update(self, **changes: Unpack[NodeManifest]) -> NodeManifest:
        """Merge `changes` (the manifest's own keys: a typo is a type error) and write."""
        manifest: NodeManifest = {**self.read(), **changes}
        try:
            raw.write_json(self.path, manifest,
                           sealed_in=self.layout.slot_dir(self.arm, self.k))
        except OSError as exc:
            raise RawWriteError(f"{self.layout.restart_id(self.arm, self.k)} node {self.node}: "
                                f"its manifest could not be written: "
                                f"{os_error_text(exc, self.path)}") from exc
        return manifest


def _members(sweep: Sweep, arm_name: str) -> list[DeploymentNode]:
    return topology.deployment(sweep.arm(arm_name).arm)


def launch_node(layout: RunLayout, sweep: Sweep, arm_name: str, k: int, node: str,
                head: dict[str, Any] | None, attempt: Attempt = NO_ATTEMPT,
                sweep_path: Path | None = None) -> dict[str, Any] | None:
    """Start the process of one more node of the deployment, here (the task runs on that
    node's queue); its handle, or None when nothing was started (recorded: the head's
    launch failed, or this one did). A retried launch first stops what an earlier attempt
    started here."""
    arm = sweep.arm(arm_name).arm
    member = topology.node_of(arm, node)
    record = NodeRecord(layout, arm_name, k, node)
    earlier = record.read()
    record.update(restart_id=layout.restart_id(arm_name, k), node=node,
                  address=member.address, rank=member.rank, host=socket.gethostname(),
                  worker_hostname=attempt.worker_hostname, launch_attempt=attempt.number,
                  **_stop_earlier(earlier), started_at=utc_now(), status="launching",
                  error=None)
    if head is None:
        record.update(status="failed", error="not launched: the head's launch failed")
        return None
    try:
        seed = lifecycle.instance_seed(sweep.sweep.name, f"{arm_name}@{node}", k)
        started = as_written(layout, arm, sweep_path)
        handle = launchers.launcher_for(started).start_node(
            started, member, lifecycle.ServerHandle.from_dict(head),
            layout.node_log(arm_name, k, node), seed, k)
    except Exception as exc:
        record.update(status="failed", error=f"launch failed: {exc}")
        return None
    record.update(status="launched", pid=handle.pid, base_url=handle.base_url or None,
                  command=handle.command, log_path=handle.log_path, server_mark=handle.mark)
    return handle.to_dict()


def _stop_earlier(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """An earlier attempt's process of this node, still recorded as running: stopped when
    it runs on this machine and is still that process; listed under earlier_launches."""
    pid = manifest.get("pid")
    if not isinstance(pid, int) or pid <= 0 or manifest.get("stopped_at"):
        return {}
    here = socket.gethostname()
    if manifest.get("host") != here:
        outcome = f"not stopped: started on {manifest.get('host')}, this attempt runs on {here}"
    else:
        outcome = str(lifecycle.stop_recorded(pid, manifest.get("started_at"), None,
                                              manifest.get("log_path"),
                                              manifest.get("server_mark")))
    stopped = {"pid": pid, "started_at": manifest.get("started_at"),
               "host": manifest.get("host"), "attempt": manifest.get("launch_attempt"),
               "stop_status": outcome}
    return {"earlier_launches": [*manifest.get("earlier_launches", []), stopped],
            "pid": None, "base_url": None}


def node_records(layout: RunLayout, sweep: Sweep, arm_name: str, k: int) -> dict[str, NodeManifest]:
    """The manifest of every node besides the head, by node ({} where none was written)."""
    return {m.node: NodeRecord(layout, arm_name, k, m.node).read()
            for m in _members(sweep, arm_name) if not m.is_head}


def launch_problems(layout: RunLayout, sweep: Sweep, arm_name: str, k: int) -> list[str]:
    """Why the other nodes' processes are not all running: one line per node whose launch
    failed or never ran (what wait_ready reports instead of waiting for the head)."""
    if not sweep.arm(arm_name).arm.starts_processes:
        return []  # its nodes are only named: nothing of theirs is started
    problems = []
    for node, manifest in node_records(layout, sweep, arm_name, k).items():
        status = manifest.get("status")
        if status != "launched":
            problems.append(f"node {node}: {manifest.get('error') or 'never launched'}")
    return problems


def base_urls(layout: RunLayout, sweep: Sweep, arm_name: str, k: int,
              head_base_url: str) -> dict[str, str | None]:
    """Each node's own process's base URL (the head's is the server's), by node."""
    urls: dict[str, str | None] = {sweep.arm(arm_name).arm.node: head_base_url}
    for node, manifest in node_records(layout, sweep, arm_name, k).items():
        urls[node] = manifest.get("base_url")
    return urls


def node_gone(layout: RunLayout, sweep: Sweep, arm_name: str, k: int) -> tuple[str, str] | None:
    """(node, evidence) of the first node besides the head whose process died, else None.
    A process on this machine is asked by its pid (still the process its launch started?);
    one that serves a health path is asked there (one probe, bounded); one that does
    neither is checked at its teardown, which says whether it had ended before its stop."""
    arm = sweep.arm(arm_name).arm
    launcher = launchers.launcher_for(arm)
    here = socket.gethostname()
    for member in topology.deployment(arm):
        if member.is_head:
            continue
        manifest = NodeRecord(layout, arm_name, k, member.node).read()
        pid = manifest.get("pid")
        if manifest.get("host") == here and isinstance(pid, int) and pid > 0 \
                and not lifecycle.started_as_recorded(pid, manifest.get("started_at")):
            return member.node, (f"its process {pid} ended ({lifecycle.process_state(pid)}); "
                                 f"see {manifest.get('log_path')}")
        path, base_url = launcher.node_health_path(arm, member), manifest.get("base_url")
        if path and base_url:
            probe = lifecycle.probe_readiness(base_url, path,
                                              time.monotonic() + NODE_PROBE_TIMEOUT_S)
            if probe.state != "ready":
                return member.node, f"its process no longer answers ({probe.detail})"
    return None


def stop_node(layout: RunLayout, arm_name: str, k: int, node: str,
              handle: dict[str, Any] | None) -> NodeManifest:
    """Stop one node's process (its teardown, on its node); one found dead is recorded as
    crashed. A process launched on another machine is not signalled (its pid means
    nothing here): the manifest says so."""
    record = NodeRecord(layout, arm_name, k, node)
    manifest = record.read()
    if manifest.get("stopped_at"):
        return manifest  # a retried teardown: stopped already
    if handle is None:
        return record.update(stopped_at=utc_now(), stop_status="nothing to stop "
                             f"({manifest.get('error') or 'not launched'})")
    here = socket.gethostname()
    if manifest.get("host") not in (None, here):
        return record.update(stop_status=f"not stopped: launched on {manifest.get('host')}, "
                                         f"and this teardown ran on {here}; stop it there")
    outcome = lifecycle.stop(lifecycle.ServerHandle.from_dict(handle))
    changes: dict[str, Any] = {"stopped_at": utc_now(), "stop_status": str(outcome),
                               "ended_before_stop": outcome.ended_before_stop,
                               "status": "crashed" if outcome.ended_before_stop else "stopped"}
    if outcome.strays:
        log.warning("node %s: the process left processes its stop had to end on their own: "
                    "%s", node, outcome)
        changes["stray_processes"] = list(outcome.strays)
    return record.update(**changes)


def deployment_record(layout: RunLayout, sweep: Sweep, arm_name: str, k: int,
                      head: Mapping[str, Any], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """restart.json's `deployment`: every node, the head first, with where its process ran,
    its GPUs as its telemetry listed them (`gpus`: benchledger.server.telemetry.gpus_of, by node)
    and, once stopped, how it ended."""
    listed = {entry["node"]: entry for entry in gpus}
    records = node_records(layout, sweep, arm_name, k)
    out = []
    for member in _members(sweep, arm_name):
        manifest: Mapping[str, Any] = head if member.is_head else records.get(member.node, {})
        entry: dict[str, Any] = {
            "node": member.node, "address": member.address, "role": member.role,
            "rank": member.rank,
            "host": manifest.get("node") if member.is_head else manifest.get("host"),
            # a node's process's own; the head's is the restart's status
            "pid": manifest.get("pid"),
            "status": None if member.is_head else manifest.get("status"),
            "gpus": listed.get(member.node, {}).get("gpus"),
        }
        if listed.get(member.node, {}).get("telemetry_error"):
            entry["telemetry_error"] = listed[member.node]["telemetry_error"]
        for key in ("stop_status", "ended_before_stop", "error"):
            if manifest.get(key) is not None:
                entry[key] = manifest[key]
        out.append(entry)
    return out


def settle_restart(layout: RunLayout, sweep: Sweep, arm_name: str, k: int) -> raw.RestartManifest:
    """The restart's last step: each node's record folded into restart.json. A node whose
    process had ended before its teardown stopped it makes a healthy restart `crashed`,
    naming the node; processes a node's stop had to end on their own join the restart's
    stray_processes (with their node)."""
    record = RestartRecord(layout, arm_name, k)
    manifest = record.read()
    records = node_records(layout, sweep, arm_name, k)
    listed = [{"node": e["node"], "gpus": e.get("gpus"),
               **({"telemetry_error": e["telemetry_error"]} if e.get("telemetry_error")
                  else {})} for e in manifest.get("deployment") or []]
    changes: dict[str, Any] = {
        "deployment": deployment_record(layout, sweep, arm_name, k, manifest, listed)}
    strays = [{**s, "node": node} for node, m in records.items()
              for s in m.get("stray_processes") or []]
    if strays:
        changes["stray_processes"] = [*(manifest.get("stray_processes") or []), *strays]
    dead = [(node, m) for node, m in records.items() if m.get("ended_before_stop")]
    if dead and raw.is_healthy(manifest.get("status")):
        node, m = dead[0]
        return record.update("crashed", crashed_node=node, **changes,
                             error=f"node {node}: its process had ended before its teardown "
                                   f"stopped it ({m.get('stop_status')}); see "
                                   f"{m.get('log_path')}")
    return record.update(**changes)
