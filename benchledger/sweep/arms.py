"""The sweep's [[arms]]: one model per kind of server, chosen by the arm's `server` key.

    server = "simulator"   the built-in simulator, started by benchledger ([arms.simulator])
    server = "command"     a program benchledger starts (`command`, maybe `base_url`)
    server = "external"    a server already running at `base_url`; nothing is started

Each kind holds only its own keys and checks only its own rules; what differs between the
kinds is said once, here, as a class attribute or a method of the kind (`starts_processes`,
`process_serves_http`, ...), never as a comparison of `server` elsewhere. How each kind is
started is benchledger.server.launchers' (one launcher per kind, registered by `server`).
`Arm` is the union pydantic picks a kind from by the `server` key.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field, field_validator, model_validator
from pydantic_core import ErrorDetails

from benchledger.sweep.slos import RateSearch
from benchledger.sweep.values import (
    DEFAULT_METRICS_TIMEOUT_S,
    MAX_NODES,
    URL,
    Arrival,
    ClockRatio,
    ClockSource,
    Concurrency,
    Host,
    MaxTokens,
    Name,
    NodeProcess,
    RateRps,
    Requests,
    Restarts,
    Seconds,
    ServerFamily,
    SimulatorOptions,
    Strict,
    Temperature,
    Text,
    TokenCountName,
    URLPath,
    Warmup,
)

ArmKind = Literal["simulator", "command", "external"]
ARM_KINDS: tuple[str, ...] = get_args(ArmKind)

# A key only some kinds hold, and what an arm of another kind that sets it is told.
_KEYS_OF_OTHER_KINDS = {
    "simulator": "[arms.simulator] options need server = 'simulator'",
    "command": "'command' needs server = 'command'",
}
# What [[arms.processes]] may say, per kind (each kind's _process_problem).
_PROCESS_COMMAND = ("'command' needs server = 'command' (a simulator arm starts pretend "
                    "nodes itself; an external arm only names its nodes)")
_PROCESS_HEALTH_PATH = ("'health_path' needs server = 'command' and a command that serves "
                        "HTTP on {port}")
_PROCESS_LOW_CLOCK = "'low_clock' is a setting of the simulator's pretend nodes"


class _PerArmKeys(Strict):
    """The [defaults] keys an arm may set for itself (PER_ARM_KEYS), each of the [defaults]
    key's type and range; None when the arm leaves it to [defaults] (Sweep.plan). The other
    keys hold for the whole sweep: one request timeout, endpoint, prompt cache, seed,
    reconcile tolerance, clock interval and ruler (client workers, lag and burst bounds)
    for all arms."""

    requests: Requests | None = None
    min_requests: Requests | None = None
    warmup: Warmup | None = None
    restarts: Restarts | None = None
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    concurrency: Concurrency | None = None
    drain_timeout_s: Seconds | None = None
    ready_timeout_s: Seconds | None = None
    arrival: Arrival | None = None
    rate_rps: RateRps | None = None
    rate_search: RateSearch | None = None
    clock_source: ClockSource | None = None
    clock_url: URL | None = None
    min_clock_ratio: ClockRatio | None = None
    require_clock_check: bool | None = None


PER_ARM_KEYS = tuple(_PerArmKeys.model_fields)


class ArmBase(_PerArmKeys):
    """What every kind of arm holds: its own keys below, plus each PER_ARM_KEYS key of
    [defaults] (None when the arm leaves it to [defaults])."""

    # Whether benchledger starts (and stops) the deployment's processes; an arm whose
    # server it does not start has one server, not benchledger's to restart.
    starts_processes: ClassVar[bool] = True
    # The keys the kind must have, and what an arm without one is told (checked before its
    # fields, so the message says what the kind needs rather than "required key").
    _needs: ClassVar[dict[str, str]] = {}

    name: Name
    server: ArmKind
    model: Text
    # Whether the server runs speculative decoding; for simulator arms it follows
    # [arms.simulator].speculative unless set here.
    speculative: bool | None = None
    # Where the server is reached: required for an external server; a server benchledger
    # starts is reached at http://<where it listens>:{port} unless this says otherwise
    # ({port}, its port, the only substitution).
    base_url: URL | None = None
    health_path: URLPath = "/health"
    metrics_path: URLPath = "/metrics"
    # The bound of each scrape of metrics_path (connect to the last byte), at readiness and
    # around every window; a scrape cut there is recorded as `counter unreadable`.
    metrics_timeout_s: Seconds = DEFAULT_METRICS_TIMEOUT_S
    # Whose counter names /metrics carries (vLLM, SGLang, llama.cpp's server, TGI): "auto"
    # recognises them from the names when the server is ready; reconciliation then checks
    # that family's own counters (warehouse/reconcile.py).
    server_family: Literal["auto", ServerFamily] = "auto"
    node: Text = "local"
    # The head's address (where the other nodes of a multi-node deployment reach it, and
    # {address} in clock_url); default: the node's name, 127.0.0.1 for node = "local".
    address: Host | None = None
    # A deployment that spans nodes: one more process per node (the head is this arm's own
    # server on `node`). server = "external": the nodes it spans, nothing is started.
    processes: list[NodeProcess] = Field(default_factory=list, max_length=MAX_NODES)
    # The NAME of an environment variable holding the server's API key (sent as
    # `Authorization: Bearer <value>`). Read when the run starts; the value itself is
    # never written to raw files, the warehouse or exports (only the name is).
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    # Where output token counts come from (T1): the server's per-request usage, the
    # tokens listed in its streamed logprobs (exact, per event), or the received text
    # counted by its tokenizer endpoint (calibrated against non-streamed usage). Never
    # chunks, characters or max_tokens.
    token_count: TokenCountName = "usage"
    # token_count = "server_tokenizer": the server's tokenizer endpoint (vLLM and llama.cpp's
    # server: /tokenize; llama-cpp-python: /extras/tokenize).
    tokenize_path: URLPath = "/tokenize"
    # token_count = "server_tokenizer": non-streamed requests per window whose usage checks
    # the tokenizer's counts (their disagreement blocks the window beyond reconcile_tolerance).
    calibration_requests: int = Field(5, ge=1, le=1000)
    # Whether each request carries its row's request_id as `X-Request-Id` (vLLM and SGLang
    # log it, and vLLM answers with it): false for a server that refuses the header's
    # value, as llama-cpp-python's does any id that is not a UUID (HTTP 400, an empty
    # body). The run's preflight and `init` find that out with one request.
    request_id_header: bool = True

    @model_validator(mode="before")
    @classmethod
    def _keys_fit_the_kind(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for key, message in _KEYS_OF_OTHER_KINDS.items():
            if key in data and key not in cls.model_fields:
                raise ValueError(message)
        for key, message in cls._needs.items():
            if key not in data:
                raise ValueError(message)
        return data

    @field_validator("base_url")
    @classmethod
    def _not_the_api_prefix(cls, url: str | None) -> str | None:
        # The client asks base_url + /v1/chat/completions (and /v1/models, /health): a
        # base_url ending in /v1 (as OpenAI's SDKs want it) would ask /v1/v1/... and be
        # refused as a 404 after the readiness wait.
        if url is not None and url.rstrip("/").endswith("/v1"):
            raise ValueError(f"{url!r} ends in /v1, which benchledger adds itself "
                             "(/v1/chat/completions): give the server's root, "
                             f"{url.rstrip('/').removesuffix('/v1')!r}")
        return url

    @model_validator(mode="after")
    def _processes_fit(self) -> ArmBase:
        problem = self._processes_problem()
        if problem:
            raise ValueError(problem)
        return self

    def _processes_problem(self) -> str | None:
        """What is wrong with the arm's [[arms.processes]], or None."""
        nodes = [self.node, *(p.node for p in self.processes)]
        dupes = sorted({n for n in nodes if nodes.count(n) > 1})
        if dupes:
            return (f"processes: node(s) {dupes} appear twice (the head runs on the arm's "
                    f"node {self.node!r}; one process per node)")
        for i, process in enumerate(self.processes):
            problem = self._process_problem(process)
            if problem:
                return f"processes[{i}] (node {process.node!r}): {problem}"
        return None

    def _process_problem(self, process: NodeProcess) -> str | None:
        """What this kind may not say of one of its processes (a kind that runs no command
        of its own, and no pretend nodes: an external arm's nodes are only named)."""
        if process.command is not None:
            return _PROCESS_COMMAND
        if process.health_path is not None:
            return _PROCESS_HEALTH_PATH
        if process.low_clock:
            return _PROCESS_LOW_CLOCK
        return None

    def process_serves_http(self, process: NodeProcess) -> bool:
        """Whether one of the arm's processes beside the head serves HTTP benchledger can
        reach (its own base URL; the head always does)."""
        return False

    @property
    def commands(self) -> list[str]:
        """The command texts the arm's processes are started with (where a secret would be
        recorded redacted)."""
        return []

    def _launch_settings(self) -> tuple[object, ...]:
        """The kind's own keys that say how its server is started (server_settings)."""
        return ()

    @property
    def head_address(self) -> str:
        """Where the head (this arm's own server) is reached from the other nodes."""
        if self.address:
            return self.address
        return "127.0.0.1" if self.node == "local" else self.node

    @property
    def spans_nodes(self) -> bool:
        return bool(self.processes)

    @property
    def is_speculative(self) -> bool:
        return bool(self.speculative)


class SimulatorArm(ArmBase):
    """The built-in simulator, started by benchledger with its [arms.simulator] options; an
    arm that spans nodes starts a pretend node on each further node."""

    server: Literal["simulator"] = "simulator"
    simulator: SimulatorOptions | None = None

    def _processes_problem(self) -> str | None:
        problem = super()._processes_problem()
        if problem or self.simulator is None:
            return problem
        gpus, stuck = (getattr(self.simulator, key) for key in ("num_gpus", "low_clock_gpu"))
        if stuck >= gpus:
            return (f"[arms.simulator] low_clock_gpu = {stuck} names no GPU of num_gpus = "
                    f"{gpus} (GPUs are numbered from 0)")
        return None

    def _process_problem(self, process: NodeProcess) -> str | None:
        if process.command is not None:
            return _PROCESS_COMMAND
        if process.health_path is not None:
            return _PROCESS_HEALTH_PATH
        return None  # low_clock: the pretend node's stuck GPU

    def process_serves_http(self, process: NodeProcess) -> bool:
        return True  # a pretend node serves its GPUs' telemetry

    def _launch_settings(self) -> tuple[object, ...]:
        return (self.simulator,)

    @property
    def is_speculative(self) -> bool:
        if self.speculative is not None:
            return self.speculative
        return bool(self.simulator and self.simulator.speculative)


class CommandArm(ArmBase):
    """A program benchledger starts from the arm's `command` (and, for a deployment that
    spans nodes, each process's own command on its node)."""

    _needs = {"command": "server = 'command' needs a 'command' (it may contain {port})"}

    server: Literal["command"] = "command"
    command: Text  # may use {port}

    def _process_problem(self, process: NodeProcess) -> str | None:
        if not process.command:
            return "server = 'command' needs a 'command' for every process"
        if process.health_path is not None and "{port}" not in process.command:
            return _PROCESS_HEALTH_PATH
        if process.low_clock:
            return _PROCESS_LOW_CLOCK
        return None

    def process_serves_http(self, process: NodeProcess) -> bool:
        return "{port}" in (process.command or "")

    @property
    def commands(self) -> list[str]:
        return [self.command, *(p.command for p in self.processes if p.command)]

    def _launch_settings(self) -> tuple[object, ...]:
        return (self.command,)


class ExternalArm(ArmBase):
    """A server already running at `base_url`: measured, never started, stopped or
    restarted (its `processes` only name the nodes it spans)."""

    starts_processes = False
    _needs = {"base_url": "server = 'external' needs a 'base_url'"}

    server: Literal["external"] = "external"
    base_url: URL  # required: nothing is started, so nothing else says where it is

    @model_validator(mode="after")
    def _runs_once(self) -> ExternalArm:
        if self.restarts not in (None, 1):
            raise ValueError("server = 'external' cannot be restarted: 'restarts' must be 1")
        return self



Arm = Annotated[SimulatorArm | CommandArm | ExternalArm, Field(discriminator="server")]


def server_settings(arm: Arm) -> tuple[object, ...]:
    """What makes two arms' servers the same configuration, as far as the sweep says
    (the effective config each server reports is compared again at run time)."""
    return (arm.server, arm.model, *arm._launch_settings(), arm.base_url, arm.speculative,
            tuple((p.command, p.low_clock) for p in arm.processes))


def as_the_file_says(error: ErrorDetails) -> ErrorDetails:
    """One of pydantic's errors of the sweep, said of the file's keys: pydantic names the
    kind it chose after an arm's index (arms.0.command.model) and reports a missing or
    unknown `server` as the union's; the file has only arms[0].model and arms[0].server."""
    loc = error["loc"]
    if len(loc) > 2 and loc[0] == "arms" and isinstance(loc[1], int) and loc[2] in ARM_KINDS:
        return {**error, "loc": (*loc[:2], *loc[3:])}
    if error["type"] == "union_tag_not_found":
        return {**error, "loc": (*loc, "server"), "type": "missing"}
    if error["type"] == "union_tag_invalid":
        kinds = [f"'{kind}'" for kind in ARM_KINDS]
        given = error["input"].get("server") if isinstance(error["input"], dict) else None
        return {**error, "loc": (*loc, "server"), "input": given,
                "msg": f"Input should be {', '.join(kinds[:-1])} or {kinds[-1]}"}
    return error


def key_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not str(part).startswith("function-"):
            path += f".{part}" if path else str(part)
    return path


def describe(error: ErrorDetails) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required key is missing"
    got = error.get("input")
    got_text = "" if isinstance(got, dict) else f" (got {got!r})"
    return f"{error['msg'].removeprefix('Value error, ')}{got_text}"


def error_line(error: ErrorDetails) -> str:
    """One validation error as a sweep file's reader wants it: `key.path: what is wrong`."""
    path = key_path(error["loc"])
    return f"{path + ': ' if path else ''}{describe(error)}"
