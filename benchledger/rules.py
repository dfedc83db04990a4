"""The rule catalogue: every protocol rule, declared once.

A rule says what must hold before a number may be published. Each one here carries its
name (what `validations.expectation` and `entry_blocks.rule` say), the traps it answers
(T-numbers of docs/protocol.md), what it applies to, its effect when it fails, its
threshold and where that threshold comes from, and its check:

- `GxCheck`: a Great Expectations 1.x expectation (class name and arguments) that
  benchledger.expectations.gate runs over one suite's prepared frame;
- `QueryCheck`: a query in warehouse/queries/ that returns one row per subject with
  `success`, `expected` and `found` (the rows breaking the rule are those with success false).

Code elsewhere refers to rules through the constants below (never by retyping a name), so a
rule's name appears once in the source. The catalogue is plain data: no GX, no DuckDB.

`python -m benchledger.rules --markdown` prints the rule table of docs/protocol.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

AppliesTo = Literal["restart", "window", "request", "entry", "comparison"]

# What a failed rule does.
BLOCK_ENTRIES = "block_entries"  # entries resting on the subject are not publishable
EXCLUDE_RESTART = "exclude_restart"  # the restart feeds no entry; its arm's others still may
REFUSE_COMPARISON = "refuse_comparison"  # the comparison's verdict is 'not decidable'
LIMIT_VERDICT = "limit_verdict"  # no improvement/regression claim: at best 'no finding'
Effect = Literal["block_entries", "exclude_restart", "refuse_comparison", "limit_verdict"]

# What an entry rests on (docs/protocol.md, warehouse relations; docs/imports.md): measured
# by this pipeline, another tool's file, a recovered report, or a recovered value that was
# itself derived from other runs. Only `rerun` comes from the pipeline's own measurements.
EVIDENCE_KINDS = ("rerun", "imported", "historical", "derived_comparison")

# Thresholds the protocol fixes (a sweep may raise the n floor, never lower it).
MIN_REQUESTS_SPECULATIVE = 15  # T4: measured requests per workload per restart
MIN_REQUESTS_PLAIN = 5
MIN_RESTARTS_FOR_CLAIM = 2  # T5: restarts per arm before an A/B may claim a difference
# Defaults of thresholds a sweep sets (benchledger.sweep uses these as its defaults).
DEFAULT_RECONCILE_TOLERANCE = 0.01  # T3: counters vs delivered usage, relative
DEFAULT_MIN_CLOCK_RATIO = 0.9  # T10: SM clock under load as a fraction of max
# T1: a prompt longer than any model's context window is a broken usage report, not a
# prompt (2**24 = 16,777,216 tokens). Below it every plausible count is exact in float64.
MAX_PROMPT_TOKENS = 2**24

@dataclass(frozen=True)
class GxCheck:
    """A GX expectation (gx.expectations.<expectation>) over one suite's prepared frame."""

    suite: str  # restarts | windows | measured_requests | entries | comparisons
    expectation: str
    kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def describe(self) -> str:
        columns = " vs ".join(str(self.kwargs[k]) for k in ("column", "column_A", "column_B")
                              if k in self.kwargs)
        return f"GX {self.expectation} on {columns} (suite {self.suite})"


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


def _gx(suite: str, expectation: str, **kwargs: Any) -> GxCheck:
    return GxCheck(suite, expectation, MappingProxyType(kwargs))


# --- restarts ---------------------------------------------------------------------------

RESTART_HEALTHY = Rule(
    name="restart_healthy", traps=("T5",), applies_to="restart", effect=BLOCK_ENTRIES,
    summary="the server restart ended ok (or is an external server that cannot restart)",
    check=_gx("restarts", "ExpectColumnValuesToBeInSet",
              column="status_or_null", value_set=["ok", "external"]))

CLOCK_UNDER_LOAD = Rule(
    name="clock_under_load", traps=("T10",), applies_to="restart", effect=EXCLUDE_RESTART,
    summary="the restart's GPUs ran at >= min_clock_ratio of their max SM clock under load "
            "(median per GPU, worst GPU); an unreadable clock fails unless "
            "require_clock_check = false",
    threshold=f"min_clock_ratio (default {DEFAULT_MIN_CLOCK_RATIO})",
    threshold_source="sweep key min_clock_ratio ([defaults] or the arm); "
                     "require_clock_check decides whether an unreadable clock fails",
    # clock_ratio_checked: the ratio, -1 when unreadable but required, NULL when allowed.
    check=_gx("restarts", "ExpectColumnPairValuesAToBeGreaterThanB",
              column_A="clock_ratio_checked", column_B="min_clock_ratio", or_equal=True,
              ignore_row_if="either_value_is_missing"))

# --- windows ----------------------------------------------------------------------------

WINDOWS_PRESENT = Rule(
    name="windows_present", traps=("T5", "T14"), applies_to="window", effect=BLOCK_ENTRIES,
    summary="every planned (arm, workload, concurrency) has one window per planned restart; "
            "a crashed task or failed restart is never a silent gap",
    threshold="restarts planned for the arm", threshold_source="the sweep file",
    check=QueryCheck("coverage", "audit_windows_present"))

ACCOUNTING_BALANCES = Rule(
    name="accounting_balances", traps=("T14",), applies_to="window", effect=BLOCK_ENTRIES,
    summary="the window accounts for every request: "
            "submitted == completed + failed + unresolved",
    check=_gx("windows", "ExpectColumnPairValuesToBeEqual",
              column_A="submitted", column_B="accounted", ignore_row_if="neither"))

N_AT_LEAST_MIN = Rule(
    name="n_at_least_min", traps=("T4",), applies_to="window", effect=BLOCK_ENTRIES,
    summary="the window completed at least the n the protocol requires; a sweep asking "
            "for fewer measured requests is refused before it runs",
    threshold=f"n >= {MIN_REQUESTS_SPECULATIVE} speculative, >= {MIN_REQUESTS_PLAIN} otherwise",
    threshold_source="the protocol (T4); a sweep may raise it with min_requests",
    check=_gx("windows", "ExpectColumnPairValuesAToBeGreaterThanB",
              column_A="completed", column_B="min_requests", or_equal=True,
              ignore_row_if="neither"))


def _reconcile(name: str, counter: str, client: str, error_column: str) -> Rule:
    return Rule(
        name=name, traps=("T1", "T3"), applies_to="window", effect=BLOCK_ENTRIES,
        summary=f"the server's {counter} delta over the window matches {client} within the "
                "tolerance (a server without the counter is recorded as not reconciled)",
        threshold=f"relative error <= reconcile_tolerance (default "
                  f"{DEFAULT_RECONCILE_TOLERANCE})",
        threshold_source="sweep key reconcile_tolerance",
        check=_gx("windows", "ExpectColumnPairValuesAToBeGreaterThanB",
                  column_A="reconcile_tolerance", column_B=error_column, or_equal=True,
                  ignore_row_if="either_value_is_missing"))


# Each server family names its counters its own way (docs/protocol.md, server families):
# vLLM's names stand for the quantity here; the found text names the counter really read.
GENERATION_TOKENS_RECONCILE = _reconcile(
    "generation_tokens_reconcile", "generation-token counter (vllm:generation_tokens_total "
    "or its family's own)",
    "the output tokens in per-request usage", "generation_error")
PROMPT_TOKENS_RECONCILE = _reconcile(
    "prompt_tokens_reconcile", "prompt-token counter (vllm:prompt_tokens_total or its "
    "family's own)",
    "the prompt tokens in per-request usage", "prompt_error")
FINISHED_REQUESTS_RECONCILE = _reconcile(
    "finished_requests_reconcile", "finished-request counter (vllm:request_success_total "
    "or its family's own)",
    "the completed requests", "success_error")

# Where the output tokens of a request may come from (docs/protocol.md, tokens and chunks):
# the server's usage, the entries of its streamed logprobs, or its tokenizer's count of the
# received text (calibrated). `missing` and the import-only sources (client_tokenizer,
# requested, chunks) never count as delivered tokens.
COUNTED_TOKEN_SOURCES = ("usage", "logprobs", "server_tokenizer")

TOKENIZER_CALIBRATED = Rule(
    name="tokenizer_calibrated", traps=("T1", "T3"), applies_to="window",
    effect=BLOCK_ENTRIES,
    summary="a window whose output tokens the server's tokenizer counted (token_count = "
            "'server_tokenizer') was calibrated: on its non-streamed calibration requests "
            "the tokenizer's count of the returned text matches their usage within the "
            "tolerance (no calibration: the rule fails)",
    threshold=f"relative error of the totals <= reconcile_tolerance (default "
              f"{DEFAULT_RECONCILE_TOLERANCE})",
    threshold_source="sweep key reconcile_tolerance; the arm's calibration_requests",
    check=_gx("windows", "ExpectColumnValuesToBeInSet", column="calibration_check",
              value_set=["within reconcile_tolerance"]))

# --- measured requests (results per window) --------------------------------------------

TOKEN_SOURCE_IS_USAGE = Rule(
    name="token_source_is_usage", traps=("T1", "T13"), applies_to="request",
    effect=BLOCK_ENTRIES,
    summary="every completed measured request's output tokens come from the usage the "
            "server reported for it, or from the source its arm's token_count names and "
            "its own rule checks (logprobs, server_tokenizer); never from chunks, "
            "characters or max_tokens",
    check=_gx("measured_requests", "ExpectColumnValuesToBeInSet",
              column="completed_token_source", value_set=list(COUNTED_TOKEN_SOURCES)))

LOGPROBS_MATCH_USAGE = Rule(
    name="logprobs_match_usage", traps=("T1", "T3"), applies_to="request",
    effect=BLOCK_ENTRIES,
    summary="every completed measured request counted from its streamed logprobs, whose "
            "server also reported usage, lists exactly as many tokens as "
            "usage.completion_tokens says",
    threshold="output_tokens == usage_output_tokens", threshold_source="exact counts",
    check=_gx("measured_requests", "ExpectColumnValuesToBeInSet",
              column="logprobs_usage_check", value_set=["agree"]))

TEMPERATURE_IS_ZERO = Rule(
    name="temperature_is_zero", traps=("T9",), applies_to="request", effect=BLOCK_ENTRIES,
    summary="every measured request ran at temperature 0",
    threshold="temperature == 0.0", threshold_source="the protocol (T9)",
    check=_gx("measured_requests", "ExpectColumnValuesToBeInSet",
              column="temperature_or_null", value_set=[0.0]))

TTFT_NOT_ABOVE_E2E = Rule(
    name="ttft_not_above_e2e", traps=(), applies_to="request", effect=BLOCK_ENTRIES,
    summary="for completed requests with both times, TTFT <= E2E latency (the timestamps "
            "are consistent)",
    check=_gx("measured_requests", "ExpectColumnPairValuesAToBeGreaterThanB",
              column_A="completed_e2e_s", column_B="completed_ttft_s", or_equal=True,
              ignore_row_if="either_value_is_missing"))

# A server's usage is taken as reported (the client never corrects it), so a count that
# cannot be true (10**9 tokens for max_tokens = 8, a negative count, no prompt count) is
# recorded as it came and stopped here, before any rate is computed from it.
USAGE_PLAUSIBLE = Rule(
    name="usage_plausible", traps=("T1", "T13"), applies_to="request", effect=BLOCK_ENTRIES,
    summary="every completed measured request with token_source 'usage' reports integer "
            "counts that can be true: 0 <= output_tokens <= max_tokens, prompt_tokens "
            "present and between 0 and the longest possible prompt, cached_tokens (when "
            "reported) between 0 and prompt_tokens",
    threshold=f"0 <= output_tokens <= max_tokens; 0 <= prompt_tokens <= {MAX_PROMPT_TOKENS}; "
              "0 <= cached_tokens <= prompt_tokens",
    threshold_source="each request's own max_tokens (the sweep's output target); the "
                     f"protocol's prompt ceiling ({MAX_PROMPT_TOKENS} = 2**24, longer than "
                     "any model's context window)",
    check=_gx("measured_requests", "ExpectColumnValuesToBeInSet",
              column="completed_usage_check", value_set=["plausible"]))

# --- entries ------------------------------------------------------------------------------
# Each *_check column holds the labelled value where the rule applies and NULL elsewhere
# (GX skips NULLs), see benchledger.expectations.gate._prepare_entries.

ENTRY_HAS_VALIDATED_VALUE = Rule(
    name="entry_has_validated_value", traps=("T14", "T16"), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="an entry has a value computed from windows that passed every rule; nothing "
            "is filled in where no validated window backs it",
    check=_gx("entries", "ExpectColumnValuesToNotBeNull", column="value"))

INCOMPLETE_RATE_LABELLED = Rule(
    name="incomplete_rate_labelled", traps=("T14",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="a rate from a window with unresolved requests (drain incomplete) is labelled "
            "population = 'completed_only'",
    check=_gx("entries", "ExpectColumnValuesToBeInSet",
              column="incomplete_rate_check", value_set=["completed_only"]))

LATENCY_POPULATION_LABELLED = Rule(
    name="latency_population_labelled", traps=("T14",), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="a latency from windows where requests failed or stayed unresolved is labelled "
            "population = 'completed_only'",
    check=_gx("entries", "ExpectColumnValuesToBeInSet",
              column="latency_population_check", value_set=["completed_only"]))

RATE_NUMERATOR_LABELLED = Rule(
    name="rate_numerator_labelled", traps=("T12",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="every rate names its numerator",
    check=_gx("entries", "ExpectColumnValuesToBeInSet", column="rate_numerator_check",
              value_set=["output_tokens", "input_plus_output_tokens", "prompt_tokens"]))

PREFILL_RATE_COLD_PROMPTS = Rule(
    name="prefill_rate_cold_prompts", traps=("T7", "T9", "T15"), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="a prefill rate comes from cold prompts only; warm prompts measure the prefix "
            "cache",
    check=_gx("entries", "ExpectColumnValuesToBeInSet",
              column="prefill_rate_check", value_set=["cold"]))

# Evidence from elsewhere is checked for what it claims (docs/imports.md): its kind, the
# denominator of its rates, and its request counts where it records them.
EVIDENCE_LABELLED = Rule(
    name="evidence_labelled", traps=("T16",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="every entry names its evidence kind: rerun (measured by this pipeline), "
            "imported (another tool's file), historical (a recovered report) or "
            "derived_comparison (a recovered value that was derived from other runs)",
    check=_gx("entries", "ExpectColumnValuesToBeInSet", column="evidence_or_null",
              value_set=list(EVIDENCE_KINDS)))

RATE_DENOMINATOR_STATED = Rule(
    name="rate_denominator_stated", traps=("T12", "T16"), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="every rate states its denominator, or says that its source did not record it",
    check=_gx("entries", "ExpectColumnValuesToBeInSet", column="rate_denominator_check",
              value_set=["stated"]))

REQUEST_COUNTS_BALANCE = Rule(
    name="request_counts_balance", traps=("T14", "T16"), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="where an entry records all four request counts, submitted == completed + "
            "failed + unresolved (counts that do not add up are not taken at their word)",
    check=_gx("entries", "ExpectColumnValuesToBeInSet", column="counts_check",
              value_set=["balanced"]))

ENTRY_TOKEN_SOURCE_SINGLE = Rule(
    name="entry_token_source_single", traps=("T1",), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="an entry rests on one token source: the completed measured requests of its "
            "windows all count their output tokens the same way (never usage mixed with "
            "logprobs or a tokenizer's counts)",
    check=_gx("entries", "ExpectColumnValuesToBeInSet", column="token_source_check",
              value_set=list(COUNTED_TOKEN_SOURCES)))

SERVER_LOG_KEPT_APART = Rule(
    name="server_log_kept_apart", traps=("T2",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="server log values (peak, mean) stay under server_log_* metric names with a "
            "server_log_* statistic and are never labelled as a delivered rate",
    check=_gx("entries", "ExpectColumnValuesToBeInSet", column="server_log_check",
              value_set=["server_log_* metric with a server_log_* statistic"]))

# --- comparisons (A/B rows; the A/A control row is not held to them) ----------------------

AB_ARMS_DIFFER = Rule(
    name="ab_arms_differ", traps=("T11",), applies_to="comparison", effect=REFUSE_COMPARISON,
    summary="an A/B compares arms that differ: identical server settings are refused when "
            "the sweep is parsed, identical effective configs when the run is compared "
            "(name such arms as an A/A control instead)",
    check=_gx("comparisons", "ExpectColumnValuesToBeInSet",
              column="effective_configs_identical", value_set=[False]))

AB_RESTARTS_REPLICATED = Rule(
    name="ab_restarts_replicated", traps=("T5",), applies_to="comparison",
    effect=LIMIT_VERDICT,
    summary="an improvement or regression needs >= 2 restarts per arm; with fewer the "
            "verdict is at best 'no finding'",
    threshold=f"restarts per arm >= {MIN_RESTARTS_FOR_CLAIM}",
    threshold_source="the protocol (T5)",
    check=_gx("comparisons", "ExpectColumnValuesToBeBetween",
              column="fewest_restarts", min_value=MIN_RESTARTS_FOR_CLAIM))

AB_BEYOND_CONTROL = Rule(
    name="ab_beyond_control", traps=("T11",), applies_to="comparison", effect=LIMIT_VERDICT,
    summary="where an A/A control was measured, the A/B difference must be larger than the "
            "control's; otherwise the verdict is 'no finding'",
    threshold="|b - a| > |control difference|",
    threshold_source="the A/A control named in the sweep's [[comparisons]]",
    check=_gx("comparisons", "ExpectColumnPairValuesAToBeGreaterThanB",
              column_A="abs_difference", column_B="abs_control_difference",
              or_equal=False, ignore_row_if="either_value_is_missing"))

CATALOGUE: tuple[Rule, ...] = (
    RESTART_HEALTHY, CLOCK_UNDER_LOAD,
    WINDOWS_PRESENT, ACCOUNTING_BALANCES, N_AT_LEAST_MIN,
    GENERATION_TOKENS_RECONCILE, PROMPT_TOKENS_RECONCILE, FINISHED_REQUESTS_RECONCILE,
    TOKENIZER_CALIBRATED,
    TOKEN_SOURCE_IS_USAGE, TEMPERATURE_IS_ZERO, TTFT_NOT_ABOVE_E2E, USAGE_PLAUSIBLE,
    LOGPROBS_MATCH_USAGE,
    ENTRY_HAS_VALIDATED_VALUE, INCOMPLETE_RATE_LABELLED, LATENCY_POPULATION_LABELLED,
    RATE_NUMERATOR_LABELLED, PREFILL_RATE_COLD_PROMPTS, ENTRY_TOKEN_SOURCE_SINGLE,
    EVIDENCE_LABELLED, RATE_DENOMINATOR_STATED, REQUEST_COUNTS_BALANCE, SERVER_LOG_KEPT_APART,
    AB_ARMS_DIFFER, AB_RESTARTS_REPLICATED, AB_BEYOND_CONTROL,
)
BY_NAME: Mapping[str, Rule] = MappingProxyType({rule.name: rule for rule in CATALOGUE})
if len(BY_NAME) != len(CATALOGUE):  # pragma: no cover (a declaration mistake)
    raise RuntimeError("two rules share a name in the catalogue")


def rules_of_suite(suite: str) -> tuple[Rule, ...]:
    return tuple(rule for rule in CATALOGUE if rule.suite == suite)


def names_with_effect(effect: str) -> frozenset[str]:
    return frozenset(rule.name for rule in CATALOGUE if rule.effect == effect)


def _declaration(rule: Rule) -> dict[str, Any]:
    check = {"kind": type(rule.check).__name__, "suite": rule.check.suite}
    if isinstance(rule.check, GxCheck):
        check.update(expectation=rule.check.expectation, kwargs=dict(rule.check.kwargs))
    else:
        check.update(query=rule.check.query)
    return {"name": rule.name, "traps": list(rule.traps), "applies_to": rule.applies_to,
            "effect": rule.effect, "summary": rule.summary, "threshold": rule.threshold,
            "threshold_source": rule.threshold_source, "check": check}


def _ruleset_version() -> str:
    """Changes whenever any rule's declaration changes; stored with every result."""
    canonical = json.dumps([_declaration(rule) for rule in CATALOGUE], sort_keys=True)
    return "rules-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


RULESET_VERSION = _ruleset_version()


def markdown_table() -> str:
    """The rule table of docs/protocol.md (a test keeps the two in sync)."""
    lines = ["| rule | traps | applies to | effect | must hold | threshold (source) | check |",
             "|---|---|---|---|---|---|---|"]
    for rule in CATALOGUE:
        threshold = "-" if rule.threshold is None else (
            rule.threshold + (f" ({rule.threshold_source})" if rule.threshold_source else ""))
        lines.append(f"| `{rule.name}` | {', '.join(rule.traps) or '-'} | {rule.applies_to} "
                     f"| `{rule.effect}` | {rule.summary} | {threshold} "
                     f"| {rule.check.describe()} |")
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


if __name__ == "__main__":
    raise SystemExit(main())
