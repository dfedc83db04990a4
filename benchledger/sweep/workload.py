"""The keys of a `[[workloads]]` table that say where its requests come from.

    [[workloads]]
    name = "chat"
    dataset = "data/chat.jsonl"                      # or a ShareGPT .json, or a folder
    output_length = {distribution = "lognormal", median = 200, sigma = 0.6, max = 2048}

    [[workloads]]
    name = "long-synthetic"
    input_length = {distribution = "uniform", min = 4096, max = 8192}
    shared_prefix = {groups = 8, tokens = 2048}

    [[workloads]]
    name = "mooncake"
    trace = "traces/conversation.jsonl"
    time_scale = 0.5                                 # replay twice as fast

A workload's requests come from at most one source: a dataset, a trace, or synthetic text
(`input_length` without a dataset); none of them: the built-in prompt set. The sweep's
Workload model holds these keys beside its own (name, prompt_set, ...); the checks between
them are here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from benchledger.sweep.values import BUILTIN_PROMPT_SETS, MAX_TOKENS, Name, Strict, Text

Length = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
DEFAULT_MAX_REPLAY_S = 3600.0  # an hour: the Mooncake traces' own span at time_scale 1
MAX_REPLAY_S = 7 * 86400.0  # a week: what a sweep may raise it to
Kind = Literal["builtin", "dataset", "synthetic", "trace"]


class _Bounded(Strict):
    min: Length | None = None
    max: Length | None = None

    @model_validator(mode="after")
    def _ordered(self) -> _Bounded:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


class Fixed(Strict):
    """Every request the same length."""

    distribution: Literal["fixed"]
    value: Length


class Uniform(Strict):
    """Whole numbers from min to max, each as likely."""

    distribution: Literal["uniform"]
    min: Length
    max: Length

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


class Normal(_Bounded):
    """A normal distribution, rounded, clipped to [min, max] (default [1, 1000000])."""

    distribution: Literal["normal"]
    mean: Annotated[float, Field(gt=0, le=MAX_TOKENS)]
    stddev: Annotated[float, Field(ge=0, le=MAX_TOKENS)]


class Lognormal(_Bounded):
    """A log-normal distribution given by its median and the sigma of its logarithm
    (output lengths of real chats look like this), rounded, clipped to [min, max]."""

    distribution: Literal["lognormal"]
    median: Annotated[float, Field(gt=0, le=MAX_TOKENS)]
    sigma: Annotated[float, Field(ge=0, le=10)]


class Empirical(Strict):
    """The lengths of a dataset's rows, drawn with replacement (lengths.py says which
    field of a row gives its input and its output length)."""

    distribution: Literal["empirical"]
    dataset: Text


Distribution = Annotated[Fixed | Uniform | Normal | Lognormal | Empirical,
                         Field(discriminator="distribution")]


class SharedPrefix(Strict):
    """Each request starts with one of `groups` prefixes of about `tokens` tokens (the
    group drawn uniformly): the prefix cache's share of a workload, on purpose."""

    groups: Annotated[int, Field(ge=1, le=100_000)]
    tokens: Length


class WorkloadSource(Strict):
    dataset: Text | None = None  # a file or folder, relative to the sweep file's folder
    dataset_format: Literal["auto", "jsonl", "sharegpt"] = "auto"
    sampling: Literal["ordered", "seeded"] = "ordered"
    input_length: Distribution | None = None
    output_length: Distribution | None = None
    shared_prefix: SharedPrefix | None = None
    turns: Annotated[int, Field(ge=2, le=1000)] | None = None
    think_time_s: Annotated[float, Field(ge=0, le=3600)] = 0.0
    history: Literal["server", "dataset"] = "server"
    trace: Text | None = None  # a Mooncake JSONL trace
    time_scale: Annotated[float, Field(gt=0, le=1000)] = 1.0
    # The longest a trace's replay may take (its last request due this many seconds after
    # the first, time_scale applied): a trace whose timestamps jump to 10^15 ms is valid
    # JSON in arrival order, and its window would wait for ever before its drain deadline
    # even begins (issue #39). Refused when the run is planned.
    max_replay_s: Annotated[float, Field(gt=0, le=MAX_REPLAY_S)] = DEFAULT_MAX_REPLAY_S

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadSource:
        if self.dataset is not None and self.trace is not None:
            raise ValueError("`dataset` and `trace` are two sources of requests: give one")
        if self.dataset is not None and self.input_length is not None:
            raise ValueError("`input_length` cannot go with `dataset`: a dataset's rows are "
                             "its prompts (`output_length` may set their max_tokens)")
        if self.trace is not None:
            given = [key for key in ("input_length", "output_length", "turns", "shared_prefix")
                     if getattr(self, key) is not None]
            if given:
                raise ValueError("`trace` has its own input and output lengths and hash_ids: "
                                 f"it cannot go with {', '.join(f'`{k}`' for k in given)}")
        elif self.time_scale != 1.0:
            raise ValueError("`time_scale` applies to a `trace`")
        elif self.max_replay_s != DEFAULT_MAX_REPLAY_S:
            raise ValueError("`max_replay_s` applies to a `trace`")
        if self.dataset is None:
            if self.dataset_format != "auto":
                raise ValueError("`dataset_format` applies to a `dataset`")
            if self.sampling != "ordered":
                raise ValueError("`sampling` applies to a `dataset`")
            if self.history == "dataset":
                raise ValueError('`history = "dataset"` replays a dataset\'s answers: it '
                                 "needs a `dataset`")
        if self.turns is None and (self.think_time_s != 0 or self.history != "server"):
            raise ValueError("`think_time_s` and `history` apply to multi-turn workloads: "
                             "set `turns`")
        return self

    @property
    def kind(self) -> Kind:
        if self.dataset is not None:
            return "dataset"
        if self.trace is not None:
            return "trace"
        return "synthetic" if self.input_length is not None else "builtin"

    @property
    def multi_turn(self) -> bool:
        return self.turns is not None


class Workload(WorkloadSource):
    """One workload: a built-in prompt set, or (issue #26) a dataset, synthetic lengths or
    a trace, optionally with shared prefixes or multi-turn sessions (WorkloadSource holds
    those keys and the checks between them; benchledger.workloads prepares the requests)."""

    name: Name
    prompt_set: Literal["code", "prose"] | None = None  # defaults to the workload name
    prompt_cache: Literal["warm", "cold"] | None = None  # defaults to [defaults]
    # Long inputs: filler text in front of each built-in prompt, about this many tokens
    # (the server's usage says how many it really were).
    input_tokens: Length | None = None
    # the output target; overrides the arm's
    max_tokens: Length | None = None

    @model_validator(mode="after")
    def _prompt_set_known(self) -> Workload:
        if self.kind != "builtin":
            given = [key for key in ("prompt_set", "input_tokens")
                     if getattr(self, key) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} belong(s) to the built-in prompt sets; "
                                 f"this workload's requests come from its {self.kind}")
            if self.prompt_cache == "cold" and (self.shared_prefix or self.turns):
                raise ValueError("prompt_cache = 'cold' gives every request a unique first "
                                 "block; shared_prefix and sessions share prefixes on "
                                 "purpose: leave prompt_cache unset")
            return self
        if self.shared_prefix is not None or self.turns is not None:
            raise ValueError("shared_prefix and turns shape a dataset's or synthetic "
                             "workload's requests: add a `dataset` or an `input_length`")
        if self.prompt_set is None and self.name not in BUILTIN_PROMPT_SETS:
            raise ValueError(
                f"workload {self.name!r} is not a built-in prompt set; set prompt_set to "
                f"one of {list(BUILTIN_PROMPT_SETS)}, or give its requests a source "
                "(dataset, input_length or trace)"
            )
        return self

    @property
    def prompts(self) -> str:
        return self.prompt_set or self.name
