"""The sweep file (PROTOCOL section 3): TOML -> a typed, validated model.

Every error names the file, the key path and what was expected, and a sweep is validated
whole before anything runs, so a typo never half-runs a sweep.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Annotated, Literal, get_args

from croniter import croniter
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

# The n rule's floor (T4: 15 speculative, 5 otherwise) and the default thresholds come from
# the rule catalogue; a sweep may ask for more requests, never for fewer.
from benchledger.redaction import UnredactableSweep, redact_sweep_text
from benchledger.rules import (
    AB_ARMS_DIFFER,
    CLOCK_UNDER_LOAD,
    DEFAULT_MAX_ARRIVAL_LAG_MS,
    DEFAULT_MAX_BURST_FRACTION,
    DEFAULT_MIN_CLOCK_RATIO,
    DEFAULT_RECONCILE_TOLERANCE,
    MIN_REQUESTS_PLAIN,
    MIN_REQUESTS_SPECULATIVE,
    N_AT_LEAST_MIN,
)

# The [[arms]], one model per kind of server (re-exported: callers import them here).
from benchledger.sweep.arms import (  # noqa: F401
    ARM_KINDS,
    PER_ARM_KEYS,
    Arm,
    ArmBase,
    ArmKind,
    CommandArm,
    ExternalArm,
    SimulatorArm,
    as_the_file_says,
    error_line,
    server_settings,
)

# [[slos]], [slo_target] and load points (re-exported: callers import them here).
from benchledger.sweep.slos import (  # noqa: F401
    MAX_SLOS,
    LoadPoint,
    RateSearch,
    Slo,
    SloTarget,
    load_points,
    slos_problem,
)

# The value types and the tables an arm may hold (re-exported: callers import them here).
from benchledger.sweep.values import (  # noqa: F401
    BLOCKED,
    BUILTIN_PROMPT_SETS,
    DEFAULT_DCGM_URL,
    DEFAULT_METRICS_TIMEOUT_S,
    MAX_CLIENT_WORKERS,
    MAX_CONCURRENCY,
    MAX_NODES,
    MAX_REQUESTS,
    MAX_RESTARTS,
    MAX_RETRIES,
    MAX_RETRY_DELAY_S,
    MAX_SWEEP_BYTES,
    MAX_TOKENS,
    MAX_WAIT_S,
    MAX_WARMUP,
    OPEN_LOOP_ARRIVALS,
    SCHEDULE_PRESETS,
    SERVER_FAMILIES,
    URL,
    Arrival,
    ClientWorkers,
    ClockRatio,
    ClockSource,
    Concurrency,
    EndpointName,
    HeadlineMetric,
    Host,
    MaxTokens,
    Name,
    NodeProcess,
    RateRps,
    Requests,
    RestartOrder,
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
    sequential_problem,
)

# The [[workloads]] table (re-exported: callers import it here).
from benchledger.sweep.workload import Workload


class SweepError(ValueError):
    """A sweep file that cannot be run, with the file and key that are wrong."""


class SweepSection(Strict):
    name: Name
    schedule: str | None = None
    description: str = Field("", max_length=10_000)
    # Airflow retries of the restart tasks (launch, wait, measure, stop) and of load: how
    # often, and how long to wait before each. Validation and derivation are never retried:
    # a failed rule is a result, not an error.
    retries: int = Field(1, ge=0, le=MAX_RETRIES)
    retry_delay_s: float = Field(10.0, ge=0, le=MAX_RETRY_DELAY_S)
    # Restarts of arms on different nodes run at the same time (on a deployment with a
    # worker per node); on one node, one restart at a time. false: every restart of the
    # sweep after the other, for nodes that share a network link or a power budget.
    nodes_in_parallel: bool = True
    # A regression gate after derive (issue #28): each headline entry against the sweep's
    # previous run of the same configuration, held to its A/A control; the task fails on a
    # regression, and every verdict is a `regression_checks` row (warehouse/history.py).
    # true: every headline metric; a list: those metrics only.
    regression_gate: bool | Annotated[list[HeadlineMetric], Field(min_length=1)] = False
    # The smallest relative change the gate (and `benchledger history`) flags: 0.03 lets
    # a 2% night-to-night drift pass however sure it is. 0: every change beyond the control.
    regression_min_change: float = Field(0.0, ge=0, lt=1)
    # blocked: restart k of every arm runs in block k, the order inside a block rotating
    # (a Williams design drawn from the seed), so drift during the sweep touches every arm
    # alike; arm_by_arm: every restart of one arm, then the next arm's (comparisons are
    # labelled so: time and arm are confounded). benchledger.sweep.order.
    restart_order: RestartOrder = BLOCKED
    # Sequential verdicts (issue #41): `restarts` is the minimum; after each block from it
    # on, an interim look decides whether every comparison is decided, and the remaining
    # blocks up to this maximum are skipped (docs/protocol.md, "Sequential verdicts").
    max_restarts: Restarts | None = None

    @property
    def gated_metrics(self) -> list[str] | None:
        """The metrics the regression gate checks ([]: every headline metric); None: no
        gate."""
        if self.regression_gate is False:
            return None
        return [] if self.regression_gate is True else list(self.regression_gate)

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


class Defaults(Strict):
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
    # rate_rps (seeded), at most `concurrency` outstanding (like vLLM bench's max-concurrency);
    # constant: the same, evenly spaced. rate_rps = [...]: a rate ladder (issue #27).
    arrival: Arrival = "closed"
    rate_rps: RateRps | None = None
    # instead of rate_rps: restart 0 searches the highest rate sustained (issue #27)
    rate_search: RateSearch | None = None
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
    # cores); benchledger.restart.steps hands ArmPlan.client_workers to the client.
    client_workers: ClientWorkers = "auto"
    # client_lag_within_bound: the client lag p99 (ms) a window may show; None: a tenth of
    # the smallest quantity the window measures (its median TTFT or decode span).
    max_client_lag_ms: Annotated[float, Field(gt=0, le=MAX_WAIT_S * 1000)] | None = None
    # burst_share_bounded: the share of completed requests that may arrive in a burst
    # before the decode-phase per-request entries resting on them are blocked.
    max_burst_fraction: Annotated[float, Field(ge=0, le=1)] = DEFAULT_MAX_BURST_FRACTION
    # arrivals_on_schedule: how late (p99, ms) an open-loop window (Poisson, a trace) may
    # send its requests before it counts as having fallen behind its schedule.
    max_arrival_lag_ms: Annotated[float, Field(gt=0, le=MAX_WAIT_S * 1000)] = \
        DEFAULT_MAX_ARRIVAL_LAG_MS
    # Keep every answer's text (and reasoning text) in the raw rows and request_records,
    # beside the digests and lengths always kept. Off: a user's prompts and answers may be
    # private, and a digest is enough to tell whether two arms answered alike.
    keep_output_text: bool = False


# Metrics a comparison may name (see warehouse/metrics.py for what each one is).
ComparableMetric = Literal["decode_rate", "e2e_rate", "prefill_rate", "ttft", "tpot",
                           "e2e_latency", "throughput", "success_fraction",
                           "completion_fraction", "energy_per_token", "tokens_per_joule",
                           # issue #27: goodput and attainment under the sweep's SLOs, and
                           # the throughput-interactivity frontier at every shared load point
                           "goodput", "slo_attainment", "frontier"]
COMPARABLE_METRICS: tuple[str, ...] = get_args(ComparableMetric)


class Comparison(Strict):
    """An A/B: is b better than a on `metric`, beyond what a same-vs-same control shows?"""

    a: Name
    b: Name
    metric: ComparableMetric
    numerator: Literal["output_tokens", "input_plus_output_tokens",
                       "requests_meeting_all_slos"] | None = None
    # the load point compared (default: the lowest both arms share; a frontier comparison:
    # every point both share)
    concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY)
    rate_rps: float | None = Field(None, gt=0, le=1e6)  # a rung of both arms' rate ladders
    # An arm run twice under two names (A/A): a difference no larger than theirs is noise.
    control: list[Name] | None = Field(None, min_length=2, max_length=2)
    # The smallest relative difference worth finding (0.05: 5% of a's mean). A comparison
    # whose restarts could not have detected it (docs/protocol.md, "Detectable effect") is
    # `underpowered`, not `no finding`. None: every "no finding" says what it could have
    # detected, and none is called underpowered.
    smallest_effect: float | None = Field(None, gt=0, lt=10)
    # Whether the arms' answers must be the same (issue #42, rule outputs_equivalent): None
    # checks them where both arms decode greedily (temperature 0); false for arms meant to
    # answer differently (another model, a quantisation), true to check them regardless.
    equivalence: bool | None = None


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
    rate_rps: float | list[float] | None
    rate_search: RateSearch | None
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
    max_arrival_lag_ms: float
    keep_output_text: bool
    arm: Arm

    @property
    def load_points(self) -> list[LoadPoint]:
        """One window per restart and workload at each: every concurrency, and on a rate
        ladder every rate at each concurrency. A searching arm's points are not known
        before its restart 0 measures them (none here: benchledger.restart.rate_search)."""
        return [] if self.rate_search else load_points(self.concurrency, self.rate_rps)

    @property
    def rate_ladder(self) -> bool:
        return isinstance(self.rate_rps, list)

    @property
    def single_rate_rps(self) -> float | None:
        """The arm's one requested rate (None: none, or a ladder: each point has its own)."""
        return None if isinstance(self.rate_rps, list) else self.rate_rps

    @property
    def protocol_floor(self) -> int:
        return MIN_REQUESTS_SPECULATIVE if self.arm.is_speculative else MIN_REQUESTS_PLAIN

    @property
    def min_requests(self) -> int:
        """The n the gate demands per workload per restart (protocol floor or more)."""
        return max(self.protocol_floor, self.min_requests_key or 0)


class Sweep(Strict):
    sweep: SweepSection
    defaults: Defaults = Field(default_factory=Defaults)
    arms: list[Arm] = Field(min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    comparisons: list[Comparison] = Field(default_factory=list)
    slos: list[Slo] = Field(default_factory=list, max_length=MAX_SLOS)
    slo_target: SloTarget = Field(default_factory=SloTarget)

    @model_validator(mode="after")
    def _slos_name_workloads(self) -> Sweep:
        problem = slos_problem(self.slos, [w.name for w in self.workloads])
        if problem:
            raise ValueError(problem)
        return self

    def slos_of(self, workload: str) -> list[Slo]:
        """The SLOs a workload's requests are held to."""
        return [slo for slo in self.slos if slo.applies_to(workload)]

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
    def _sequential_is_runnable(self) -> Sweep:
        problem = sequential_problem(self.sweep, [(a.name, self.plan(a).restarts)
                                                  for a in self.arms], bool(self.comparisons))
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _sessions_fit(self) -> Sweep:
        """Multi-turn sessions (issue #26): whole sessions in every window, over chat."""
        for i, workload in enumerate(self.workloads):
            if workload.turns is None:
                continue
            if self.defaults.endpoint != "chat":
                raise ValueError(f"workloads[{i}] ({workload.name}): multi-turn sessions "
                                 "send chat messages: they need endpoint = 'chat'")
            for arm in self.arms:
                requests = self.plan(arm).requests
                if requests % workload.turns:
                    raise ValueError(
                        f"workloads[{i}] ({workload.name}): requests = {requests} (arm "
                        f"{arm.name!r}) is not a whole number of sessions of turns = "
                        f"{workload.turns}: make it a multiple of {workload.turns}")
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
        if not arm.starts_processes:
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
    if plan.clock_source in ("http", "dcgm") and "{base_url}" in (plan.clock_url or ""):
        silent = [p.node for p in plan.arm.processes if not plan.arm.process_serves_http(p)]
        if silent:
            return (f"clock_url {plan.clock_url!r} uses {{base_url}}, but the process on "
                    f"node(s) {silent} serves no URL benchledger knows; name each node's "
                    "telemetry by {address} (e.g. \"http://{address}:9400/metrics\")")
    return None


def _never_publishes(plan: ArmPlan) -> str | None:
    """Settings under which a rule fails on everything the arm measures, whatever the
    server does: refused here rather than found out after the run (docs/protocol.md, sweep
    file: refused combinations)."""
    if plan.clock_source == "none" and plan.require_clock_check:
        return (f"clock_source = 'none' with require_clock_check = true can never publish "
                f"(every restart fails {CLOCK_UNDER_LOAD.name}, T10): set clock_source "
                "('nvidia-smi', 'dcgm', or 'http' with a clock_url), or set "
                "require_clock_check = false and accept the label 'unchecked'")
    if plan.clock_source == "nvidia-smi" and plan.arm.spans_nodes and plan.require_clock_check:
        return (f"clock_source = 'nvidia-smi' reads the GPUs of the measuring node only, so the "
                f"other nodes of this deployment ({', '.join(p.node for p in plan.arm.processes)}"
                f") would go unread and every restart would fail {CLOCK_UNDER_LOAD.name} (T10):"
                f" set clock_source = 'dcgm' (NVIDIA's dcgm-exporter on every node; clock_url "
                f"defaults to \"{DEFAULT_DCGM_URL}\") or 'http' with a clock_url every node "
                "serves, or set require_clock_check = false and accept the label 'unchecked'")
    return None


def _arrival_problem(plan: ArmPlan) -> str | None:
    if plan.rate_search is not None:
        if plan.arrival not in OPEN_LOOP_ARRIVALS:
            return (f"rate_search searches open-loop rates, and arrival = '{plan.arrival}' "
                    "sends none: set arrival = 'poisson' or 'constant'")
        if plan.arm.rate_rps is not None or (plan.arm.rate_search is None
                                             and plan.rate_rps is not None):
            return ("rate_search and rate_rps both give the arm's rates: set one (an arm's "
                    "own key overrides [defaults]; set the other there only)")
        if not plan.arm.starts_processes:
            return ("rate_search needs restarts measured one after another on the arm's "
                    "node (restart 0 searches, the others repeat its rates); an external "
                    "server has one restart: give it a rate_rps ladder")
        return None
    if plan.arrival in OPEN_LOOP_ARRIVALS and plan.rate_rps is None:
        return f"arrival = '{plan.arrival}' needs rate_rps (in [defaults] or the arm)"
    if plan.rate_ladder and plan.arrival not in OPEN_LOOP_ARRIVALS:
        return (f"rate_rps = {plan.rate_rps} is a rate ladder, and arrival = "
                f"'{plan.arrival}' sends no rate: set arrival = 'poisson' or 'constant' "
                "(a closed loop's ladder is its concurrency list)")
    return None


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
        lines = [f"{source}: {error_line(as_the_file_says(e))}" for e in exc.errors()]
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
    an arm reads its command from there (benchledger.restart.steps), nothing else needs them."""
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
