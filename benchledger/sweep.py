"""The sweep file (PROTOCOL section 3): TOML -> a typed, validated model.

Every error names the file, the key path and what was expected, and a sweep is validated
whole before anything runs, so a typo never half-runs a sweep.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from croniter import croniter
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    create_model,
    model_validator,
)
from pydantic_core import ErrorDetails

# The n rule's floor (T4: 15 speculative, 5 otherwise) and the default thresholds come from
# the rule catalogue; a sweep may ask for more requests, never for fewer.
from benchledger.redaction import UnredactableSweep, redact_sweep_text
from benchledger.rules import (
    AB_ARMS_DIFFER,
    CLOCK_UNDER_LOAD,
    DEFAULT_MAX_BURST_FRACTION,
    DEFAULT_MIN_CLOCK_RATIO,
    DEFAULT_RECONCILE_TOLERANCE,
    MIN_REQUESTS_PLAIN,
    MIN_REQUESTS_SPECULATIVE,
    N_AT_LEAST_MIN,
)
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
# benchledger.observe): past it the scrape is `counter unreadable`, not a missing counter.
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
# Servers whose /metrics names benchledger knows (arms.server_family; benchledger.observe
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
Arrival = Literal["closed", "poisson"]
RateRps = Annotated[float, Field(gt=0, le=1e6)]
ClockSource = Literal["nvidia-smi", "http", "none"]
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


class SweepError(ValueError):
    """A sweep file that cannot be run, with the file and key that are wrong."""


class _Strict(BaseModel):
    # allow_inf_nan=False: TOML has inf and nan, and no bound or rate may be either.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SweepSection(_Strict):
    name: Name
    schedule: str | None = None
    description: str = Field("", max_length=10_000)
    # Airflow retries of the restart tasks (launch, wait, measure, stop) and of load: how
    # often, and how long to wait before each. Validation and derivation are never retried:
    # a failed rule is a result, not an error.
    retries: int = Field(1, ge=0, le=MAX_RETRIES)
    retry_delay_s: float = Field(10.0, ge=0, le=MAX_RETRY_DELAY_S)

    @model_validator(mode="after")
    def _schedule_is_airflows(self) -> SweepSection:
        schedule = self.airflow_schedule
        if schedule is not None and schedule not in SCHEDULE_PRESETS \
                and not croniter.is_valid(schedule):
            raise ValueError(f"schedule {schedule!r} is neither a cron expression nor one "
                             f"of {', '.join(SCHEDULE_PRESETS)} (or \"none\")")
        return self

    @property
    def airflow_schedule(self) -> str | None:
        return None if self.schedule in (None, "", "none") else self.schedule


class Defaults(_Strict):
    requests: Requests = 15
    # The n the gate demands per workload per restart; may raise the protocol's floor
    # (15 speculative, 5 otherwise), never lower it.
    min_requests: Requests | None = None
    warmup: Warmup = 2
    restarts: Restarts = 2
    max_tokens: MaxTokens = 128
    temperature: Temperature = 0.0
    concurrency: Concurrency = Field(default_factory=lambda: [1])
    drain_timeout_s: Seconds = 300.0
    request_timeout_s: Seconds = 600.0
    ready_timeout_s: Seconds = 120.0
    endpoint: EndpointName = "chat"
    # closed: keep `concurrency` requests outstanding. poisson: open-loop arrivals at
    # rate_rps (seeded), at most `concurrency` outstanding (like vLLM bench's max-concurrency).
    arrival: Arrival = "closed"
    rate_rps: RateRps | None = None
    prompt_cache: Literal["warm", "cold"] = "warm"  # cold: a unique prefix on every prompt
    # arrival times and cold-prompt prefixes derive from it; stored as a 64-bit integer
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] = 0
    # Server counters must agree with delivered usage within this fraction (T3).
    reconcile_tolerance: Annotated[float, Field(ge=0, le=1)] = DEFAULT_RECONCILE_TOLERANCE
    # GPU clocks under load (T10): read with nvidia-smi on the measuring node, or from an
    # HTTP endpoint ({base_url} is the arm's server); "none" leaves the node unchecked.
    clock_source: ClockSource = "nvidia-smi"
    clock_url: URL | None = None
    clock_interval_s: Annotated[float, Field(gt=0, le=3600)] = 0.5
    min_clock_ratio: ClockRatio = DEFAULT_MIN_CLOCK_RATIO
    require_clock_check: bool = True  # false: an unchecked node may publish (recorded)
    # The ruler (T17). Sweep-wide, not per arm: arms measured by different rulers would
    # differ by the ruler. How many worker processes the measurement client spreads a
    # window's streams over ("auto": the client decides from the concurrency and the
    # cores); benchledger.restart hands ArmPlan.client_workers to the client.
    client_workers: ClientWorkers = "auto"
    # client_lag_within_bound: the client lag p99 (ms) a window may show; None: a tenth of
    # the smallest quantity the window measures (its median TTFT or decode span).
    max_client_lag_ms: Annotated[float, Field(gt=0, le=MAX_WAIT_S * 1000)] | None = None
    # burst_share_bounded: the share of completed requests that may arrive in a burst
    # before the decode-phase per-request entries resting on them are blocked.
    max_burst_fraction: Annotated[float, Field(ge=0, le=1)] = DEFAULT_MAX_BURST_FRACTION


def _simulator_options_model() -> type[_Strict]:
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
    return create_model("SimulatorOptions", __base__=_Strict, __module__=__name__,
                        __doc__="Settings of the built-in simulator; each becomes "
                                "`benchledger simulator` flags (see lifecycle).",
                        **fields)


if TYPE_CHECKING:
    class SimulatorOptions(_Strict):
        """What mypy knows of the [arms.simulator] model: it is made at import from the
        simulator's declaration, so only the key the sweep itself reads is named here."""

        speculative: bool
else:
    SimulatorOptions = _simulator_options_model()


class _PerArmKeys(_Strict):
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
    clock_source: ClockSource | None = None
    clock_url: URL | None = None
    min_clock_ratio: ClockRatio | None = None
    require_clock_check: bool | None = None


PER_ARM_KEYS = tuple(_PerArmKeys.model_fields)


class Arm(_PerArmKeys):
    """One server configuration: its own keys below, plus each PER_ARM_KEYS key of
    [defaults] (None when the arm leaves it to [defaults])."""

    name: Name
    server: Literal["simulator", "command", "external"]
    model: Text
    # Whether the server runs speculative decoding; for simulator arms it follows
    # [arms.simulator].speculative unless set here.
    speculative: bool | None = None
    command: Text | None = None  # server = "command": may use {port}
    base_url: URL | None = None  # server = "external" (required) or "command" (default loopback)
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
    simulator: SimulatorOptions | None = None

    @model_validator(mode="after")
    def _server_keys_fit(self) -> Arm:
        if self.server == "command" and not self.command:
            raise ValueError("server = 'command' needs a 'command' (it may contain {port})")
        if self.server == "external" and not self.base_url:
            raise ValueError("server = 'external' needs a 'base_url'")
        if self.server == "external" and self.restarts not in (None, 1):
            raise ValueError("server = 'external' cannot be restarted: 'restarts' must be 1")
        if self.server != "simulator" and self.simulator is not None:
            raise ValueError("[arms.simulator] options need server = 'simulator'")
        if self.server != "command" and self.command is not None:
            raise ValueError("'command' needs server = 'command'")
        return self

    @property
    def is_speculative(self) -> bool:
        if self.speculative is not None:
            return self.speculative
        return bool(self.simulator and self.simulator.speculative)


class Workload(_Strict):
    name: Name
    prompt_set: Literal["code", "prose"] | None = None  # defaults to the workload name
    prompt_cache: Literal["warm", "cold"] | None = None  # defaults to [defaults]
    # Long inputs: filler text in front of each built-in prompt, about this many tokens
    # (the server's usage says how many it really were).
    input_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    # the output target; overrides the arm's
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _prompt_set_known(self) -> Workload:
        if self.prompt_set is None and self.name not in BUILTIN_PROMPT_SETS:
            raise ValueError(
                f"workload {self.name!r} is not a built-in prompt set; "
                f"set prompt_set to one of {list(BUILTIN_PROMPT_SETS)}"
            )
        return self

    @property
    def prompts(self) -> str:
        return self.prompt_set or self.name


# Metrics a comparison may name (see warehouse/metrics.py for what each one is).
ComparableMetric = Literal["decode_rate", "e2e_rate", "prefill_rate", "ttft", "tpot",
                           "e2e_latency", "throughput", "success_fraction",
                           "completion_fraction"]
COMPARABLE_METRICS: tuple[str, ...] = get_args(ComparableMetric)


class Comparison(_Strict):
    """An A/B: is b better than a on `metric`, beyond what a same-vs-same control shows?"""

    a: Name
    b: Name
    metric: ComparableMetric
    numerator: Literal["output_tokens", "input_plus_output_tokens"] | None = None
    concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY)  # default: the lowest shared
    # An arm run twice under two names (A/A): a difference no larger than theirs is noise.
    control: list[Name] | None = Field(None, min_length=2, max_length=2)


# An ArmPlan field named apart from its [defaults] key: plan.min_requests is the n the gate
# demands (the protocol floor or more), the key's own value is plan.min_requests_key.
_PLAN_NAMES = {"min_requests": "min_requests_key"}


class ArmPlan(BaseModel):
    """One arm with [defaults] applied: what the DAG and the measurement actually use.

    Its fields: every [defaults] key with the value that applies to this arm (min_requests
    as min_requests_key; the values were checked where they were set), and `arm`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int
    min_requests_key: int | None
    warmup: int
    restarts: int
    max_tokens: int
    temperature: float
    concurrency: list[int]
    drain_timeout_s: float
    request_timeout_s: float
    ready_timeout_s: float
    endpoint: EndpointName
    arrival: Arrival
    rate_rps: float | None
    prompt_cache: Literal["warm", "cold"]
    seed: int
    reconcile_tolerance: float
    clock_source: ClockSource
    clock_url: str | None
    clock_interval_s: float
    min_clock_ratio: float
    require_clock_check: bool
    client_workers: int | Literal["auto"]
    max_client_lag_ms: float | None
    max_burst_fraction: float
    arm: Arm

    @property
    def protocol_floor(self) -> int:
        return MIN_REQUESTS_SPECULATIVE if self.arm.is_speculative else MIN_REQUESTS_PLAIN

    @property
    def min_requests(self) -> int:
        """The n the gate demands per workload per restart (protocol floor or more)."""
        return max(self.protocol_floor, self.min_requests_key or 0)


class Sweep(_Strict):
    sweep: SweepSection
    defaults: Defaults = Field(default_factory=Defaults)
    arms: list[Arm] = Field(min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    comparisons: list[Comparison] = Field(default_factory=list)

    @model_validator(mode="after")
    def _comparisons_are_ab(self) -> Sweep:
        arms = {arm.name: arm for arm in self.arms}
        for i, comparison in enumerate(self.comparisons):
            named = [comparison.a, comparison.b, *(comparison.control or [])]
            unknown = [n for n in named if n not in arms]
            if unknown:
                raise ValueError(f"comparisons[{i}]: no arm named {unknown} "
                                 f"(arms: {sorted(arms)})")
            if comparison.a == comparison.b:
                raise ValueError(f"comparisons[{i}]: a and b are the same arm")
            if server_settings(arms[comparison.a]) == server_settings(arms[comparison.b]):
                # T11: an A/B whose arms run one setting can only measure noise.
                raise ValueError(
                    f"comparisons[{i}]: rule {AB_ARMS_DIFFER.name} (T11): arms "
                    f"{comparison.a!r} and {comparison.b!r} have "
                    "identical server settings, so this is an A/A control, not an A/B; "
                    "name them as its `control` and compare arms that differ")
            if comparison.control and len(set(comparison.control)) != 2:
                raise ValueError(f"comparisons[{i}]: control needs two different arms")
        return self

    @model_validator(mode="after")
    def _arm_plans_are_runnable(self, info: ValidationInfo) -> Sweep:
        """Each arm with [defaults] applied: checks that need both (one place, one loop).
        A sweep a run recorded is not refused for never publishing: that refusal is for new
        runs, and a run measured before it came must still derive (its entries blocked)."""
        recorded = bool(info.context and info.context.get("recorded"))
        for i, arm in enumerate(self.arms):
            plan = self.plan(arm)
            problem = (_n_problem(plan) or _clock_problem(plan) or _arrival_problem(plan)
                       or (None if recorded else _never_publishes(plan)))
            if problem:
                raise ValueError(f"arms[{i}] ({arm.name}): {problem}")
        return self

    @model_validator(mode="after")
    def _names_unique(self) -> Sweep:
        for label, names in (("arms", [a.name for a in self.arms]),
                             ("workloads", [w.name for w in self.workloads])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{label}: duplicate name(s) {dupes}")
        return self

    @property
    def dag_id(self) -> str:
        """The Airflow DAG id of this sweep."""
        return "benchledger_" + self.sweep.name

    @property
    def publish_dag_id(self) -> str:
        """The sweep's publish DAG, run by the asset its entries update."""
        return self.dag_id + "_publish"

    def plan(self, arm: Arm) -> ArmPlan:
        """[defaults] with the arm's own values of PER_ARM_KEYS on top."""
        merged = {key: getattr(self.defaults, key) for key in Defaults.model_fields}
        merged.update((key, value) for key in PER_ARM_KEYS
                      if (value := getattr(arm, key)) is not None)
        if arm.server == "external":
            merged["restarts"] = 1  # one server, not ours to restart
        return ArmPlan(arm=arm, **{_PLAN_NAMES.get(key, key): value
                                   for key, value in merged.items()})

    def arm(self, name: str) -> ArmPlan:
        for arm in self.arms:
            if arm.name == name:
                return self.plan(arm)
        raise KeyError(f"sweep {self.sweep.name!r} has no arm {name!r}")

    def workload(self, name: str) -> Workload:
        for workload in self.workloads:
            if workload.name == name:
                return workload
        raise KeyError(f"sweep {self.sweep.name!r} has no workload {name!r}")


def _n_problem(plan: ArmPlan) -> str | None:
    kind = "speculative" if plan.arm.is_speculative else "non-speculative"
    if plan.min_requests_key is not None and plan.min_requests_key < plan.protocol_floor:
        return (f"min_requests = {plan.min_requests_key} is below the protocol's "
                f"n >= {plan.protocol_floor} for {kind} arms (rule {N_AT_LEAST_MIN.name}, T4)")
    if plan.requests < plan.min_requests:
        return (f"requests = {plan.requests} is below the n the gate requires "
                f"({plan.min_requests} for {kind} arms, rule {N_AT_LEAST_MIN.name}, T4)")
    return None


def _clock_problem(plan: ArmPlan) -> str | None:
    if plan.clock_source == "http" and not plan.clock_url:
        return "clock_source = 'http' needs a clock_url (e.g. \"{base_url}/clocks\")"
    return None


def _never_publishes(plan: ArmPlan) -> str | None:
    """Settings under which a rule fails on everything the arm measures, whatever the
    server does: refused here rather than found out after the run (docs/protocol.md, sweep
    file: refused combinations)."""
    if plan.clock_source == "none" and plan.require_clock_check:
        return (f"clock_source = 'none' with require_clock_check = true can never publish "
                f"(every restart fails {CLOCK_UNDER_LOAD.name}, T10): set clock_source "
                "('nvidia-smi', or 'http' with a clock_url), or set require_clock_check = "
                "false and accept the label 'unchecked'")
    return None


def _arrival_problem(plan: ArmPlan) -> str | None:
    if plan.arrival == "poisson" and plan.rate_rps is None:
        return "arrival = 'poisson' needs rate_rps (in [defaults] or the arm)"
    return None


def server_settings(arm: Arm) -> tuple[object, ...]:
    """What makes two arms' servers the same configuration, as far as the sweep says
    (the effective config each server reports is compared again at run time)."""
    return (arm.server, arm.model, arm.command, arm.base_url, arm.simulator, arm.speculative)


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not str(part).startswith("function-"):
            path += f".{part}" if path else str(part)
    return path


def _describe(error: ErrorDetails) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required key is missing"
    got = error.get("input")
    got_text = "" if isinstance(got, dict) else f" (got {got!r})"
    return f"{error['msg'].removeprefix('Value error, ')}{got_text}"


def parse_sweep(text: str, source: str = "<sweep>", recorded: bool = False) -> Sweep:
    """Parse sweep TOML text; `source` names the file in error messages. `recorded`: the
    text a run recorded (parse_recorded), not a sweep about to run."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SweepError(f"{source}: not valid TOML: {exc}") from exc
    try:
        return Sweep.model_validate(data, context={"recorded": recorded})
    except ValidationError as exc:
        lines = [f"{source}: {_key_path(e['loc']) + ': ' if _key_path(e['loc']) else ''}"
                 f"{_describe(e)}" for e in exc.errors()]
        raise SweepError("invalid sweep file\n  " + "\n  ".join(lines)) from None


def read_sweep_file(path: str | Path) -> tuple[str, str]:
    """(text, sha256) of a sweep file, read once: the text exactly as its bytes say (no
    newline translation), so the sha256 of the text a run records is the file's."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SWEEP_BYTES + 1)
    except OSError as exc:
        raise SweepError(f"{path}: cannot read sweep file: {exc.strerror}") from exc
    if len(data) > MAX_SWEEP_BYTES:
        raise SweepError(f"{path}: larger than {MAX_SWEEP_BYTES} bytes; not a sweep file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SweepError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); TOML files are UTF-8") from None
    return text, hashlib.sha256(data).hexdigest()


def recorded_form(text: str, sha256: str, source: str = "<sweep>") -> tuple[str, str]:
    """What a run records of a sweep file read as (text, sha256): the same, or, when an
    arm's command holds secrets (benchledger.redaction), the text with them replaced by
    `<redacted>` and that text's sha256. The secrets stay in the file: the launch of such
    an arm reads its command from there (benchledger.restart), nothing else needs them."""
    try:
        recorded = redact_sweep_text(text, source)
    except UnredactableSweep as exc:
        raise SweepError(str(exc)) from None
    if recorded == text:
        return text, sha256
    return recorded, hashlib.sha256(recorded.encode("utf-8")).hexdigest()


class RecordedSweepMismatch(SweepError):
    """A recorded sweep text that is not the text its recorded sha256 names."""


def parse_recorded(text: str, sha256: str | None, source: str) -> Sweep:
    """A sweep as a run recorded it (its text and the sha256 of the file it was read from),
    the text checked against the sha256, then parsed: what every step after the plan reads.
    The file's sha256 is of the text itself or, for runs recorded before the text was read
    as bytes (it kept universal newlines), of its CRLF form. None: nothing was recorded to
    check against."""
    if sha256 is not None:
        digests = {hashlib.sha256(variant.encode("utf-8")).hexdigest()
                   for variant in (text, text.replace("\n", "\r\n"))}
        if sha256 not in digests:
            raise RecordedSweepMismatch(
                f"{source}: the recorded sweep text does not have the sha256 recorded with it "
                f"({sha256}; the text's is {hashlib.sha256(text.encode()).hexdigest()})")
    return parse_sweep(text, source=source, recorded=True)


def load_sweep(path: str | Path) -> Sweep:
    text, sha256 = read_sweep_file(path)
    sweep = parse_sweep(text, source=str(path))
    recorded_form(text, sha256, str(path))  # a secret it could not record is refused now
    return sweep
