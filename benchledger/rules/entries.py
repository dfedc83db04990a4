"""The entries suite: one row per derived entry (measured or imported).

Each *_check column holds the labelled value where its rule applies and NULL elsewhere
(GX skips NULLs). Evidence from elsewhere is checked for what it claims (docs/imports.md):
its kind, the denominator of its rates, and its request counts where it records them; a
column the caller did not give (an older frame) makes its rule not applicable, a NULL in a
given column fails it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from benchledger.rules.core import (
    BALANCED,
    BLOCK_ENTRIES,
    COMPLETED_ONLY,
    COUNTED_TOKEN_SOURCES,
    DECODE_SPAN_METRICS,
    DEFAULT_MAX_BURST_FRACTION,
    ENERGY_METRICS,
    ENERGY_SOURCES,
    EVIDENCE_KINDS,
    PERCENTILE_MIN_REQUESTS,
    SERVER_LOG_APART,
    SLO_MET,
    STATED,
    UNBALANCED,
    Frame,
    GxCheck,
    Kw,
    Observer,
    Rows,
    Rule,
    SuiteFrame,
    gx,
)
from benchledger.rules.frame import (
    NOT_APPLICABLE,
    NULL,
    as_float,
    first_verdict,
    join,
    or_null,
    show_count,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

SUITE = SuiteFrame(
    "entries", frame="entries", subject="entry_id",
    required=("entry_id", "metric", "unit", "numerator", "population", "drain_status",
              "prompt_cache", "n_failed", "n_unresolved", "statistic", "value"),
    # NULL: derived before sources were named (or bursts counted), not checked
    optional=("token_source", "scope", "energy_source"),
    numeric=("n_burst", "n_completed", "max_burst_fraction", "n_requests"))


def _server_log(column: pd.Series) -> pd.Series:
    return column.astype(str).str.startswith("server_log_")


def _rate(frame: Frame) -> pd.Series:
    """Delivered rates: the rate rules are about them; server log values have their own."""
    return (frame["unit"] == "tok/s") & ~_server_log(frame["statistic"])


def _observe_label(label: str) -> Observer:
    """The labelled value where the rule applies."""

    def observe(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
        import pandas as pd

        column = kw["column"]
        applicable = [row for row in rows if frame.at[row, column] is not None
                      and not (isinstance(frame.at[row, column], float)
                               and pd.isna(frame.at[row, column]))]
        values = [None if v == NULL else v for v in frame.loc[applicable, column]]
        found = join(values) if applicable else NOT_APPLICABLE
        return f"{label} in {kw['value_set']}", found

    return observe


# Rates whose numerator counts prompt tokens: without any request's prompt tokens (a
# server that streams no usage, counted from logprobs, which list the answer's tokens
# only) such an entry has no value whatever its windows passed, and is said so.
_PROMPT_NUMERATORS = ("prompt_tokens", "input_plus_output_tokens")


def _prompts_unknown(frame: Frame, row: object) -> bool:
    import pandas as pd

    return (not {"numerator", "mean_prompt_tokens"} - set(frame.columns)
            and frame.at[row, "numerator"] in _PROMPT_NUMERATORS
            and bool(pd.isna(frame.at[row, "mean_prompt_tokens"])))


def _observe_value(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    if not len(bad):
        found = join(frame.loc[rows, "value"])
    elif all(_prompts_unknown(frame, row) for row in bad):
        sources = join(frame.loc[bad, "token_source"]) if "token_source" in frame.columns \
            else "unknown"
        found = ("no value: no request's prompt tokens are known (token_source "
                 f"{sources}; only a server's usage reports them), so a rate of prompt "
                 "tokens cannot be computed")
    else:
        found = "no value: no window behind it passed every rule"
    return "a value from windows that passed every rule", found


ENTRY_HAS_VALIDATED_VALUE = Rule(
    name="entry_has_validated_value", traps=("T14", "T16"), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="an entry has a value computed from windows that passed every rule; nothing "
            "is filled in where no validated window backs it",
    check=gx(SUITE, "ExpectColumnValuesToNotBeNull", column="value", observe=_observe_value))


def _label_check(column: str, label: str, applies: Callable[[Frame], pd.Series],
                 value_set: list[str]) -> GxCheck:
    """The entries where `applies` holds carry one of value_set as their `label` (a NULL
    label fails); column holds their label, NULL on the other entries."""

    def build(frame: Frame) -> pd.Series:
        return or_null(frame[label]).where(applies(frame))

    return gx(SUITE, "ExpectColumnValuesToBeInSet", column=column, value_set=value_set,
              columns={column: build}, observe=_observe_label(label))


def _incomplete_rate(frame: Frame) -> pd.Series:
    return _rate(frame) & (frame["drain_status"] == "incomplete")


INCOMPLETE_RATE_LABELLED = Rule(
    name="incomplete_rate_labelled", traps=("T14",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="a rate from a window with unresolved requests (drain incomplete) is labelled "
            f"population = '{COMPLETED_ONLY}' (goodput: '{SLO_MET}', the requests that "
            "met every SLO)",
    check=_label_check("incomplete_rate_check", "population", _incomplete_rate,
                       [COMPLETED_ONLY, SLO_MET]))


def _troubled_latency(frame: Frame) -> pd.Series:
    troubled = (frame["n_failed"].fillna(0) + frame["n_unresolved"].fillna(0)) > 0
    return (frame["unit"] == "s") & troubled


LATENCY_POPULATION_LABELLED = Rule(
    name="latency_population_labelled", traps=("T14",), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="a latency from windows where requests failed or stayed unresolved is labelled "
            f"population = '{COMPLETED_ONLY}'",
    check=_label_check("latency_population_check", "population", _troubled_latency,
                       [COMPLETED_ONLY]))

RATE_NUMERATOR_LABELLED = Rule(
    name="rate_numerator_labelled", traps=("T12",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="every rate names its numerator",
    check=_label_check("rate_numerator_check", "numerator", _rate,
                       ["output_tokens", "input_plus_output_tokens", "prompt_tokens",
                        # reasoning models (issue #26): which tokens a rate counts
                        "answer_tokens", "output_tokens_with_reasoning"]))


def _prefill_rate(frame: Frame) -> pd.Series:
    return frame["metric"] == "prefill_rate"


PREFILL_RATE_COLD_PROMPTS = Rule(
    name="prefill_rate_cold_prompts", traps=("T7", "T9", "T15"), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="a prefill rate comes from cold prompts only; warm prompts measure the prefix "
            "cache",
    check=_label_check("prefill_rate_check", "prompt_cache", _prefill_rate, ["cold"]))


def _token_source(frame: Frame) -> pd.Series:
    # NULL (no window behind the entry, or derived before sources were named): not checked.
    return frame["token_source"].astype(object).where(frame["token_source"].notna())


ENTRY_TOKEN_SOURCE_SINGLE = Rule(
    name="entry_token_source_single", traps=("T1",), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="an entry rests on one token source: the completed measured requests of its "
            "windows all count their output tokens the same way (never usage mixed with "
            "logprobs or a tokenizer's counts)",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="token_source_check",
             value_set=list(COUNTED_TOKEN_SOURCES),
             columns={"token_source_check": _token_source},
             observe=_observe_label("token_source")))


def _evidence(frame: Frame) -> pd.Series | None:
    return or_null(frame["evidence"]) if "evidence" in frame.columns else None


EVIDENCE_LABELLED = Rule(
    name="evidence_labelled", traps=("T16",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="every entry names its evidence kind: rerun (measured by this pipeline), "
            "imported (another tool's file), historical (a recovered report) or "
            "derived_comparison (a recovered value that was derived from other runs)",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="evidence_or_null",
             value_set=list(EVIDENCE_KINDS), columns={"evidence_or_null": _evidence},
             observe=_observe_label("evidence")))


def _denominator(frame: Frame) -> pd.Series | None:
    import pandas as pd

    if "denominator" not in frame.columns:
        return None
    stated = pd.Series(STATED, index=frame.index, dtype=object)
    return stated.where(frame["denominator"].notna(), NULL).where(_rate(frame))


RATE_DENOMINATOR_STATED = Rule(
    name="rate_denominator_stated", traps=("T12", "T16"), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="every rate states its denominator, or says that its source did not record it",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="rate_denominator_check",
             value_set=[STATED], columns={"rate_denominator_check": _denominator},
             observe=_observe_label("denominator")))

_COUNTS = ("n_submitted", "n_completed", "n_failed", "n_unresolved")


def _counts_verdicts(frame: Frame) -> pd.Series | None:
    """BALANCED or UNBALANCED where all four request counts are recorded; None elsewhere."""
    import numpy as np

    if any(c not in frame.columns for c in _COUNTS):
        return None
    submitted, completed, failed, unresolved = (as_float(frame[c]) for c in _COUNTS)
    known = ~(np.isnan(submitted) | np.isnan(completed) | np.isnan(failed)
              | np.isnan(unresolved))
    return first_verdict(frame, [(BALANCED, submitted == completed + failed + unresolved)],
                         UNBALANCED, known)


def _observe_counts(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    checked = [row for row in rows if isinstance(frame.at[row, kw["column"]], str)]
    found = "; ".join(f"{show_count(frame.at[row, 'n_submitted'])} "
                      f"{'!=' if row in bad else '=='} "
                      f"{show_count(frame.at[row, 'n_completed'])} + "
                      f"{show_count(frame.at[row, 'n_failed'])} + "
                      f"{show_count(frame.at[row, 'n_unresolved'])}" for row in checked)
    return ("n_submitted == n_completed + n_failed + n_unresolved where all are recorded",
            found or f"{NOT_APPLICABLE} (counts not recorded)")


REQUEST_COUNTS_BALANCE = Rule(
    name="request_counts_balance", traps=("T14", "T16"), applies_to="entry",
    effect=BLOCK_ENTRIES,
    summary="where an entry records all four request counts, submitted == completed + "
            "failed + unresolved (counts that do not add up are not taken at their word)",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="counts_check",
             value_set=[BALANCED], columns={"counts_check": _counts_verdicts},
             observe=_observe_counts))


def _server_log_labels(frame: Frame) -> pd.Series:
    """'metric / statistic' where either is a server log's; SERVER_LOG_APART where both."""
    log_metric, log_statistic = _server_log(frame["metric"]), _server_log(frame["statistic"])
    labels = frame["metric"].astype(str) + " / " + frame["statistic"].astype(str)
    return labels.where(log_metric | log_statistic).mask(log_metric & log_statistic,
                                                        SERVER_LOG_APART)


SERVER_LOG_KEPT_APART = Rule(
    name="server_log_kept_apart", traps=("T2",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="server log values (peak, mean) stay under server_log_* metric names with a "
            "server_log_* statistic and are never labelled as a delivered rate",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="server_log_check",
             value_set=[SERVER_LOG_APART], columns={"server_log_check": _server_log_labels},
             observe=_observe_label("metric / statistic")))


def _decode_span_entry(frame: Frame) -> np.ndarray:
    """Per-request entries of a metric the requests view withholds for bursts (never the
    aggregate decode rate, which spans the whole window)."""
    return (frame["metric"].isin(DECODE_SPAN_METRICS) & frame["scope"].ne("aggregate")
            ).to_numpy(dtype=bool, na_value=False)


def _burst_share(frame: Frame) -> np.ndarray:
    """n_burst / n_completed where the rule applies and both are known; NaN elsewhere."""
    import numpy as np

    bursts, completed = as_float(frame["n_burst"]), as_float(frame["n_completed"])
    with np.errstate(invalid="ignore", divide="ignore"):
        share = bursts / completed
    return np.where(_decode_span_entry(frame) & (completed > 0), share, np.nan)


def _burst_bound(frame: Frame) -> np.ndarray:
    """The sweep's max_burst_fraction the entry carries, else the protocol's default."""
    import numpy as np

    bound = as_float(frame["max_burst_fraction"])
    return np.where(np.isnan(bound), DEFAULT_MAX_BURST_FRACTION, bound)


def _bursts_expected(r: pd.Series) -> str:
    bound = r["burst_bound"]
    return (f"at most {100 * bound:.0f}% of completed requests arrived in a burst "
            f"(max_burst_fraction {bound:g})")


def _bursts_found(r: pd.Series, decode_span: bool) -> str:
    import pandas as pd

    if pd.isna(r["burst_share"]):
        why = ("not a per-request decode-span metric" if not decode_span
               else "bursts not counted" if pd.isna(r["n_burst"]) else "no completed requests")
        return f"{NOT_APPLICABLE} ({why})"
    return (f"{show_count(r['n_burst'])} of {show_count(r['n_completed'])} completed "
            f"requests arrived in a burst ({100 * r['burst_share']:.0f}%)")


def _observe_bursts(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    # One text per row: a duplicated entry id shows every row instead of hiding one.
    decode_span = _decode_span_entry(frame.loc[rows])
    entries = [frame.loc[row] for row in rows]
    return ("; ".join(map(_bursts_expected, entries)),
            "; ".join(_bursts_found(r, bool(d)) for r, d in zip(entries, decode_span,
                                                                  strict=True)))


BURST_SHARE_BOUNDED = Rule(
    name="burst_share_bounded", traps=("T17",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="a per-request decode rate, TPOT or ITL rests on requests whose tokens were "
            "spread out: at most max_burst_fraction of its completed requests arrived in a "
            "burst (their decode-span metrics are withheld, so the rest would be a "
            "selected sample)",
    threshold=f"n_burst / n_completed <= max_burst_fraction (default "
              f"{DEFAULT_MAX_BURST_FRACTION})",
    threshold_source="sweep key max_burst_fraction",
    check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
             column_A="burst_bound", column_B="burst_share", or_equal=True,
             ignore_row_if="either_value_is_missing",
             columns={"burst_share": _burst_share, "burst_bound": _burst_bound},
             observe=_observe_bursts))


def _energy_entry(frame: Frame) -> pd.Series:
    return frame["metric"].isin(ENERGY_METRICS)


ENERGY_SOURCE_LABELLED = Rule(
    name="energy_source_labelled", traps=("T18",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="an energy entry names where its joules came from: the GPUs' energy counters "
            "(after minus before the window) or their power samples integrated over it "
            "(GPUs without a counter), for every GPU of every node of the deployment",
    check=_label_check("energy_source_check", "energy_source", _energy_entry,
                       list(ENERGY_SOURCES)))


def _percentile_needs(frame: Frame) -> pd.Series:
    """The requests a percentile entry needs (PERCENTILE_MIN_REQUESTS); NaN elsewhere."""
    return frame["statistic"].map(PERCENTILE_MIN_REQUESTS).astype(float)


def _percentile_n(frame: Frame) -> np.ndarray:
    """A percentile entry's n_requests; -1 where it is not recorded (nothing shows the
    percentile rests on enough requests: it fails); NaN on other entries."""
    import numpy as np

    n = as_float(frame["n_requests"])
    percentile = frame["statistic"].isin(list(PERCENTILE_MIN_REQUESTS)).to_numpy()
    return np.where(percentile, np.where(np.isnan(n), -1.0, n), np.nan)


def _observe_percentile_n(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    import pandas as pd

    checked = [row for row in rows if not pd.isna(frame.at[row, "percentile_needs"])]
    if not checked:
        return "percentiles rest on enough requests", f"{NOT_APPLICABLE} (not a percentile)"
    expected = "; ".join(f"{frame.at[row, 'statistic']} from at least "
                         f"{show_count(frame.at[row, 'percentile_needs'])} requests"
                         for row in checked)
    found = "; ".join(
        f"{frame.at[row, 'statistic']} from "
        + ("an unrecorded number of requests" if frame.at[row, "percentile_n"] < 0
           else f"{show_count(frame.at[row, 'percentile_n'])} request"
           + ("" if frame.at[row, "percentile_n"] == 1 else "s")) for row in checked)
    return expected, found


PERCENTILE_N_SUFFICIENT = Rule(
    name="percentile_n_sufficient", traps=("T4",), applies_to="entry", effect=BLOCK_ENTRIES,
    summary="a percentile entry rests on enough requests for at least one to lie beyond it "
            "(n >= 1 / (1 - q)): p50 from 2, p90 from 10, p99 from 100; below that the "
            "'p99' is only the largest value seen. The entry's n_requests is the count, and "
            "an entry that does not record it is blocked",
    threshold=", ".join(f"{stat}: n_requests >= {n}"
                        for stat, n in PERCENTILE_MIN_REQUESTS.items()),
    threshold_source="the protocol (T4: n >= 1 / (1 - q))",
    check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
             column_A="percentile_n", column_B="percentile_needs", or_equal=True,
             ignore_row_if="either_value_is_missing",
             columns={"percentile_n": _percentile_n, "percentile_needs": _percentile_needs},
             observe=_observe_percentile_n))
