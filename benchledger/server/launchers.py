"""How each kind of arm's server is started: one launcher per kind, registered under the
arm's `server` (benchledger.sweep.arms) and chosen once, from the arm (launcher_for).

    simulator  `benchledger simulator` with the arm's [arms.simulator] flags; on each
               further node of a deployment that spans nodes, a pretend node joining it
    command    the arm's command (each further node: its process's command)
    external   nothing: the handle only says where the server already runs

A launch returns a ServerHandle at once (benchledger.server.lifecycle waits for readiness,
describes and stops it: all of that is by handle, the same for every kind).

How a `command` is run: the arm's text is split into arguments like a POSIX shell would
split them (shlex: quotes group, backslashes escape) and the program is started directly,
never through a shell, so `$(...)`, `;`, `|`, `*` and `$VAR` reach the program as plain
text. The only substitution is the literal text `{port}` (in the command and in
`base_url`), replaced by the restart's free loopback port; every other brace is passed on
as written. A shell is used only when the command names one on purpose (`sh -c '...'`).
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from benchledger.client.registry import Registry, Variant
from benchledger.redaction import redact_argv, redact_command_text
from benchledger.server.processes import mark_environment, new_mark
from benchledger.settings import settings, variable
from benchledger.simulator.options import SWEEP_OPTIONS, launch_flags
from benchledger.sweep import topology
from benchledger.sweep.arms import Arm, ArmBase, ArmKind, CommandArm, ExternalArm, SimulatorArm
from benchledger.sweep.topology import DeploymentNode

# The only text replaced in an arm's command and base_url (and, for an arm that spans
# nodes, the tokens benchledger.sweep.topology lists).
PORT_TOKEN = "{port}"
LOOPBACK = "127.0.0.1"
# Set by `benchledger cluster join --address` in a worker's environment: the node's own
# address, where the servers its tasks launch listen and are measured (issue #25).
NODE_ADDRESS_ENV = variable("node_address")
# The readiness path of a simulator's pretend node (it answers 200 once it joined its head).
PRETEND_NODE_HEALTH = "/health"
# [arms.simulator] as an arm that leaves the table out has it (launch_flags' input).
SIMULATOR_DEFAULTS: dict[str, Any] = {
    str(option.sweep_key): [] if option.per_restart else option.default
    for option in SWEEP_OPTIONS}

# Servers started by this process. Holding the Popen objects keeps Python from reaping a
# server that died early (Popen.__del__ would, losing its exit status before we look;
# benchledger.server.lifecycle.process_state asks them first).
STARTED: dict[int, subprocess.Popen[bytes]] = {}


@dataclass
class ServerHandle:
    """What later tasks need to reach and stop a launched server (travels as JSON)."""

    base_url: str
    pid: int | None
    port: int | None
    command: list[str] | None  # secrets redacted (what is recorded, never what ran)
    command_template: list[str] | None  # the same
    log_path: str | None
    # The mark in the server's environment that finds every process it started
    # (benchledger.server.processes); None for an external server.
    mark: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerHandle:
        return cls(**data)


def free_port(host: str = LOOPBACK) -> int:
    """A currently free TCP port on `host`, this machine's address the process will bind
    (the server binds it moments later); on loopback when `host` is not one of this
    machine's (a name another machine resolves: the port is then only a guess there too)."""
    for address in dict.fromkeys([host, LOOPBACK]):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((address, 0))
            except OSError:
                continue
            port: int = sock.getsockname()[1]
            return port
    raise OSError(f"no free TCP port on {host} or {LOOPBACK}")


def start_process(argv: list[str], log_path: Path, mark: str, what: str) -> int:
    """Start argv in a new session, its output appended to log_path and `mark` in its
    environment; its pid. The Popen object is kept (STARTED)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True,
                                       env=mark_environment(mark))
        except OSError as exc:  # no such program, not executable, ...
            raise OSError(exc.errno, f"{what}: cannot start "
                                     f"{redact_argv(argv)[0]!r}: {exc.strerror}") from None
    STARTED[process.pid] = process
    return process.pid


def with_port(text: str, port: int) -> str:
    """`text` with each literal {port} replaced; nothing else is interpreted."""
    return text.replace(PORT_TOKEN, str(port))


def split_command(arm: CommandArm, command: str | None = None) -> list[str]:
    """The arm's command (or `command`, one of its processes') as arguments (shlex, POSIX
    rules); never run through a shell."""
    text = arm.command if command is None else command
    try:
        argv = shlex.split(text or "")
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise ValueError(f"arm {arm.name!r}: command {redact_command_text(text or '')!r} "
                         f"cannot be split into arguments: {exc}") from None
    if not argv:
        raise ValueError(f"arm {arm.name!r}: command {redact_command_text(text or '')!r} "
                         "names no program")
    return argv


def _bind_host(arm: ArmBase) -> str:
    """Where the head listens: its address when the other nodes of its deployment must
    reach it; else the node's own address where its worker was given one (a worker that
    joined from another host), loopback otherwise."""
    if arm.spans_nodes:
        return arm.head_address
    return settings().node_address or LOOPBACK


def simulator_argv(arm: SimulatorArm, restart_index: int, port: str, seed: str,
                   template: bool = False) -> list[str]:
    """`benchledger simulator` for an arm with the given port and seed, by position (no
    text substitution: a model name containing "{port}" stays a model name). The
    [arms.simulator] values become flags as the simulator's settings declare
    (benchledger.simulator.options.launch_flags)."""
    # The recorded template leaves where a head runs out (as its port and seed): two arms
    # of one setting on other nodes are one configuration.
    host = "{address}" if template and arm.spans_nodes else _bind_host(arm)
    argv = [sys.executable, "-m", "benchledger.simulator", "--host", host,
            "--port", port, "--seed", seed, "--model", arm.model]
    if arm.spans_nodes:  # the head: ready once every pretend node has joined it
        argv += ["--expect-nodes", str(len(arm.processes)),
                 "--node-name", "{node}" if template else arm.node]
    if arm.simulator is None:
        return argv
    return argv + launch_flags(arm.simulator.model_dump(), restart_index)


def simulator_command_template(arm: SimulatorArm, restart_index: int = 0) -> list[str]:
    """The simulator's command as recorded: {port} and {seed} are per instance."""
    return simulator_argv(arm, restart_index, "{port}", "{seed}", template=True)


def simulator_node_argv(arm: SimulatorArm, member: DeploymentNode, head_url: str,
                        restart_index: int, port: str, seed: str,
                        template: bool = False) -> list[str]:
    """A pretend node of a simulator arm that spans nodes: it joins the head at head_url
    and serves its pretend GPUs' telemetry; the arm's [arms.simulator] GPU settings apply,
    and its own `low_clock` says whether its stuck GPU is stuck. `template`: as recorded,
    where it runs and whom it joins left out."""
    argv = [sys.executable, "-m", "benchledger.simulator",
            "--host", "{address}" if template else member.address, "--port", port,
            "--seed", seed, "--model", arm.model,
            "--join", "{head_url}" if template else head_url,
            "--node-name", "{node}" if template else member.node]
    values = arm.simulator.model_dump() if arm.simulator else dict(SIMULATOR_DEFAULTS)
    low = bool(member.process and member.process.low_clock)
    return argv + launch_flags({**values, "low_clock_restarts": [restart_index] if low else []},
                               restart_index)


A = TypeVar("A", bound=ArmBase)


class Launcher(Variant, ABC, Generic[A]):
    """How the server of one kind of arm is started: its head (launch) and, for a
    deployment that spans nodes, the process of each further node (start_node)."""

    name: ClassVar[ArmKind]

    @abstractmethod
    def launch(self, arm: A, log_path: Path, seed: int, restart_index: int) -> ServerHandle:
        """Start the arm's server (the head) and return at once (see lifecycle.wait_ready).
        The handle's command lines have their secrets redacted: the handle is recorded
        (restart.json, XCom), the process gets the command as written."""

    def command_template(self, arm: A, restart_index: int) -> list[str]:
        """The head's command as recorded: what is per instance left as a token."""
        raise ValueError(f"arm {arm.name!r}: server = {self.name!r} is not started by "
                         "benchledger")

    def instance_argv(self, arm: A, restart_index: int, port: int, seed: int) -> list[str]:
        """What one restart's process (the head, for an arm that spans nodes) is started
        with."""
        raise ValueError(f"arm {arm.name!r}: server = {self.name!r} is not started by "
                         "benchledger")

    def start_node(self, arm: A, member: DeploymentNode, head: ServerHandle, log_path: Path,
                   seed: int, restart_index: int) -> ServerHandle:
        """Start the process of one more node of the arm's deployment (never the head), on
        this machine, in a new session with its own mark; returns at once. Its base URL is
        where it serves HTTP, else empty. `head`: the head's handle (its port and URL go
        into the command)."""
        raise ValueError(f"arm {arm.name!r}: node {member.node!r} has no process benchledger "
                         f"starts (server = {self.name!r})")

    def node_health_path(self, arm: A, member: DeploymentNode) -> str | None:
        """The path a further node's process answers 200 on while it lives (None: none;
        it is checked by its pid, and at its teardown)."""
        return member.process.health_path if member.process else None


class _ProcessLauncher(Launcher[A]):
    """A kind whose head is a process benchledger starts here, in its own session with a
    mark in its environment (benchledger.server.processes)."""

    @abstractmethod
    def command_template(self, arm: A, restart_index: int) -> list[str]: ...

    @abstractmethod
    def instance_argv(self, arm: A, restart_index: int, port: int, seed: int) -> list[str]: ...

    def launch(self, arm: A, log_path: Path, seed: int, restart_index: int) -> ServerHandle:
        host = _bind_host(arm)
        port = free_port(host)
        template = self.command_template(arm, restart_index)
        argv = self.instance_argv(arm, restart_index, port, seed)
        mark = new_mark()
        pid = start_process(argv, log_path, mark, f"arm {arm.name!r}")
        base_url = with_port(arm.base_url or f"http://{host}:{PORT_TOKEN}", port)
        return ServerHandle(base_url=base_url, pid=pid, port=port, command=redact_argv(argv),
                            command_template=redact_argv(template), log_path=str(log_path),
                            mark=mark)


def _node_handle(arm: ArmBase, member: DeploymentNode, argv: list[str], template: list[str],
                 port: int | None, log_path: Path) -> ServerHandle:
    """Start one further node's process (argv) and say how to reach and stop it."""
    mark = new_mark()
    pid = start_process(argv, log_path, mark, f"arm {arm.name!r} on node {member.node!r}")
    return ServerHandle(
        base_url=f"http://{member.address}:{port}" if port else "", pid=pid, port=port,
        command=redact_argv(argv), command_template=redact_argv(template),
        log_path=str(log_path), mark=mark)


LAUNCHERS: Registry[Launcher[Any]] = Registry("launcher")


@LAUNCHERS.register
class SimulatorLauncher(_ProcessLauncher[SimulatorArm]):
    """The built-in simulator; its port and seed are passed by position."""

    name = "simulator"

    def command_template(self, arm: SimulatorArm, restart_index: int) -> list[str]:
        return simulator_command_template(arm, restart_index)

    def instance_argv(self, arm: SimulatorArm, restart_index: int, port: int,
                      seed: int) -> list[str]:
        return simulator_argv(arm, restart_index, str(port), str(seed))

    def start_node(self, arm: SimulatorArm, member: DeploymentNode, head: ServerHandle,
                   log_path: Path, seed: int, restart_index: int) -> ServerHandle:
        head_url = f"http://{arm.head_address}:{head.port}"
        port = free_port(member.address)
        template = simulator_node_argv(arm, member, head_url, restart_index, "{port}",
                                       "{seed}", template=True)
        argv = simulator_node_argv(arm, member, head_url, restart_index, str(port), str(seed))
        return _node_handle(arm, member, argv, template, port, log_path)

    def node_health_path(self, arm: SimulatorArm, member: DeploymentNode) -> str | None:
        return PRETEND_NODE_HEALTH  # a pretend node answers once it joined its head


@LAUNCHERS.register
class CommandLauncher(_ProcessLauncher[CommandArm]):
    """The arm's own command, {port} (and on a deployment that spans nodes the tokens
    benchledger.sweep.topology lists) substituted as plain text."""

    name = "command"

    def command_template(self, arm: CommandArm, restart_index: int) -> list[str]:
        return split_command(arm)

    def instance_argv(self, arm: CommandArm, restart_index: int, port: int,
                      seed: int) -> list[str]:
        if arm.spans_nodes:
            head = topology.deployment(arm)[0]
            values = topology.process_values(head, len(arm.processes) + 1, head.address,
                                             port, port)
            return [topology.substitute(part, values) for part in split_command(arm)]
        return [with_port(part, port) for part in split_command(arm)]

    def start_node(self, arm: CommandArm, member: DeploymentNode, head: ServerHandle,
                   log_path: Path, seed: int, restart_index: int) -> ServerHandle:
        if member.process is None or not member.process.command:
            return super().start_node(arm, member, head, log_path, seed, restart_index)
        command = member.process.command
        template = split_command(arm, command)
        port = free_port(member.address) if PORT_TOKEN in command else None
        values = topology.process_values(member, len(arm.processes) + 1, arm.head_address,
                                         head.port, port)
        argv = [topology.substitute(part, values) for part in template]
        return _node_handle(arm, member, argv, template, port, log_path)


@LAUNCHERS.register
class ExternalLauncher(Launcher[ExternalArm]):
    """A server already running: nothing is started, the handle is its URL."""

    name = "external"

    def launch(self, arm: ExternalArm, log_path: Path, seed: int,
               restart_index: int) -> ServerHandle:
        return ServerHandle(base_url=arm.base_url, pid=None, port=None, command=None,
                            command_template=None, log_path=None)


def launcher_for(arm: Arm) -> Launcher[Any]:
    """The launcher of the arm's kind (registered under its `server`)."""
    return LAUNCHERS[arm.server]


def launch(arm: Arm, log_path: Path, seed: int, restart_index: int = 0) -> ServerHandle:
    """Start the arm's server in a new session, its mark in its environment (an external
    arm's: nothing to start); returns at once (see lifecycle.wait_ready)."""
    return launcher_for(arm).launch(arm, log_path, seed, restart_index)


def command_template(arm: Arm, restart_index: int = 0) -> list[str]:
    """The head's command as recorded (ValueError for an arm benchledger does not start)."""
    return launcher_for(arm).command_template(arm, restart_index)


def instance_argv(arm: Arm, restart_index: int, port: int, seed: int) -> list[str]:
    """What one restart's process (the head, for an arm that spans nodes) is started with."""
    return launcher_for(arm).instance_argv(arm, restart_index, port, seed)
