"""The sweep file's value types: names, texts, URLs, bounds and ranges, and the tables an
arm may hold ([arms.simulator], [[arms.processes]]). benchledger.sweep.spec builds the sweep's
model from them; this module holds no checks between keys (those are the sweep's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, create_model

from benchledger.simulator import options as simulator_options

# Names end up in Airflow task ids and file paths, so keep them to a safe alphabet.
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
# Free text that reaches a process's argv, an HTTP request or a manifest: printable, no
# control characters (a NUL would only fail later, deep in a launch or a write).
Text = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]+$")]
URLPath = Annotated[str, Field(max_length=1024, pattern=r"^/[^\s\x00-\x1f\x7f]*$")]
# An http(s) URL; `{port}` (command arms) or `{base_url}` (clock_url) may stand in.
URL = Annotated[str, Field(max_length=2048,
                           pattern=r"^(https?://|\{base_url\})[^\s\x00-\x1f\x7f]*$")]

# Upper bounds, so a typo (requests = 10**9) is refused before anything runs, not found by
# the machine running out of memory hours later. Each says what it protects.
MAX_REQUESTS = 1_000_000  # a window's rows stay in memory until its Parquet file is written
MAX_WARMUP = 10_000
MAX_RESTARTS = 100  # each restart is a chain of Airflow tasks per arm
MAX_CONCURRENCY = 10_000  # streams held open by one measuring process
MAX_TOKENS = 1_000_000  # stored as 32-bit integers
MAX_WAIT_S = 86_400.0  # every wait has a bound; a day is the longest any may be
Seconds = Annotated[float, Field(gt=0, le=MAX_WAIT_S)]
# How long one read of a server's /metrics may take, the whole answer (arms.metrics_timeout_s;
# benchledger.server.observe): past it the scrape is `counter unreadable`, not a missing counter.
DEFAULT_METRICS_TIMEOUT_S = 10.0
# Airflow's schedule presets; anything else must be a cron expression.
SCHEDULE_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly",
                    "@quarterly", "@yearly")
MAX_SWEEP_BYTES = 1 << 20
# A task that fails for a reason other than a result (a lost connection, a killed worker)
# is retried at most this often; more would only hide a broken node.
MAX_RETRIES = 10
MAX_RETRY_DELAY_S = 3600.0
# Worker processes of the measurement client: each holds one event loop on one core, and
# no measuring machine has spare cores for more.
MAX_CLIENT_WORKERS = 64


BUILTIN_PROMPT_SETS = ("code", "prose")
# Servers whose /metrics names benchledger knows (arms.server_family; benchledger.server.observe
# recognises them, benchledger.warehouse.reconcile knows their counters).
ServerFamily = Literal["vllm", "sglang", "llamacpp", "tgi"]
SERVER_FAMILIES: tuple[str, ...] = get_args(ServerFamily)

# [defaults].endpoint and Arm.token_count (see there); benchledger.client's Target takes
# these values.
EndpointName = Literal["chat", "completions"]
TokenCountName = Literal["usage", "logprobs", "server_tokenizer"]

# The types and ranges of the [defaults] keys an arm may also set for itself (PER_ARM_KEYS),
# declared once, for [defaults] (with its default) and for an arm (or None: not set).
Requests = Annotated[int, Field(ge=1, le=MAX_REQUESTS)]
Warmup = Annotated[int, Field(ge=0, le=MAX_WARMUP)]
Restarts = Annotated[int, Field(ge=1, le=MAX_RESTARTS)]
MaxTokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Temperature = Annotated[float, Field(ge=0.0, le=100.0)]
Concurrency = Annotated[list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]],
                        Field(min_length=1, max_length=100)]
# closed: `concurrency` users, each sending its next request when the last one ends;
# poisson: open-loop arrivals at rate_rps, exponential gaps (seeded); constant: open loop at
# rate_rps, evenly spaced. Open loops keep at most `concurrency` requests outstanding.
Arrival = Literal["closed", "poisson", "constant"]
# The headline metrics a sweep's history follows and its regression gate may check
# (warehouse/history.py): per-user decode rate, output throughput, TTFT p50/p90, goodput,
# energy per token.
HeadlineMetric = Literal["decode_rate", "throughput", "ttft", "goodput", "energy_per_token"]
OPEN_LOOP_ARRIVALS = ("poisson", "constant")
Rate = Annotated[float, Field(gt=0, le=1e6)]
# One rate, or a rate ladder (issue #27): one load point per rate (and concurrency).
RateRps = Rate | Annotated[list[Rate], Field(min_length=1, max_length=100)]
# nvidia-smi on the measuring node; an HTTP endpoint of nvidia-smi's fields as JSON (the
# simulator's /clocks); NVIDIA's dcgm-exporter page on every node of the deployment.
ClockSource = Literal["nvidia-smi", "http", "dcgm", "none"]
# Where each node's dcgm-exporter serves its page when the sweep names no clock_url.
DEFAULT_DCGM_URL = "http://{address}:9400/metrics"
ClockRatio = Annotated[float, Field(gt=0, le=1)]


def _client_workers(value: object) -> int | str:
    # One message naming both forms, not pydantic's one error per member of the union.
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 1 <= value <= MAX_CLIENT_WORKERS:
        raise ValueError(f'expected "auto" or a number of worker processes from 1 to '
                         f"{MAX_CLIENT_WORKERS}")
    return value


ClientWorkers = Annotated[int | Literal["auto"], PlainValidator(_client_workers)]


class Strict(BaseModel):
    # allow_inf_nan=False: TOML has inf and nan, and no bound or rate may be either.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _simulator_options_model() -> type[Strict]:
    """The [arms.simulator] table, from the simulator's own declaration of its settings
    (benchledger.simulator.options): same keys, types, defaults and ranges."""
    fields: dict[str, Any] = {}
    for option in simulator_options.SWEEP_OPTIONS:
        key = option.sweep_key
        assert key is not None  # SWEEP_OPTIONS are the options that have one
        if option.per_restart:  # e.g. low_clock_restarts: the restarts that get low_clock
            fields[key] = (list[Annotated[int, Field(ge=0)]],
                           Field(default_factory=list, description=option.setting.help))
        else:
            fields[key] = (option.type, Field(
                option.default, description=option.setting.help, ge=option.setting.ge,
                gt=option.setting.gt, le=option.setting.le))
    return create_model("SimulatorOptions", __base__=Strict, __module__=__name__,
                        __doc__="Settings of the built-in simulator; each becomes "
                                "`benchledger simulator` flags (see lifecycle).",
                        **fields)


if TYPE_CHECKING:
    class SimulatorOptions(Strict):
        """What mypy knows of the [arms.simulator] model: it is made at import from the
        simulator's declaration, so only the key the sweep itself reads is named here."""

        speculative: bool
else:
    SimulatorOptions = _simulator_options_model()


# A node's name (its Airflow queue, and part of task ids and raw file names) and the address
# others reach it at (a host name or an IPv4 address).
NodeName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
Host = Annotated[str, Field(max_length=253,
                            pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")]
MAX_NODES = 256  # processes of one deployment: one Airflow launch and stop task each


class NodeProcess(Strict):
    """One more process of a deployment that spans nodes, on its own node (docs/protocol.md,
    the sweep file: multi-node arms). The arm's own `node` runs the head, which serves the
    API that is measured; each of these runs beside it on another node, started and
    stopped there by that node's Airflow tasks."""

    node: NodeName
    address: Host | None = None  # how the other nodes reach it; default: its node name
    # server = "command": what runs there. benchledger.sweep.topology lists what it may use
    # ({head_address}, {head_port}, {head_url}, {address}, {port}, {rank}, {nnodes}).
    command: Text | None = None
    # server = "command", a process that serves HTTP on {port}: a path that answers 200
    # while it lives, asked after each window (a process without one is checked by its
    # pid where it runs on the measuring host, and always at its teardown).
    health_path: URLPath | None = None
    # server = "simulator": this pretend node's stuck GPU ([arms.simulator] low_clock_gpu)
    # stays at low_clock_mhz under load, and the whole deployment steps that much slower.
    low_clock: bool = False


# How a sweep orders its restarts (benchledger.sweep.order; [sweep] restart_order).
RestartOrder = Literal["blocked", "arm_by_arm"]
BLOCKED: RestartOrder = "blocked"
ARM_BY_ARM: RestartOrder = "arm_by_arm"


def sequential_problem(section: Any, restarts: list[tuple[str, int]],
                       has_comparisons: bool) -> str | None:
    """Why `[sweep] max_restarts` cannot run as asked (None: it can, or is not set).
    `restarts`: each arm's planned restarts (an external arm's is 1)."""
    maximum = section.max_restarts
    if maximum is None:
        return None
    if section.restart_order != BLOCKED:
        return ("sweep.max_restarts needs restart_order = \"blocked\": an interim look after "
                "each block is what lets the remaining blocks be skipped")
    if not has_comparisons:
        return "sweep.max_restarts stops once every comparison is decided: name [[comparisons]]"
    counts = {n for _, n in restarts}
    if len(counts) > 1 or min(counts) < 2:
        named = ", ".join(f"{arm} {n}" for arm, n in restarts)
        return ("sweep.max_restarts needs every arm to start its own server with the same "
                f"restarts >= 2 (the minimum before the first look), found: {named}")
    minimum = counts.pop()
    if maximum < minimum:
        return (f"sweep.max_restarts = {maximum} is below restarts = {minimum}: it is the "
                "maximum, restarts the minimum")
    return None
