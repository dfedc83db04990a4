"""The rule catalogue: every protocol rule, declared once, with its check beside it.

A rule says what must hold before a number may be published. Each one carries its name
(what `validations.expectation` and `entry_blocks.rule` say), the traps it answers
(T-numbers of docs/protocol.md), what it applies to, its effect when it fails, its
threshold and where that threshold comes from, and its check:

- `GxCheck`: a Great Expectations 1.x expectation (class name and arguments) that
  benchledger.expectations.gate runs over one suite's prepared frame, with the functions
  that build the columns it reads and the one that writes what it expected and found;
- `QueryCheck`: a query in warehouse/queries/ that returns one row per subject with
  `success`, `expected` and `found` (the rows breaking the rule are those with success false).

One module per suite declares its frame (`SuiteFrame`: the columns a caller hands over, the
subject, what is filled in or built for every rule) and its rules: restarts, windows,
requests (measured requests), entries, comparisons. `core` holds the types, effects,
thresholds and verdict words; `frame` the helpers the builders and found writers share.
Code elsewhere refers to rules through the constants re-exported here (never by retyping a
name), so a rule's name appears once in the source. Importing the catalogue imports no
pandas, numpy, GX or DuckDB: the checks' code imports them when it runs.

`python -m benchledger.rules --markdown` prints the rule table of docs/protocol.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from benchledger.rules import comparisons, entries, requests, restarts, windows
from benchledger.rules.comparisons import (
    AB_ARMS_DIFFER,
    AB_BEYOND_CONTROL,
    AB_BEYOND_DRIFT,
    AB_RESTARTS_REPLICATED,
    OUTPUTS_EQUIVALENT,
)
from benchledger.rules.core import (
    BLOCK_ENERGY_ENTRIES,
    BLOCK_ENTRIES,
    BLOCK_STREAM_ENTRIES,
    BLOCK_TIMING_ENTRIES,
    CLIENT_LAG_SHARE,
    COUNTED_TOKEN_SOURCES,
    DECODE_SPAN_METRICS,
    DEFAULT_MAX_ARRIVAL_LAG_MS,
    DEFAULT_MAX_BURST_FRACTION,
    DEFAULT_MIN_CLOCK_RATIO,
    DEFAULT_RECONCILE_TOLERANCE,
    ENERGY_METRICS,
    ENERGY_SOURCES,
    EVIDENCE_KINDS,
    EXCLUDE_RESTART,
    LIMIT_VERDICT,
    MAX_GPU_POWER_W,
    MAX_PROMPT_TOKENS,
    MIN_GPU_POWER_W,
    MIN_REQUESTS_PLAIN,
    MIN_REQUESTS_SPECULATIVE,
    MIN_RESTARTS_FOR_CLAIM,
    PERCENTILE_MIN_REQUESTS,
    POWER_HEADROOM,
    REFUSE_COMPARISON,
    AppliesTo,
    Effect,
    GxCheck,
    QueryCheck,
    Rule,
    SuiteFrame,
)
from benchledger.rules.entries import (
    BURST_SHARE_BOUNDED,
    ENERGY_SOURCE_LABELLED,
    ENTRY_HAS_VALIDATED_VALUE,
    ENTRY_TOKEN_SOURCE_SINGLE,
    EVIDENCE_LABELLED,
    INCOMPLETE_RATE_LABELLED,
    LATENCY_POPULATION_LABELLED,
    PERCENTILE_N_SUFFICIENT,
    PREFILL_RATE_COLD_PROMPTS,
    RATE_DENOMINATOR_STATED,
    RATE_NUMERATOR_LABELLED,
    REQUEST_COUNTS_BALANCE,
    SERVER_LOG_KEPT_APART,
)
from benchledger.rules.requests import (
    LOGPROBS_MATCH_USAGE,
    TEMPERATURE_IS_ZERO,
    TOKEN_SOURCE_IS_USAGE,
    TTFT_NOT_ABOVE_E2E,
    USAGE_PLAUSIBLE,
)
from benchledger.rules.restarts import CLOCK_UNDER_LOAD, RESTART_HEALTHY
from benchledger.rules.windows import (
    ACCOUNTING_BALANCES,
    ARRIVALS_ON_SCHEDULE,
    CLIENT_LAG_WITHIN_BOUND,
    COUNTERS_READABLE,
    ENERGY_READABLE,
    FINISHED_REQUESTS_RECONCILE,
    GENERATION_TOKENS_RECONCILE,
    N_AT_LEAST_MIN,
    PROMPT_TOKENS_RECONCILE,
    STREAMS_NOT_BUFFERED,
    TOKENIZER_CALIBRATED,
    WINDOWS_PRESENT,
)

__all__ = [
    "ACCOUNTING_BALANCES", "ARRIVALS_ON_SCHEDULE", "AB_ARMS_DIFFER", "AB_BEYOND_CONTROL",
    "AB_BEYOND_DRIFT", "AB_RESTARTS_REPLICATED",
    "BLOCK_ENERGY_ENTRIES", "BLOCK_ENTRIES", "BLOCK_STREAM_ENTRIES", "BLOCK_TIMING_ENTRIES",
    "BURST_SHARE_BOUNDED",
    "BY_NAME", "CATALOGUE",
    "CLIENT_LAG_SHARE", "CLIENT_LAG_WITHIN_BOUND", "CLOCK_UNDER_LOAD", "COUNTED_TOKEN_SOURCES",
    "COUNTERS_READABLE",
    "DECODE_SPAN_METRICS", "DEFAULT_MAX_ARRIVAL_LAG_MS", "DEFAULT_MAX_BURST_FRACTION",
    "DEFAULT_MIN_CLOCK_RATIO",
    "DEFAULT_RECONCILE_TOLERANCE", "ENERGY_METRICS", "ENERGY_READABLE",
    "ENERGY_SOURCE_LABELLED",
    "ENERGY_SOURCES", "ENTRY_HAS_VALIDATED_VALUE",
    "ENTRY_TOKEN_SOURCE_SINGLE", "EVIDENCE_KINDS", "EVIDENCE_LABELLED", "EXCLUDE_RESTART",
    "FINISHED_REQUESTS_RECONCILE", "GENERATION_TOKENS_RECONCILE", "INCOMPLETE_RATE_LABELLED",
    "LATENCY_POPULATION_LABELLED", "LIMIT_VERDICT", "LOGPROBS_MATCH_USAGE",
    "MAX_GPU_POWER_W", "MAX_PROMPT_TOKENS", "MIN_GPU_POWER_W", "MIN_REQUESTS_PLAIN",
    "MIN_REQUESTS_SPECULATIVE",
    "MIN_RESTARTS_FOR_CLAIM", "N_AT_LEAST_MIN", "OUTPUTS_EQUIVALENT", "PERCENTILE_MIN_REQUESTS",
    "PERCENTILE_N_SUFFICIENT", "POWER_HEADROOM", "PREFILL_RATE_COLD_PROMPTS",
    "PROMPT_TOKENS_RECONCILE", "RATE_DENOMINATOR_STATED", "RATE_NUMERATOR_LABELLED",
    "REFUSE_COMPARISON", "REQUEST_COUNTS_BALANCE", "RESTART_HEALTHY", "RULESET_VERSION",
    "SERVER_LOG_KEPT_APART", "STREAMS_NOT_BUFFERED", "SUITE_FRAMES", "TEMPERATURE_IS_ZERO",
    "TOKENIZER_CALIBRATED",
    "TOKEN_SOURCE_IS_USAGE", "TTFT_NOT_ABOVE_E2E", "USAGE_PLAUSIBLE", "WINDOWS_PRESENT",
    "FIXES", "AppliesTo", "Effect", "GxCheck", "QueryCheck", "Rule", "SuiteFrame", "markdown_table",
    "names_with_effect", "ruleset_version", "rules_of_suite",
]

# The order here is the order of every suite's expectations and results.
CATALOGUE: tuple[Rule, ...] = (
    RESTART_HEALTHY, CLOCK_UNDER_LOAD,
    WINDOWS_PRESENT, ACCOUNTING_BALANCES, N_AT_LEAST_MIN,
    GENERATION_TOKENS_RECONCILE, PROMPT_TOKENS_RECONCILE, FINISHED_REQUESTS_RECONCILE,
    COUNTERS_READABLE, TOKENIZER_CALIBRATED, CLIENT_LAG_WITHIN_BOUND, STREAMS_NOT_BUFFERED,
    ARRIVALS_ON_SCHEDULE, ENERGY_READABLE,
    TOKEN_SOURCE_IS_USAGE, TEMPERATURE_IS_ZERO, TTFT_NOT_ABOVE_E2E, USAGE_PLAUSIBLE,
    LOGPROBS_MATCH_USAGE,
    ENTRY_HAS_VALIDATED_VALUE, INCOMPLETE_RATE_LABELLED, LATENCY_POPULATION_LABELLED,
    RATE_NUMERATOR_LABELLED, PREFILL_RATE_COLD_PROMPTS, ENTRY_TOKEN_SOURCE_SINGLE,
    EVIDENCE_LABELLED, RATE_DENOMINATOR_STATED, REQUEST_COUNTS_BALANCE, SERVER_LOG_KEPT_APART,
    BURST_SHARE_BOUNDED, ENERGY_SOURCE_LABELLED, PERCENTILE_N_SUFFICIENT,
    AB_ARMS_DIFFER, AB_RESTARTS_REPLICATED, AB_BEYOND_CONTROL, AB_BEYOND_DRIFT,
    OUTPUTS_EQUIVALENT,
)
# What to do when each rule fails: the advice `benchledger run` prints first when a run
# publishes nothing, beside the rule's own expected/found, and the rule table's last column.
# Advice, not a judgement: it is not part of a rule's declaration (the ruleset version does
# not change when advice is reworded), and every rule has one (checked below). Rules that
# hold by construction say so: their failure is a defect of benchledger, to be reported
# with the run's raw folder.
_DEFECT = ("a defect of benchledger, not of the server: report it with the run's raw "
           "folder (`benchledger sql` shows the entry)")
_COUNTERS = ("another client used the server during the window, or the counter is not the "
             "one this family exports: measure a server nobody else is using, or name the "
             "family (arms.server_family); reconcile_tolerance bounds the difference")

FIXES: Mapping[str, str] = MappingProxyType({
    RESTART_HEALTHY.name: "the server crashed, never became ready or was stopped: read the "
                       "restart's server.log under the data dir, fix the server or its "
                       "command (ready_timeout_s for a slow start), and run again",
    CLOCK_UNDER_LOAD.name: "the GPUs ran below min_clock_ratio of their top clock (throttled "
                        "or power-capped): fix the node and run again; a window shorter "
                        "than clock_interval_s may end before any sample (lower it); a "
                        "server with no GPU clock to read (a CPU server, a remote one) "
                        "needs clock_source = \"none\" and require_clock_check = false",
    WINDOWS_PRESENT.name: "a planned window left no record (its restart ended first): see "
                       "the restart's status and server.log, then run again",
    ACCOUNTING_BALANCES.name: _DEFECT,
    N_AT_LEAST_MIN.name: "too few measured requests completed: raise requests, and read why "
                      "the others failed (requests.status, error)",
    GENERATION_TOKENS_RECONCILE.name: _COUNTERS,
    PROMPT_TOKENS_RECONCILE.name: _COUNTERS,
    FINISHED_REQUESTS_RECONCILE.name: _COUNTERS,
    COUNTERS_READABLE.name: "the server's /metrics did not answer in time or was not "
                         "Prometheus text: check metrics_path, raise metrics_timeout_s, or "
                         "name the family the server is (arms.server_family)",
    TOKENIZER_CALIBRATED.name: "the server's tokenizer endpoint counts its text differently "
                            "from its usage: check tokenize_path, or count another way "
                            "(token_count = \"usage\" or \"logprobs\")",
    CLIENT_LAG_WITHIN_BOUND.name: "the measuring client was too busy to stamp events on "
                               "time: lower the concurrency, give the client more cores "
                               "(client_workers), or run it on a quieter machine; "
                               "max_client_lag_ms is the bound",
    STREAMS_NOT_BUFFERED.name: "answers arrived whole, not streamed: a proxy buffers them or "
                            "the server does not flush; reach the server directly "
                            "(base_url), or turn buffering off; max_burst_fraction is the "
                            "bound",
    ARRIVALS_ON_SCHEDULE.name: "the client fell behind its arrival schedule: lower rate_rps, "
                            "give the client more cores (client_workers); "
                            "max_arrival_lag_ms is the bound",
    ENERGY_READABLE.name: "a GPU's energy or power could not be read whole: check the "
                       "telemetry (nvidia-smi, the DCGM exporter) on every node",
    TOKEN_SOURCE_IS_USAGE.name: "the server reported no token counts: set token_count = "
                             "\"logprobs\" (a server that streams logprobs) or "
                             "\"server_tokenizer\", or turn on its usage reporting",
    TEMPERATURE_IS_ZERO.name: "measured requests must run at temperature 0: remove the "
                           "temperature the sweep sets",
    TTFT_NOT_ABOVE_E2E.name: _DEFECT,
    USAGE_PLAUSIBLE.name: "the server's usage counts cannot be true (more tokens than "
                       "max_tokens, fewer than its text events): count another way "
                       "(token_count = \"logprobs\") and report the server's bug",
    LOGPROBS_MATCH_USAGE.name: "the streamed logprobs and the usage disagree: count with "
                            "usage (token_count = \"usage\") and report the server's bug",
    ENTRY_HAS_VALIDATED_VALUE.name: "no window behind the entry passed every rule: the rules "
                                 "beneath it (listed with it) say what to fix; or, for a "
                                 "rate of prompt tokens, no request's prompt tokens are "
                                 "known (a server that streams no usage: nothing to fix, "
                                 "that rate cannot be had from it)",
    INCOMPLETE_RATE_LABELLED.name: _DEFECT,
    LATENCY_POPULATION_LABELLED.name: _DEFECT,
    RATE_NUMERATOR_LABELLED.name: _DEFECT,
    PREFILL_RATE_COLD_PROMPTS.name: "a prefill rate needs cold prompts: set "
                                 "prompt_cache = \"cold\" on the workload",
    ENTRY_TOKEN_SOURCE_SINGLE.name: "requests of one entry were counted two ways: give the "
                                 "arm one token_count",
    EVIDENCE_LABELLED.name: _DEFECT,
    RATE_DENOMINATOR_STATED.name: _DEFECT,
    REQUEST_COUNTS_BALANCE.name: _DEFECT,
    SERVER_LOG_KEPT_APART.name: _DEFECT,
    BURST_SHARE_BOUNDED.name: "too many answers arrived in a burst for per-request decode "
                           "timing: reach the server without a buffering proxy, or lower "
                           "the concurrency; max_burst_fraction is the bound",
    ENERGY_SOURCE_LABELLED.name: _DEFECT,
    PERCENTILE_N_SUFFICIENT.name: "a percentile needs enough requests to lie beyond it (p90 "
                               "from 10, p99 from 100): raise requests",
    AB_ARMS_DIFFER.name: "the two arms of a comparison are the same configuration: compare "
                      "arms that differ, or name the pair as the A/A control",
    AB_RESTARTS_REPLICATED.name: "a verdict needs restarts on both sides: raise restarts "
                              "(an external server cannot restart: use a command arm)",
    AB_BEYOND_CONTROL.name: "the difference is within what the A/A control shows between "
                         "identical arms: more restarts narrow both, or the effect is "
                         "not there",
    AB_BEYOND_DRIFT.name: "the machine drifted during the run as much as the difference: "
                       "interleave the arms (restart_order = \"blocked\") and run again",
    OUTPUTS_EQUIVALENT.name: "the faster arm's answers differ from the baseline's: it is "
                          "not the same computation; check its settings",
})

BY_NAME: Mapping[str, Rule] = MappingProxyType({rule.name: rule for rule in CATALOGUE})
if len(BY_NAME) != len(CATALOGUE):  # pragma: no cover (a declaration mistake)
    raise RuntimeError("two rules share a name in the catalogue")
if set(FIXES) != set(BY_NAME):  # pragma: no cover (a declaration mistake)
    raise RuntimeError("FIXES must advise on exactly the catalogue's rules: "
                       f"{sorted(set(FIXES) ^ set(BY_NAME))}")

# The frames of the GX suites, by suite name.
SUITE_FRAMES: Mapping[str, SuiteFrame] = MappingProxyType({
    module.SUITE.suite: module.SUITE
    for module in (restarts, windows, requests, entries, comparisons)})


def rules_of_suite(suite: str) -> tuple[Rule, ...]:
    return tuple(rule for rule in CATALOGUE if rule.suite == suite)


def names_with_effect(effect: str) -> frozenset[str]:
    return frozenset(rule.name for rule in CATALOGUE if rule.effect == effect)


def _declaration(rule: Rule) -> dict[str, Any]:
    """What a rule declares: the check's column builders and found writer are code, and
    are left out (results say which ruleset judged them; code that writes the same
    verdicts and texts judges with the same ruleset)."""
    check: dict[str, Any] = {"kind": type(rule.check).__name__, "suite": rule.check.suite}
    if isinstance(rule.check, GxCheck):
        check.update(expectation=rule.check.expectation, kwargs=dict(rule.check.kwargs))
    else:
        check.update(query=rule.check.query)
    return {"name": rule.name, "traps": list(rule.traps), "applies_to": rule.applies_to,
            "effect": rule.effect, "summary": rule.summary, "threshold": rule.threshold,
            "threshold_source": rule.threshold_source, "check": check}


def ruleset_version(rules: Iterable[Rule]) -> str:
    """Changes whenever any rule's declaration changes; stored with every result."""
    canonical = json.dumps([_declaration(rule) for rule in rules], sort_keys=True)
    return "rules-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


RULESET_VERSION = ruleset_version(CATALOGUE)


def markdown_table() -> str:
    """The rule table of docs/protocol.md (a test keeps the two in sync)."""
    lines = ["| rule | traps | applies to | effect | must hold | threshold (source) | check "
             "| when it fails |",
             "|---|---|---|---|---|---|---|---|"]
    for rule in CATALOGUE:
        threshold = "-" if rule.threshold is None else (
            rule.threshold + (f" ({rule.threshold_source})" if rule.threshold_source else ""))
        lines.append(f"| `{rule.name}` | {', '.join(rule.traps) or '-'} | {rule.applies_to} "
                     f"| `{rule.effect}` | {rule.summary} | {threshold} "
                     f"| {rule.check.describe()} | {FIXES[rule.name]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchledger.rules",
                                     description="The protocol rule catalogue.")
    parser.add_argument("--markdown", action="store_true",
                        help="print the rule table of docs/protocol.md")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table(), end="")
    else:
        print(f"ruleset {RULESET_VERSION}: {len(CATALOGUE)} rules")
        for rule in CATALOGUE:
            print(f"  {rule.name:<30} {rule.applies_to:<10} {rule.effect}")
    return 0
