"""Every setting of the simulator, declared once (SimConfig below).

Each field of SimConfig carries its type and default, and a `Setting` with the rest: help
text, allowed range, how its flag is spelled, and whether a sweep may set it under
``[arms.simulator]``. Everything else is produced from that one declaration:

* the command line of ``benchledger simulator`` / ``python -m benchledger.simulator``
  (`add_arguments`, `config_from_args`; server.py adds only --host and --port);
* the sweep's ``[arms.simulator]`` table: benchledger.sweep.spec builds its pydantic model from
  `SWEEP_OPTIONS` (the keys, types, defaults and ranges);
* the launch command of an arm (`launch_flags`, used by benchledger.server.launchers).

So adding a setting is adding one field here. This module imports nothing from benchledger
(the simulator is the bottom layer) and no third-party package.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# When the launch command passes a setting's flag (see launch_flags):
ALWAYS = "always"  # every time
CHANGED = "changed"  # only when the sweep's value differs from the default
# ... or the name of an earlier setting: whenever that one's flag is passed.

# The servers whose /metrics names the simulator can export (see metrics.py).
MetricsFamily = Literal["vllm", "sglang", "llamacpp", "tgi"]

# Where a reasoning model's thinking goes in a streamed chat delta (and a chat answer's
# message): "reasoning_content" (older vLLM, SGLang, DeepSeek's API) or "reasoning" (newer
# vLLM).
ReasoningField = Literal["reasoning_content", "reasoning"]

# Flag groups of --help: key -> (title, description).
GROUPS = {
    "clocks": (
        "pretend GPU clocks",
        "GET /clocks answers like nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,"
        "pstate,clocks_throttle_reasons.active,utilization.gpu: load clocks (P0, 100% "
        "utilization) while any request is in the engine, idle clocks (P8, 0%) otherwise; "
        "throttle reasons are always none; GET /dcgm prints the same GPUs as NVIDIA's "
        "dcgm-exporter does, with power and an energy counter that follow the load"),
}


@dataclass(frozen=True)
class Setting:
    """What one SimConfig field needs besides its type and default."""

    help: str
    # Allowed range (numbers); SimConfig checks it and the sweep's model enforces it.
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    # A key of the sweep's [arms.simulator] table, under the field's own name.
    sweep: bool = False
    # Booleans only: the sweep sets this per restart, as a list of restart indexes under
    # this key (instead of a key of the field's name); the listed restarts get it on.
    restarts_key: str | None = None
    # When an arm's launch command passes the flag: ALWAYS, CHANGED or an earlier setting's
    # name. New settings should use CHANGED: then adding one leaves existing arms' commands,
    # and so their effective-config hashes, as they were.
    passed: str = CHANGED
    # Booleans: the spellings that exist. Default "--name/--no-name"; "--no-name" alone sets
    # it off (default on), "--name" alone sets it on (default off).
    flag: str | None = None
    group: str | None = None  # a key of GROUPS
    metavar: str | None = None

    @property
    def bounds(self) -> dict[str, float]:
        """The range as keyword arguments (ge/gt/le), e.g. for pydantic's Field."""
        return {k: v for k in ("ge", "gt", "le") if (v := getattr(self, k)) is not None}


def setting(default: Any, help: str, **kwargs: Any) -> Any:
    """A SimConfig field: its default and its Setting."""
    return field(default=default, metadata={"setting": Setting(help=help, **kwargs)})


# Declaration order is the order of the flags in --help and in launch commands (append new
# settings at the end of their group).
@dataclass(frozen=True)
class SimConfig:
    """Effective configuration of one simulated server instance."""

    model: str = setting("sim-model", "the model name served; requests naming another fail")
    seed: int = setting(0, "draws the per-process speed factor (one seed = one 'instance')")
    speculative: bool = setting(
        False, "speculative decoding, off by default: each step delivers 1 + the accepted "
               "draft tokens",
        sweep=True, passed=ALWAYS)
    num_speculative_tokens: int = setting(
        3, "draft tokens proposed per step when speculative", ge=1, sweep=True, passed=ALWAYS)
    step_ms: float = setting(
        4.0, "decode step time with one running request, in milliseconds", gt=0, sweep=True,
        passed=ALWAYS)
    spec_step_overhead: float = setting(
        1.15, "decode step time multiplier when speculative (the drafting cost)", gt=0)
    prefill_tok_s: float = setting(
        20000.0, "prefill speed in prompt tokens per second", gt=0, sweep=True, passed=ALWAYS)
    batch_penalty: float = setting(
        0.08, "extra decode step time per additional running request, as a fraction", ge=0,
        sweep=True, passed=ALWAYS)
    max_num_seqs: int = setting(
        64, "requests running at once; more wait (vLLM's --max-num-seqs)", ge=1)
    speed_spread: float = setting(
        0.03, "standard deviation of the per-process speed factor drawn from the seed", ge=0,
        sweep=True, passed=ALWAYS)
    acceptance_code: float = setting(
        0.8, "draft acceptance probability per position on code prompts", ge=0, le=1,
        sweep=True, passed=ALWAYS)
    acceptance_prose: float = setting(
        0.45, "draft acceptance probability per position on prose prompts", ge=0, le=1,
        sweep=True, passed=ALWAYS)
    startup_delay_s: float = setting(
        0.0, "seconds after start during which /health, /v1/models and requests answer 503 "
             "(loading)",
        ge=0, sweep=True, passed=ALWAYS)
    usage: bool = setting(
        True, "never report usage (models a server without usage reporting)", sweep=True,
        flag="--no-usage")
    stream_usage: bool = setting(
        True, "ignore stream_options.include_usage: streams never carry usage, while "
              "non-streamed answers still do (models llama-cpp-python's server; --no-usage "
              "turns both off)", sweep=True, flag="--no-stream-usage")
    max_model_len: int = setting(
        65536, "context length: prompt plus max_tokens must fit (room for a 32K-token "
               "prompt plus a long answer)", ge=2)
    eos_rate: float = setting(
        0.0, "fraction of prompts whose answer ends early (finish_reason 'stop')", ge=0, le=1)
    prefix_cache: bool = setting(
        True, "automatic prefix caching, on by default like vLLM v1: cached full prompt "
              "blocks are not prefilled again (--no-prefix-cache: off; cold prompts defeat "
              "it)", sweep=True)
    prefix_block_tokens: int = setting(
        16, "tokens per prefix-cache block (vLLM's --block-size)", ge=1)
    prefix_cache_max_blocks: int = setting(
        262144, "LRU cap on cached blocks (4M tokens at 16 per block)", ge=1)
    stall_every: int = setting(
        0, "models a hung request (for drain tests): every Nth request admitted since start "
           "(N, 2N, ...) stops after its first chunk and emits nothing for --stall-s seconds "
           "while staying running, then goes on; a client disconnect aborts it. 0: off",
        ge=0, sweep=True, metavar="N")
    stall_s: float = setting(
        600.0, "how long a stalled request hangs", gt=0, sweep=True, passed="stall_every")
    log_interval_s: float = setting(
        1.0, "seconds between vLLM-style throughput log lines; fractions work (e.g. 0.25)",
        gt=0, sweep=True, passed=ALWAYS)
    num_gpus: int = setting(1, "GPUs listed by /clocks", ge=1, sweep=True, group="clocks",
                            metavar="N")
    sm_clock_mhz: int = setting(2400, "SM clock under load", gt=0, group="clocks")
    max_sm_clock_mhz: int = setting(2520, "max SM clock", gt=0, group="clocks")
    idle_sm_clock_mhz: int = setting(210, "SM clock when idle", gt=0, group="clocks")
    low_clock: bool = setting(
        False, "models a node stuck at a low clock with no throttle reason reported: under "
               "load the stuck GPU (--low-clock-gpu, default 0) stays at --low-clock-mhz and "
               "every step (decode and prefill) takes sm-clock / low-clock times longer (about "
               "4.9x with the defaults)",
        restarts_key="low_clock_restarts", flag="--low-clock", group="clocks")
    low_clock_mhz: int = setting(
        494, "the stuck GPU's clock under load with --low-clock", gt=0, group="clocks")
    low_clock_gpu: int = setting(
        0, "which GPU is stuck with --low-clock (its index)", ge=0, sweep=True,
        group="clocks", metavar="INDEX")
    idle_power_w: float = setting(
        60.0, "power each pretend GPU draws when idle (GET /dcgm)", gt=0, group="clocks")
    load_power_w: float = setting(
        450.0, "power each pretend GPU draws under load at --sm-clock-mhz, scaled by its "
               "clock (GET /dcgm)", gt=0, group="clocks")
    metrics_generation_scale: float = setting(
        1.0, "models a server whose counters disagree with what it delivered: /metrics "
             "reports its generation counter (vllm:generation_tokens_total, or that of the "
             "metrics family) as the true count times F, rounded (1.10 over-counts by 10%, "
             "0.9 under-counts); usage and log lines stay true",
        gt=0, sweep=True, metavar="F")
    metrics_family: MetricsFamily = setting(
        "vllm", "whose names /metrics exports, with that server's meaning: vllm, sglang, "
                "llamacpp (llama.cpp's server: its prompt counter leaves out prefix-cache "
                "hits, and it counts no finished requests) or tgi (token counts as "
                "histogram sums)", sweep=True)
    health: bool = setting(
        True, "answer 404 at /health (models a server without a health endpoint, like "
              "llama-cpp-python's: readiness must then come from /v1/models)", sweep=True,
        flag="--no-health")
    reasoning_tokens: int = setting(
        0, "models a reasoning model: the first N generated tokens of each chat request "
           "(at most max_tokens) are streamed as reasoning (in delta.<reasoning-field>, no "
           "content), the rest as content; usage's completion_tokens counts both and "
           "completion_tokens_details.reasoning_tokens the reasoning, and the generation "
           "counter counts both, like vLLM. /v1/completions has no reasoning. 0: off",
        ge=0, sweep=True, metavar="N")
    reasoning_field: ReasoningField = setting(
        "reasoning_content", "where reasoning text goes with --reasoning-tokens: "
                             "reasoning_content (older vLLM, SGLang, DeepSeek) or reasoning "
                             "(newer vLLM)", sweep=True)
    log_requests: bool = setting(
        False, "log a line per request naming its id, as vLLM's --enable-log-requests "
               "does: 'Received request chatcmpl-<id>', where <id> is the request's "
               "X-Request-Id header (a random id without one), the id its answer carries "
               "too; the prompt's text is never logged", sweep=True,
        flag="--enable-log-requests")
    lossy_share: float = setting(
        0.0, "a speculative decoder that is not lossless: at temperature 0, the share of "
             "prompts (chosen by the prompt's text alone, so every restart and every arm "
             "with the same share changes the same ones) whose answer departs, under "
             "speculation, from the one the model gives without it, from a token position "
             "also drawn from the prompt (1 to 32); the speed and the token counts stay "
             "the same. 0: lossless",
        ge=0, le=1, sweep=True)
    uuid_request_ids: bool = setting(
        False, "refuse a request whose X-Request-Id is not a UUID with HTTP 400 and an "
               "empty body, as llama-cpp-python's server does (its starlette-context "
               "request-id plugin)")
    interrupt_requests: bool = setting(
        False, "serve one streamed request at a time by cutting the stream in progress "
               "when another request arrives: it ends with [DONE] and no finish_reason, as "
               "llama-cpp-python's server does by default (its --interrupt_requests)")

    def __post_init__(self) -> None:
        # Checks between settings; each field's own range comes from its Setting.
        related = {
            "sm_clock_mhz": self.sm_clock_mhz <= self.max_sm_clock_mhz,
            "idle_sm_clock_mhz": self.idle_sm_clock_mhz <= self.max_sm_clock_mhz,
            "low_clock_mhz": not self.low_clock or self.low_clock_mhz <= self.sm_clock_mhz,
            # with no GPU at all, the fault is num_gpus's alone
            "low_clock_gpu": self.num_gpus < 1 or self.low_clock_gpu < self.num_gpus,
            "load_power_w": self.idle_power_w <= self.load_power_w,
        }
        bad = [option.name for option in OPTIONS
               if not (option.in_range(getattr(self, option.name))
                       and related.get(option.name, True))]
        if bad:
            raise ValueError(f"invalid simulator config value(s): {', '.join(bad)}")

    @property
    def load_clock_mhz(self) -> int:
        """SM clock of the stuck GPU (low_clock_gpu) under load: the low clock in low-clock
        mode, else sm_clock_mhz like every GPU."""
        return self.low_clock_mhz if self.low_clock else self.sm_clock_mhz

    @property
    def clock_slowdown(self) -> float:
        """Step-time multiplier from the clock: sm_clock / low_clock in low-clock mode (the
        engine runs at the pace of its slowest GPU), else 1."""
        return self.sm_clock_mhz / self.load_clock_mhz


@dataclass(frozen=True)
class Option:
    """One SimConfig field with its type, default and Setting, as the consumers need it."""

    name: str
    type: type
    default: Any
    setting: Setting

    @property
    def sweep_key(self) -> str | None:
        """Its key under [arms.simulator], or None when a sweep cannot set it."""
        if self.setting.restarts_key:
            return self.setting.restarts_key
        return self.name if self.setting.sweep else None

    @property
    def per_restart(self) -> bool:
        return self.setting.restarts_key is not None

    @property
    def flags(self) -> tuple[str, ...]:
        """Its command-line spellings: (on, off) for a toggle, one flag otherwise."""
        plain = "--" + self.name.replace("_", "-")
        if self.type is not bool:
            return (plain,)
        if self.setting.flag:
            return (self.setting.flag,)
        return (plain, "--no-" + plain.removeprefix("--"))

    @property
    def choices(self) -> tuple[Any, ...] | None:
        """The values a Literal-typed setting allows (None: any value of its type)."""
        return typing.get_args(self.type) if typing.get_origin(self.type) is Literal else None

    def in_range(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        s = self.setting
        return ((s.ge is None or value >= s.ge) and (s.gt is None or value > s.gt)
                and (s.le is None or value <= s.le))

    def spell(self, value: Any) -> list[str]:
        """The argv that sets this option to `value` (empty when a boolean's default is
        the only way to say it)."""
        if self.type is not bool:
            return [self.flags[0], str(value)]
        if len(self.flags) == 2:
            return [self.flags[0] if value else self.flags[1]]
        turns_on = not self.default  # a lone flag flips the default
        return [self.flags[0]] if bool(value) == turns_on else []


def _options() -> tuple[Option, ...]:
    hints = typing.get_type_hints(SimConfig)
    return tuple(Option(f.name, hints[f.name], f.default, f.metadata["setting"])
                 for f in dataclasses.fields(SimConfig))


OPTIONS = _options()
# What a sweep may set under [arms.simulator], in declaration order.
SWEEP_OPTIONS = tuple(option for option in OPTIONS if option.sweep_key)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per SimConfig field, with its default and help (defaults shown)."""
    groups = {key: parser.add_argument_group(title, description)
              for key, (title, description) in GROUPS.items()}
    for option in OPTIONS:
        s = option.setting
        target = groups[s.group] if s.group else parser
        help_text = s.help.replace("%", "%%")
        if option.type is bool:
            # BooleanOptionalAction makes the --no-X spelling itself.
            action: Any = (argparse.BooleanOptionalAction if len(option.flags) == 2
                           else "store_false" if option.default else "store_true")
            target.add_argument(option.flags[0], dest=option.name, action=action,
                                default=option.default, help=help_text)
        else:
            target.add_argument(option.flags[0], dest=option.name,
                                type=str if option.choices else option.type,
                                choices=option.choices, default=option.default,
                                metavar=s.metavar, help=help_text + " (default %(default)s)")


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The SimConfig of parsed flags (other attributes, like --port, are ignored)."""
    values = vars(args)
    return SimConfig(**{option.name: values[option.name] for option in OPTIONS
                        if option.name in values})


def launch_flags(values: Mapping[str, Any], restart_index: int = 0) -> list[str]:
    """The flags that start a simulator with these [arms.simulator] values (keyed by
    sweep key) at restart `restart_index`: each option as its Setting.passed says."""
    argv: list[str] = []
    passed: set[str] = set()
    for option in SWEEP_OPTIONS:
        assert option.sweep_key is not None  # SWEEP_OPTIONS have one
        raw = values[option.sweep_key]
        value = restart_index in raw if option.per_restart else raw
        rule = option.setting.passed
        if rule == ALWAYS:
            wanted = True
        elif rule == CHANGED:
            wanted = value != option.default
        else:
            wanted = rule in passed
        flags = option.spell(value) if wanted else []
        if flags:
            passed.add(option.name)
            argv += flags
    return argv
