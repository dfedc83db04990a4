"""What a rule is, and the words and numbers the protocol fixes (no pandas, no numpy).

A rule's declaration (name, traps, subject, effect, summary, threshold and its source, the
check's kind, suite, expectation and arguments) is what RULESET_VERSION hashes. A GX
check also carries code that is not declaration: the functions that build the columns its
expectation reads, and the function that writes what it expected and found for one subject.
Those live in the suite modules, beside the rule they serve.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

if TYPE_CHECKING:  # only for annotations: importing the catalogue stays cheap
    import numpy as np
    import pandas as pd

AppliesTo = Literal["restart", "window", "request", "entry", "comparison"]

# What a failed rule does.
BLOCK_ENTRIES: Final = "block_entries"  # entries resting on the subject are not publishable
EXCLUDE_RESTART: Final = "exclude_restart"  # the restart feeds no entry; its arm's others still may
REFUSE_COMPARISON: Final = "refuse_comparison"  # the comparison's verdict is 'not decidable'
LIMIT_VERDICT: Final = "limit_verdict"  # no improvement/regression claim: at best 'no finding'
# The entries of per-request timing metrics resting on the subject are not publishable; its
# other entries still are (T17: a late ruler misstamps each request's intervals, while an
# aggregate over the window errs by the lag over the window's length).
BLOCK_TIMING_ENTRIES: Final = "block_timing_entries"
# As block_timing_entries, and the window metrics whose value rests on when stream events
# arrived too (the aggregate decode rate: the span from the first token's stamp to the
# last's); the subject's throughput, counts and fractions still publish (issue #22: answers
# delivered whole in one read, whose tokens' times are not known).
BLOCK_STREAM_ENTRIES: Final = "block_stream_entries"
# The energy entries resting on the subject are not publishable; its other entries still
# are (issue #39: a GPU page that lies says nothing about the tokens the client counted).
BLOCK_ENERGY_ENTRIES: Final = "block_energy_entries"
Effect = Literal["block_entries", "exclude_restart", "refuse_comparison", "limit_verdict",
                 "block_timing_entries", "block_stream_entries", "block_energy_entries"]

# What an entry rests on (docs/protocol.md, warehouse relations; docs/imports.md): measured
# by this pipeline, another tool's file, a recovered report, or a recovered value that was
# itself derived from other runs. Only `rerun` comes from the pipeline's own measurements.
EVIDENCE_KINDS = ("rerun", "imported", "historical", "derived_comparison")

# Where the output tokens of a request may come from (docs/protocol.md, tokens and chunks):
# the server's usage, the entries of its streamed logprobs, or its tokenizer's count of the
# received text (calibrated). `missing` and the import-only sources (client_tokenizer,
# requested, chunks) never count as delivered tokens.
USAGE, LOGPROBS, SERVER_TOKENIZER = "usage", "logprobs", "server_tokenizer"
COUNTED_TOKEN_SOURCES = (USAGE, LOGPROBS, SERVER_TOKENIZER)

# Thresholds the protocol fixes (a sweep may raise the n floor, never lower it).
MIN_REQUESTS_SPECULATIVE = 15  # T4: measured requests per workload per restart
MIN_REQUESTS_PLAIN = 5
# A percentile p (as a fraction q) is the value below which q of the requests fall; it says
# something only when at least one request lies beyond it: n >= 1 / (1 - q). Below that a
# p99 is the largest value seen (or an interpolation towards it), whatever it is called
# (issue #39: a p99 from one request was published like one from twenty).
PERCENTILE_MIN_REQUESTS = {"p50": 2, "p90": 10, "p99": 100}
MIN_RESTARTS_FOR_CLAIM = 2  # T5: restarts per arm before an A/B may claim a difference
# Defaults of thresholds a sweep sets (benchledger.sweep.spec uses these as its defaults).
DEFAULT_RECONCILE_TOLERANCE = 0.01  # T3: counters vs delivered usage, relative
DEFAULT_MIN_CLOCK_RATIO = 0.9  # T10: SM clock under load as a fraction of max
# T17: the share of a cell's completed requests that may arrive in a burst before its
# decode-phase per-request entries are blocked (a sweep sets max_burst_fraction).
DEFAULT_MAX_BURST_FRACTION = 0.1
# T17: without the sweep's max_client_lag_ms, a window's typical client lag (p50) may be
# this share of the smallest quantity it measures (its median TTFT or median decode span):
# a ruler reads to a tenth of what it measures. Not the p99: one pause (another process's
# time slice) moves a p99 of a few hundred samples, on a calm client as much as 16 times
# the bound; a client that cannot keep up moves its p50.
CLIENT_LAG_SHARE = 0.1
# T17: the per-request metrics whose value rests on the span from a request's first to its
# last content event (decode_tok_s, tpot_s, itl_per_token_s of the requests view), which the
# view withholds for a request that arrived in a burst (rate_withheld; a test holds the
# view to this list).
DECODE_SPAN_METRICS = ("decode_rate", "tpot", "itl_per_token")
# T18: the entries of the deployment's GPU energy, and where their joules may come from
# (the view window_energy): the GPUs' energy counters, their power samples integrated over
# the window (GPUs without a counter), or both across an entry's windows.
ENERGY_METRICS = ("energy_per_token", "tokens_per_joule", "gpu_power")
ENERGY_SOURCES = ("energy counter", "integrated power samples",
                  "energy counter + integrated power samples")
# T18, issue #39: what a GPU's readings over a window must be able to be, or the window has
# no energy (the view window_energy spells these numbers; a test holds them equal). No
# powered GPU draws under MIN_GPU_POWER_W, idle or not (data-centre GPUs idle at tens of
# watts): a counter that moves less over a window is frozen. None draws more than
# POWER_HEADROOM times its ceiling on average over a window: its power limit, as its
# telemetry reports it, never above MAX_GPU_POWER_W (more than any GPU's board limit; a
# page cannot raise the bound it is checked against), MAX_GPU_POWER_W where it reports
# none. The headroom covers the readings' stamps (when a page arrived, not when DCGM read
# the counter) and power readings caught above the limit for an instant.
MIN_GPU_POWER_W = 1.0
MAX_GPU_POWER_W = 2000.0
POWER_HEADROOM = 1.25
# T1: a prompt longer than any model's context window is a broken usage report, not a
# prompt (2**24 = 16,777,216 tokens). Below it every plausible count is exact in float64.
MAX_PROMPT_TOKENS = 2**24

# The verdict words of the check columns the suites build: a rule's value_set names the
# passing word, its column builder writes every word. Words, not "<"/">": Data Docs writes
# the unexpected values into its HTML unescaped.
PLAUSIBLE = "plausible"  # usage_plausible: else the first reason the counts cannot be true
AGREE, DISAGREE = "agree", "disagree"  # logprobs_match_usage
WITHIN_TOLERANCE = "within reconcile_tolerance"  # tokenizer_calibrated, and its failures:
ABOVE_TOLERANCE = "above reconcile_tolerance"
NO_CALIBRATION = "no calibration"
NO_TOLERANCE = "no reconcile_tolerance"
# client_lag_within_bound: else the first bound the lag broke
LAG_WITHIN, LAG_TYPICAL_ABOVE = "within bound", "p50 above bound"
# streams_not_buffered: the window's share of requests delivered whole in one read
STREAMED, BUFFERED = "streamed", "delivered in one read"
# arrivals_on_schedule: an open-loop window's requests sent when due, or not
ON_SCHEDULE, BEHIND_SCHEDULE = "on schedule", "behind schedule"
DEFAULT_MAX_ARRIVAL_LAG_MS = 100.0
# counters_readable: every scrape read (or no endpoint); one unreadable, where the server's
# family exports counters (fails), or where no family is known (passes, labelled).
# COUNTER_UNREADABLE is also what the /metrics observer records of such a scrape
# (benchledger.server.observe), and a reconciliation status and counter_check label below.
COUNTERS_READ = "counters read or absent"
COUNTER_UNREADABLE, UNREADABLE_NO_FAMILY = ("counter unreadable",
                                            "counter unreadable, no known family")
# T3 (docs/protocol.md): how a server's counter checked one window's client count
# (reconciliations.status, warehouse.reconcile): it matched within reconcile_tolerance, or
# not; only as a lower bound (failed or unresolved requests make the client's count one);
# there was no counter (no /metrics endpoint, none of that name), or COUNTER_UNREADABLE.
MATCH, MISMATCH, LOWER_BOUND, NO_COUNTER = "match", "mismatch", "lower bound", "no counter"
# An entry's counter_check (warehouse.derive) over its windows' statuses, the first that
# holds: MISMATCH (a counter disagreed: its rule blocks the entry); COUNTER_UNREADABLE (a
# window's counters may exist, unread: rule counters_readable blocks it where its family has
# them); NO_COUNTER (no counter checked any window); PARTIAL (some counters or windows had
# none to check against); LOWER_BOUND (all checked, some only as a lower bound); else
# RECONCILED (every counter of every window matched the client's count).
RECONCILED, PARTIAL = "reconciled", "partial"
# energy_readable: the window's energy was read whole and every reading can be true
ENERGY_READ, ENERGY_UNREADABLE = "energy read", "energy unreadable"
STATED = "stated"  # rate_denominator_stated
BALANCED, UNBALANCED = "balanced", "unbalanced"  # request_counts_balance
SERVER_LOG_APART = "server_log_* metric with a server_log_* statistic"  # server_log_kept_apart
# The population label of a value computed from the completed requests alone (written by
# warehouse.derive and warehouse.evidence_entries), which the population rules demand.
COMPLETED_ONLY = "completed_only"
# Goodput's population (issue #27): the requests that met every SLO, judged over all
# submitted (a failed or unfinished request meets none).
SLO_MET = "slo_met"

# What the code of a GX check works on: a suite's prepared frame (a RangeIndex, so row
# labels are positions), row positions in it, and the expectation's arguments.
Frame: TypeAlias = "pd.DataFrame"
Rows: TypeAlias = "np.ndarray"  # row positions (intp, ascending)
Kw: TypeAlias = Mapping[str, Any]  # an expectation's arguments (GxCheck.kwargs)
# A column builder: one value per row of the prepared frame (a Series on its index, or an
# array as long as it). It reads input columns and the suite's own columns, never another
# rule's, and loops over no rows in Python: a run has 10^6 requests.
Builder: TypeAlias = Callable[[Frame], Any]
# A found writer: (expected, found) for one subject, from its rows and the rows of them
# GX found unexpected. It runs once per subject (a restart, a window, an entry, an A/B).
Observer: TypeAlias = Callable[[Kw, Frame, Rows, Rows], tuple[str, str]]


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class SuiteFrame:
    """The frame one GX suite validates: what a caller hands over and how it is prepared.

    Preparing it (benchledger.expectations.gate) takes a fresh RangeIndex, copies the
    subject column to `subject`, fills the optional and numeric columns a frame lacks with
    NULL (raw rows from before they were recorded: the rules that read them find nothing
    to check), turns the numeric ones into numbers (NULL where not one), then builds
    `columns` and, after them, the columns of the suite's rules.
    """

    suite: str
    frame: str  # the caller's name for the frame (run_gate's argument)
    subject: str  # the column naming each row's subject
    required: tuple[str, ...]  # a frame without one is a caller bug, refused
    optional: tuple[str, ...] = ()
    numeric: tuple[str, ...] = ()
    columns: Mapping[str, Builder] = field(default_factory=_empty)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every column of the caller's frame the suite reads."""
        return (*self.required, *self.optional, *self.numeric)


@dataclass(frozen=True)
class GxCheck:
    """A GX expectation (gx.expectations.<expectation>) over one suite's prepared frame,
    with the columns it reads that the suite does not have (built by `columns`) and the
    writer of its expected and found texts (`observe`)."""

    suite: str  # restarts | windows | measured_requests | entries | comparisons
    expectation: str
    kwargs: Kw = field(default_factory=_empty)
    columns: Mapping[str, Builder] = field(default_factory=_empty)
    observe: Observer = field(kw_only=True)

    @property
    def reads(self) -> tuple[str, ...]:
        """The prepared frame's columns the expectation reads."""
        return tuple(str(self.kwargs[k]) for k in ("column", "column_A", "column_B")
                     if k in self.kwargs)

    def describe(self) -> str:
        return f"GX {self.expectation} on {' vs '.join(self.reads)} (suite {self.suite})"


@dataclass(frozen=True)
class QueryCheck:
    """A query (warehouse/queries/<query>.sql) returning every subject with its verdict."""

    suite: str
    query: str

    def describe(self) -> str:
        return f"query warehouse/queries/{self.query}.sql (suite {self.suite})"


@dataclass(frozen=True)
class Rule:
    name: str
    traps: tuple[str, ...]  # T-numbers; () for a consistency check the definitions imply
    applies_to: AppliesTo
    effect: Effect
    summary: str  # what must hold, in one sentence
    check: GxCheck | QueryCheck
    threshold: str | None = None
    threshold_source: str | None = None

    @property
    def suite(self) -> str:
        return self.check.suite


def gx(suite: SuiteFrame, expectation: str, *, observe: Observer,
       columns: Mapping[str, Builder] | None = None, **kwargs: Any) -> GxCheck:
    """A GX check of `suite`: the expectation's arguments as keywords, the columns it reads
    that the suite lacks with their builders, and its found writer."""
    return GxCheck(suite.suite, expectation, MappingProxyType(kwargs),
                   MappingProxyType(columns or {}), observe=observe)
