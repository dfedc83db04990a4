"""Every process a server started, wherever it moved: what a teardown must stop.

A server is started in its own session and process group, and its stop signals that
group (benchledger.server.lifecycle). A process can leave the group: `setsid` (a daemon), a
`setpgid`, a double fork that reparents it to init. Signalled by group alone, such a
process outlives the teardown and meets the next restart (a GPU still held, a port still
bound). So each server is started with a mark in its environment,
`BENCHLEDGER_SERVER_MARK=<a fresh uuid>`, recorded in the restart manifest: every process
it starts inherits it through fork and exec, whatever session or group it moves to, and
it stays readable in the process's environment (psutil's Process.environ: to the same
user, or root) after the task that
started the server is gone, so a teardown in another process, or stop_leftover_servers
after `kill -9` of the runner, still finds them. A process that cleared its environment
(`env -i`) is still found while the server lives, through its parent chain, its session or
its group; one that cleared it and was also reparented to init is out of reach (a cgroup or
a PID namespace would hold it, where the machine lets a user make one: docs/runner.md).

Why not the alternatives alone: a child subreaper (PR_SET_CHILD_SUBREAPER) would have to be
the process that launched the server, which is a task that returns at once; ancestry alone
loses a double-forked daemon; a cgroup needs a writable cgroup tree, which containers and
CI machines often do not give.

Processes are listed with psutil; where it cannot read another process's environment
(another user's, or a platform that does not show it) only the parent chain, session
and group find them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from dataclasses import dataclass

import psutil

from benchledger.redaction import redact_argv
from benchledger.settings import variable

MARK_ENV = variable("server_mark")
COMMAND_CHARS = 300  # of a process's command line kept on record


def new_mark() -> str:
    """A value no other server's processes carry."""
    return uuid.uuid4().hex


def mark_environment(mark: str) -> dict[str, str]:
    """The environment a server is started with: this process's, plus its mark."""
    return {**os.environ, MARK_ENV: mark}


@dataclass(frozen=True)
class ServerProcess:
    """One live process of a server, as /proc shows it."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    argv: tuple[str, ...]

    def as_record(self) -> dict[str, object]:
        return {"pid": self.pid, "ppid": self.ppid, "pgid": self.pgid, "sid": self.sid}


def _table() -> dict[int, tuple[str, int, int, int, tuple[str, ...]]]:
    """pid -> (status, ppid, pgid, sid, argv) of every process psutil can see now."""
    table = {}
    for proc in psutil.process_iter(["ppid", "status", "cmdline"]):
        try:
            pgid, sid = os.getpgid(proc.pid), os.getsid(proc.pid)
        except OSError:  # gone since the listing
            continue
        info = proc.info
        table[proc.pid] = (info["status"], info["ppid"], pgid, sid,
                           tuple(info["cmdline"] or ()))
    return table


def _carries(pid: int, mark: str) -> bool:
    try:
        return psutil.Process(pid).environ().get(MARK_ENV) == mark
    except psutil.Error:  # another user's process, or gone
        return False


def _descends(pid: int, leader: int, parents: dict[int, int]) -> bool:
    seen = set()
    while pid in parents and pid not in seen:
        seen.add(pid)
        pid = parents[pid]
        if pid == leader:
            return True
    return False


ENDED = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def server_processes(leader: int | None, mark: str | None) -> list[ServerProcess]:
    """The live processes (zombies aside) of one server, the leader itself excluded: every
    one carrying `mark` and, while the leader lives (`leader` given: the caller checked it
    is the process it started), every one in its group or session or descending from it.
    After the leader ended its pid may name a stranger's group: then the mark alone."""
    if leader is None and not mark:
        return []
    table = _table()
    parents = {pid: fields[1] for pid, fields in table.items()}
    found = []
    for pid, (status, ppid, pgid, sid, argv) in sorted(table.items()):
        if pid in (leader, os.getpid()) or status in ENDED:
            continue
        related = leader is not None and (leader in (pgid, sid)
                                          or _descends(pid, leader, parents))
        if related or (mark and _carries(pid, mark)):
            found.append(ServerProcess(pid, ppid, pgid, sid, argv))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has ended)."""
    try:
        return psutil.Process(pid).status() not in ENDED
    except psutil.Error:
        return False


def send(pid: int, sig: signal.Signals) -> str | None:
    """Signal one process; None when sent (or it was gone), else why not."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return None
    except PermissionError as exc:
        return f"could not signal it: {exc.strerror}"
    return None


def describe(process: ServerProcess) -> str:
    """`pid 123 (session 123, group 123): <its command line, secrets redacted>`."""
    command = " ".join(redact_argv(process.argv)) or "?"
    if len(command) > COMMAND_CHARS:
        command = command[:COMMAND_CHARS] + "..."
    return f"pid {process.pid} (session {process.sid}, group {process.pgid}): {command}"


class Leftovers:
    """The processes of one server a stop had to signal on their own, and how each ended:
    those outside the server's process group (which the group's signal never reaches),
    those still running when the grace period ended, and, when the server itself had
    ended before its stop, every process that outlived it."""

    def __init__(self, leader: int, mark: str | None, leader_ended: bool) -> None:
        self.leader, self.mark, self.leader_ended = leader, mark, leader_ended
        self.seen: dict[int, ServerProcess] = {}
        self.why: dict[int, str] = {}
        self.signalled: dict[int, str] = {}
        self.handles: dict[int, psutil.Process] = {}  # identity: pid and start time

    def scan(self, leader_alive: bool) -> list[ServerProcess]:
        """Look again; the live ones. Ones not seen before that left the group (or that
        outlived a server which had ended) get SIGTERM now. One signalled on its own
        stays followed until it has ended, even where nothing finds it any more (a child
        that cleared its environment is known by its parent only while the server lives):
        the stop then waited for it, not only for those it could still find (under load
        it ended while that child was still dying, and recorded it alive)."""
        live = server_processes(self.leader if leader_alive else None, self.mark)
        found = {process.pid for process in live}
        live += [self.seen[pid] for pid in self.why
                 if pid not in found and self._still_runs(pid)]
        for process in live:
            if process.pid in self.seen:
                continue
            self.seen[process.pid] = process
            with contextlib.suppress(psutil.Error):
                self.handles[process.pid] = psutil.Process(process.pid)
            if self.leader_ended:
                self.why[process.pid] = "outlived the server, which had ended before its stop"
            elif process.pgid != self.leader:
                self.why[process.pid] = "had left the server's process group"
            else:
                continue  # the group's own SIGTERM reached it
            self._signal(process.pid, signal.SIGTERM)
        return live

    def _still_runs(self, pid: int) -> bool:
        """Whether the very process seen (not another that got its pid) still runs."""
        handle = self.handles.get(pid)
        return handle is not None and handle.is_running() and alive(pid)

    def kill(self, live: list[ServerProcess], grace_s: float) -> None:
        """SIGKILL whatever is still running when the grace period is over."""
        for process in live:
            if alive(process.pid):
                self.why.setdefault(process.pid, f"still running {grace_s:g} s after SIGTERM")
                self._signal(process.pid, signal.SIGKILL)

    def _signal(self, pid: int, sig: signal.Signals) -> None:
        problem = send(pid, sig)
        self.signalled[pid] = problem or sig.name

    def records(self) -> list[dict[str, object]]:
        """One record per process stopped on its own (for restart.json's
        `stray_processes`): where it was, its command line, why and how it was stopped,
        and whether it still runs."""
        return [{**self.seen[pid].as_record(), "command": describe(self.seen[pid]),
                 "why": why, "signal": self.signalled.get(pid), "alive": alive(pid)}
                for pid, why in sorted(self.why.items())]


def leftovers_text(records: list[dict[str, object]]) -> str:
    """What a stop's detail adds about them ('' when there were none)."""
    if not records:
        return ""
    lines = [f"{r['command']} ({r['why']}; {r['signal']}"
             f"{', STILL RUNNING' if r['alive'] else ''})" for r in records]
    return (f"; stopped {len(records)} process(es) of the server on their own: "
            + "; ".join(lines))
