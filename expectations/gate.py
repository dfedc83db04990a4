"""The GX gate: protocol rules checked before any derived number is produced.

Each protocol rule is one named Great Expectations (GX 1.x) expectation. Rules are grouped
into three ExpectationSuites ("restarts", "windows", "measured_requests"); every rule runs
(GX catches per-expectation errors, so one broken rule never hides the others) and every
(subject, rule) pair becomes exactly one RuleResult row for the `validations` table.

Speed: a suite is validated ONCE over all its subjects (one pandas batch per suite) and the
verdict is split per subject using GX's `unexpected_index_list` (result_format COMPLETE).
Validating one batch per subject also works but costs ~0.1 s per subject, which grows with
every window of a concurrency ladder; three validations per call stay flat.

Scale: a sweep measures 10^5-10^6 requests, so nothing here loops over requests in
Python. GX's unexpected_index_list becomes one boolean mask per rule, each subject's rows
are numpy positions (one groupby per suite), and the "found" texts of the request rules are
built from per-subject counts of the offending values (_shown_counts); a subject is a
window or a restart, never a request, so there are few of them. The batch GX validates holds
only the columns the suite's expectations read (GX fingerprints the whole batch), and GX is
told not to build its unexpected_index_query (a string listing every unexpected row again).

GX itself is imported lazily: importing great_expectations takes seconds, and this module
is imported by code (DAG files, the warehouse) that must stay cheap to import.

Data Docs (optional, `docs_dir=`): the very results the rows come from are also stored in a
GX validation results store and rendered by `context.build_data_docs()` into a filesystem
site rooted at docs_dir (docs_dir/index.html). The suites and results live in file stores
under docs_dir/.gx/, so later calls with the same docs_dir add to the same index.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchledger import rules as R
from benchledger.rules import Rule, rules_of_suite

SUITES = ("restarts", "windows", "measured_requests")  # run_gate's suites; see also
# run_entry_gate ("entries") and run_comparison_gate ("comparisons").

# Rows are matched to subjects through this column, added by the _prepare_* functions.
_SUBJECT = "subject"
_IS_COMPLETED = "is_completed"  # requests: status == 'completed' (read by the found texts)
# GX map expectations skip nulls, so a NULL status/token_source/temperature would pass
# silently. Rules that must see every row check a copy where nulls become this marker.
# No angle brackets: Data Docs writes unexpected values into its HTML unescaped.
_NULL = "[null]"
_MAX_LISTED = 3

_REQUIRED_COLUMNS = {
    "restarts": ("restart_id", "status"),
    "windows": ("window_id", "submitted", "completed", "failed", "unresolved", "min_requests"),
    "requests": ("request_id", "window_id", "status", "token_source", "temperature",
                 "ttft_s", "e2e_s", "max_tokens", "prompt_tokens", "output_tokens",
                 "cached_tokens"),
    "entries": ("entry_id", "metric", "unit", "numerator", "population", "drain_status",
                "prompt_cache", "n_failed", "n_unresolved", "statistic", "value"),
    "comparisons": ("comparison_id", "a_config", "b_config", "a_restarts", "b_restarts",
                    "difference", "control_difference"),
}  # fmt: skip
# Columns a frame may lack (raw rows from before they were recorded): NULL, so the rules
# that read them find nothing to check there.
_OPTIONAL_COLUMNS = {
    "windows": ("token_count", "calibration_rel_error", "calibration_detail"),
    "requests": ("usage_output_tokens",),
    "entries": ("token_source",),
}
# The columns of the requests frame run_gate reads (callers may select just these).
REQUEST_COLUMNS: tuple[str, ...] = (*_REQUIRED_COLUMNS["requests"],
                                    *_OPTIONAL_COLUMNS["requests"])


@dataclass(frozen=True)
class RuleResult:
    suite: str  # the rule's suite (benchledger.rules: Rule.suite)
    subject: str  # the restart_id, window_id, entry_id or comparison_id it is about
    expectation: str  # the rule's name in the catalogue
    success: bool
    expected: str  # what the rule demands of this subject
    found: str  # what this subject shows

    @property
    def observed(self) -> str:
        """The one-line reading of the result, MLPerf-checker style."""
        return f"expected {self.expected}, found {self.found}"


def run_gate(
    restarts: pd.DataFrame,
    windows: pd.DataFrame,
    requests: pd.DataFrame,
    *,
    docs_dir: Path | None = None,
) -> list[RuleResult]:
    """Run every rule over one sweep run's rows; one RuleResult per (subject, rule).

    With docs_dir, the three validations are also rendered as GX Data Docs there.
    """
    _check_columns(restarts=restarts, windows=windows, requests=requests)
    frames = {
        "restarts": _prepare_restarts(restarts),
        "windows": _prepare_windows(windows),
        "measured_requests": _prepare_requests(requests),
    }
    # A window with no measured requests still gets its request-rule rows, so the
    # subjects come from the windows, plus any window_id only the requests mention.
    subjects = {
        "restarts": _unique(restarts["restart_id"]),
        "windows": _unique(windows["window_id"]),
        "measured_requests": _unique([*windows["window_id"],
                                      *_unique_column(requests["window_id"])]),
    }
    context = _ephemeral_context(docs_dir)
    docs = _DocsRun(context, "run_gate") if docs_dir is not None else None
    results: list[RuleResult] = []
    for suite in SUITES:
        gx_results = _validate_suite(context, suite, frames[suite], docs)
        rows_of = _rows_of(frames[suite])
        for rule in rules_of_suite(suite):
            results.extend(_split_by_subject(rule, gx_results[rule.name], frames[suite],
                                             subjects[suite], rows_of))
    if docs is not None:
        docs.build()
    return results


def run_entry_gate(entries: pd.DataFrame, *, docs_dir: Path | None = None) -> list[RuleResult]:
    """Run the entry rules over derived entries; one RuleResult per (entry_id, rule).

    With docs_dir, the validation is also rendered as GX Data Docs there.
    """
    _check_columns(entries=entries)
    return _run_one_suite("entries", _prepare_entries(entries), _unique(entries["entry_id"]),
                          docs_dir)


def run_comparison_gate(comparisons: pd.DataFrame) -> list[RuleResult]:
    """Run the comparison rules over A/B candidates; one RuleResult per (comparison, rule).

    One row per A/B: comparison_id, a, b, their effective configs (a_config, b_config;
    NULL when an arm's restarts disagree or did not report one), a_restarts and
    b_restarts (restart means available), difference (b - a) and control_difference
    (NULL without a measured A/A control).
    """
    _check_columns(comparisons=comparisons)
    return _run_one_suite("comparisons", _prepare_comparisons(comparisons),
                          _unique(comparisons["comparison_id"]), None)


def _run_one_suite(suite: str, frame: pd.DataFrame, subjects: list[Any],
                   docs_dir: Path | None) -> list[RuleResult]:
    context = _ephemeral_context(docs_dir)
    docs = _DocsRun(context, f"gate_{suite}") if docs_dir is not None else None
    gx_results = _validate_suite(context, suite, frame, docs)
    results: list[RuleResult] = []
    rows_of = _rows_of(frame)
    for rule in rules_of_suite(suite):
        results.extend(_split_by_subject(rule, gx_results[rule.name], frame, subjects,
                                         rows_of))
    if docs is not None:
        docs.build()  # after the split: it trims the stored row lists
    return results


# --- inputs ---------------------------------------------------------------------------


def _check_columns(**frames: pd.DataFrame) -> None:
    # A missing column is a caller bug, not a protocol failure: failing rows would blame
    # the measurement, so refuse loudly instead.
    for name, frame in frames.items():
        missing = [c for c in _REQUIRED_COLUMNS[name] if c not in frame.columns]
        if missing:
            raise ValueError(f"run_gate: {name} frame lacks columns {missing}")


def _base(frame: pd.DataFrame, subject_column: str, kind: str | None = None) -> pd.DataFrame:
    # A fresh RangeIndex makes GX's unexpected_index_list usable as row positions.
    out = frame.reset_index(drop=True).copy()
    out[_SUBJECT] = out[subject_column]
    for column in _OPTIONAL_COLUMNS.get(kind, ()):
        if column not in out.columns:
            out[column] = None
    return out


def _or_null(column: pd.Series) -> pd.Series:
    return column.astype(object).where(column.notna(), _NULL)


def _optional(frame: pd.DataFrame, *columns: str) -> None:
    """Evidence columns a caller may not have (no scrape, no clock): NULL = not checked."""
    for column in columns:
        if column not in frame.columns:
            frame[column] = None
        frame[column] = pd.to_numeric(frame[column], errors="coerce") if not column.endswith(
            "detail") else frame[column]


def _prepare_restarts(restarts: pd.DataFrame) -> pd.DataFrame:
    out = _base(restarts, "restart_id")
    out["status_or_null"] = _or_null(out["status"])
    _optional(out, "clock_ratio", "min_clock_ratio", "clock_detail")
    if "require_clock_check" not in out.columns:
        out["require_clock_check"] = None
    required = out["require_clock_check"].fillna(True).astype(bool)
    unchecked = out["clock_ratio"].isna() & out["min_clock_ratio"].notna()
    out["clock_ratio_checked"] = out["clock_ratio"].where(
        ~unchecked, pd.Series(-1.0, index=out.index).where(required))
    return out


def _prepare_windows(windows: pd.DataFrame) -> pd.DataFrame:
    out = _base(windows, "window_id", "windows")
    # GX compares two columns, not a column with a sum, so the sum becomes a column.
    out["accounted"] = out["completed"] + out["failed"] + out["unresolved"]
    _optional(out, "reconcile_tolerance", "generation_error", "prompt_error", "success_error",
              "generation_detail", "prompt_detail", "success_detail")
    out["calibration_check"] = _calibration_verdicts(out)
    return out


def _calibration_verdicts(out: pd.DataFrame) -> pd.Series:
    """Per window counted by the server's tokenizer: whether its calibration's relative
    error is within reconcile_tolerance; None for every other window (GX skips it)."""
    counted = _equals(out["token_count"], "server_tokenizer")
    error = _as_float(out["calibration_rel_error"])
    tolerance = _as_float(out["reconcile_tolerance"])
    with np.errstate(invalid="ignore"):
        verdict = np.select([np.isnan(error), np.isnan(tolerance), error <= tolerance],
                            ["no calibration", "no reconcile_tolerance",
                             "within reconcile_tolerance"], "above reconcile_tolerance")
    return pd.Series(verdict, index=out.index, dtype=object).where(counted)


def _prepare_requests(requests: pd.DataFrame) -> pd.DataFrame:
    out = _base(requests, "window_id", "requests")
    # A failed or unresolved request has no usage by nature; the rule is that every
    # completed one's tokens come from usage (its NULL elsewhere is skipped by GX).
    completed = out["status"] == "completed"
    out["completed_token_source"] = _or_null(out["token_source"]).where(completed)
    out["temperature_or_null"] = _or_null(out["temperature"])
    # Only completed requests have a meaningful TTFT/E2E pair; blanking the others lets
    # ignore_row_if="either_value_is_missing" skip them together with rows lacking a time.
    out["completed_ttft_s"] = out["ttft_s"].where(completed)
    out["completed_e2e_s"] = out["e2e_s"].where(completed)
    out[_IS_COMPLETED] = completed.to_numpy(dtype=bool, na_value=False)  # for the found texts
    # Usage is judged only where it is the token source: a request without usage is
    # token_source_is_usage's business, and a count it never had is not implausible.
    with_usage = out[_IS_COMPLETED] & _equals(out["token_source"], "usage")
    out["completed_usage_check"] = _usage_verdicts(out, with_usage)
    out["logprobs_usage_check"] = _logprobs_verdicts(out)
    return out


def _logprobs_verdicts(out: pd.DataFrame) -> pd.Series:
    """Per completed row counted from logprobs whose server also reported usage: 'agree'
    when both counts are equal, else 'disagree'; None elsewhere (GX skips it)."""
    output, usage = _as_float(out["output_tokens"]), _as_float(out["usage_output_tokens"])
    checked = (out[_IS_COMPLETED] & _equals(out["token_source"], "logprobs")
               & ~np.isnan(usage))
    verdict = np.where(output == usage, "agree", "disagree").astype(object)
    verdict[~checked] = None
    return pd.Series(verdict, index=out.index, dtype=object)


def _equals(column: pd.Series, value: str) -> np.ndarray:
    """column == value as a plain mask (NULL is not equal), for any string dtype."""
    return column.eq(value).to_numpy(dtype=bool, na_value=False)


# Why a usage report cannot be true, in the order they are checked; a row's verdict is the
# first that applies, or _PLAUSIBLE. Words, not "<"/">": Data Docs writes the unexpected
# values into its HTML unescaped.
_PLAUSIBLE = "plausible"
_USAGE_COUNTS = ("output_tokens", "max_tokens", "prompt_tokens", "cached_tokens")


def _usage_verdicts(out: pd.DataFrame, checked: np.ndarray) -> pd.Series:
    """Per row: _PLAUSIBLE, the first reason its usage cannot be true, or None where the
    rule does not apply (GX skips it). Whole columns at once: a run has 10^6 requests."""
    # cached_tokens is optional in the OpenAI usage object: NULL there breaks no check.
    output, limit, prompt, cached = (_as_float(out[c]) for c in _USAGE_COUNTS)
    faults = (
        ("output_tokens NULL", np.isnan(output)),
        ("output_tokens not an integer", _fractional(output)),
        ("output_tokens below 0", output < 0),
        ("max_tokens NULL", np.isnan(limit)),
        ("output_tokens above max_tokens", output > limit),
        ("prompt_tokens NULL", np.isnan(prompt)),
        ("prompt_tokens not an integer", _fractional(prompt)),
        ("prompt_tokens below 0", prompt < 0),
        (f"prompt_tokens above {R.MAX_PROMPT_TOKENS}", prompt > R.MAX_PROMPT_TOKENS),
        ("cached_tokens not an integer", _fractional(cached)),
        ("cached_tokens below 0", cached < 0),
        ("cached_tokens above prompt_tokens", cached > prompt),
    )
    # Integer codes, then one lookup: the texts are shared objects, never 10^6 new strings.
    texts = np.array([_PLAUSIBLE, *(text for text, _ in faults), None], dtype=object)
    codes = np.select([mask for _, mask in faults], np.arange(1, len(faults) + 1), default=0)
    codes[~checked] = len(texts) - 1
    return pd.Series(texts[codes], index=out.index, dtype=object)


def _as_float(column: pd.Series) -> np.ndarray:
    """A count column as float64 (NULL -> NaN), as Arrow hands nullable integers over
    anyway. Exact below 2**53, and every verdict still holds above it: a plausible count is
    at most max_tokens (32-bit) or MAX_PROMPT_TOKENS, and rounding never carries a larger
    integer below either."""
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _fractional(values: np.ndarray) -> np.ndarray:
    """Finite values that are not whole numbers (NaN, a NULL, is not fractional)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (values != np.floor(values))


def _prepare_entries(entries: pd.DataFrame) -> pd.DataFrame:
    out = _base(entries, "entry_id", "entries")
    # NULL (no window behind the entry, or derived before sources were named): not checked.
    out["token_source_check"] = out["token_source"].astype(object).where(
        out["token_source"].notna())
    log_metric = out["metric"].astype(str).str.startswith("server_log_")
    log_statistic = out["statistic"].astype(str).str.startswith("server_log_")
    # The delivered-rate rules are about delivered rates; server log values have their own.
    rate = (out["unit"] == "tok/s") & ~log_statistic
    out["server_log_check"] = (out["metric"].astype(str) + " / " + out["statistic"].astype(str)
                               ).where(log_metric | log_statistic)
    out.loc[log_metric & log_statistic, "server_log_check"] = (
        "server_log_* metric with a server_log_* statistic")
    latency = out["unit"] == "s"
    troubled = (out["n_failed"].fillna(0) + out["n_unresolved"].fillna(0)) > 0
    out["incomplete_rate_check"] = _or_null(out["population"]).where(
        rate & (out["drain_status"] == "incomplete"))
    out["latency_population_check"] = _or_null(out["population"]).where(latency & troubled)
    out["rate_numerator_check"] = _or_null(out["numerator"]).where(rate)
    out["prefill_rate_check"] = _or_null(out["prompt_cache"]).where(
        out["metric"] == "prefill_rate")
    _prepare_evidence(out, rate)
    return out


def _prepare_evidence(out: pd.DataFrame, rate: pd.Series) -> None:
    """The columns of the evidence rules. A column the caller did not give (an older
    frame) makes its rule not applicable; a NULL in a given column fails it."""
    if "evidence" in out.columns:
        out["evidence_or_null"] = _or_null(out["evidence"])
    else:
        out["evidence_or_null"] = None
    if "denominator" in out.columns:
        stated = pd.Series("stated", index=out.index, dtype=object)
        out["rate_denominator_check"] = stated.where(out["denominator"].notna(),
                                                     _NULL).where(rate)
    else:
        out["rate_denominator_check"] = None
    out["counts_check"] = _counts_verdicts(out)


_COUNTS = ("n_submitted", "n_completed", "n_failed", "n_unresolved")


def _counts_verdicts(out: pd.DataFrame) -> pd.Series:
    """'balanced' or not where all four request counts are recorded; None elsewhere."""
    if any(c not in out.columns for c in _COUNTS):
        return pd.Series(None, index=out.index, dtype=object)
    submitted, completed, failed, unresolved = (_as_float(out[c]) for c in _COUNTS)
    known = ~(np.isnan(submitted) | np.isnan(completed) | np.isnan(failed)
              | np.isnan(unresolved))
    verdict = np.where(submitted == completed + failed + unresolved, "balanced",
                       "unbalanced").astype(object)
    verdict[~known] = None
    return pd.Series(verdict, index=out.index, dtype=object)


def _prepare_comparisons(comparisons: pd.DataFrame) -> pd.DataFrame:
    out = _base(comparisons, "comparison_id")
    known = out["a_config"].notna() & out["b_config"].notna()
    out["effective_configs_identical"] = (known & (out["a_config"] == out["b_config"])).astype(
        bool)
    out["fewest_restarts"] = out[["a_restarts", "b_restarts"]].min(axis=1)
    out["abs_difference"] = pd.to_numeric(out["difference"], errors="coerce").abs()
    out["abs_control_difference"] = pd.to_numeric(out["control_difference"],
                                                  errors="coerce").abs()
    return out


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def _unique_column(column: pd.Series) -> list[Any]:
    """_unique(column) without a Python pass over 10^6 rows where that gives the same list:
    strings without NULLs are equal exactly when they are the same string."""
    if isinstance(column.dtype, pd.StringDtype) and not column.isna().any():
        return pd.unique(column).tolist()
    return _unique(column)


# --- GX -------------------------------------------------------------------------------


_DOCS_SITE = "gate"
_DOCS_STORES = ".gx"  # inside docs_dir: the suites and results the site is rendered from


def _ephemeral_context(docs_dir: Path | None = None) -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    if docs_dir is None:
        context = gx.get_context(mode="ephemeral")
    else:
        context = gx.get_context(mode="ephemeral", project_config=_docs_config(Path(docs_dir)))
    # GX 1.24 draws a tqdm "Calculating Metrics" bar on stderr for every validation
    # unless the context's progress_bars variable turns it off.
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def _docs_config(docs_dir: Path) -> Any:
    """An in-memory context, except for what Data Docs must find again in a later call.

    The site's index lists only results its source store still holds (and deletes pages
    whose result or suite is gone), so the expectations and validation results stores are
    files under docs_dir/.gx/; everything else (datasources, ...) stays in memory.
    """
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
    )

    root = docs_dir.resolve()  # the stores resolve relative paths against no root
    defaults = InMemoryStoreBackendDefaults()
    for store, folder in ((defaults.expectations_store_name, "expectations"),
                          (defaults.validation_results_store_name, "validations")):
        defaults.stores[store]["store_backend"] = {
            "class_name": "TupleFilesystemStoreBackend",
            "base_directory": str(root / _DOCS_STORES / folder),
        }
    site = {
        "class_name": "SiteBuilder",
        "show_how_to_buttons": False,  # GX tutorial links, not about this data
        "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                          "base_directory": str(root)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        # Our results are never profiling runs; skip that section's scan of the store.
        "site_section_builders": {"profiling": "None"},
    }
    return DataContextConfig(store_backend_defaults=defaults,
                             data_docs_sites={_DOCS_SITE: site}, analytics_enabled=False)


class _DocsRun:
    """One gate call's validation results, stored for and rendered into Data Docs."""

    def __init__(self, context: Any, run_name: str) -> None:
        import datetime

        from great_expectations.core.run_identifier import RunIdentifier

        self.context = context
        self.run_id = RunIdentifier(run_name=run_name,
                                    run_time=datetime.datetime.now(datetime.UTC))
        self.keys: list[Any] = []
        self.pending: list[tuple[str, str, Any]] = []

    def store(self, suite: str, batch_id: str, outcome: Any) -> None:
        """Queue one suite's result; it is written when build() runs, after the gate has
        split it into per-subject rows (which need every unexpected row)."""
        self.pending.append((suite, batch_id, outcome))

    def build(self) -> None:
        from great_expectations.data_context.types.resource_identifiers import (
            ExpectationSuiteIdentifier,
            ValidationResultIdentifier,
        )

        for suite, batch_id, outcome in self.pending:
            _trim_row_lists(outcome)
            suite_key = ExpectationSuiteIdentifier(name=suite)
            # The validation page shows the run's name and time from meta, as a
            # ValidationDefinition run would record them.
            outcome.meta["run_id"] = self.run_id
            outcome.meta["validation_time"] = self.run_id.run_time
            key = ValidationResultIdentifier(expectation_suite_identifier=suite_key,
                                             run_id=self.run_id, batch_identifier=batch_id)
            self.context.validation_results_store.store_validation_results(
                suite_validation_result=outcome, suite_validation_result_identifier=key,
                expectation_suite_identifier=suite_key)
            self.keys += [key, suite_key]
        self.pending.clear()
        # Only this call's pages are rendered; the index is rebuilt over every stored result.
        self.context.build_data_docs(site_names=[_DOCS_SITE], resource_identifiers=self.keys)


# Unexpected rows a stored result keeps per expectation (GX's own "partial" size). The
# complete lists served the per-subject split; at 10^6 requests they would make the Data
# Docs store tens of MB and its rendering seconds, and every result row with its counts
# is in the warehouse anyway (unexpected_count and percentages stay exact here).
_DOCS_ROWS_KEPT = 20


def _trim_row_lists(outcome: Any) -> None:
    for result in outcome.results:
        details = result.result or {}
        for key in ("unexpected_index_list", "unexpected_list"):
            if isinstance(details.get(key), list) and len(details[key]) > _DOCS_ROWS_KEPT:
                details[key] = details[key][:_DOCS_ROWS_KEPT]


def _build_suite(suite: str) -> Any:
    import great_expectations as gx

    expectations = [
        # meta carries the rule name so each GX result can be matched back to its rule.
        getattr(gx.expectations, rule.check.expectation)(
            **rule.check.kwargs, meta={"rule": rule.name}, description=_describe(rule))
        for rule in rules_of_suite(suite)
    ]
    return gx.ExpectationSuite(name=suite, expectations=expectations)


def _describe(rule: Rule) -> str:
    """What Data Docs shows for an expectation: the rule, its meaning and the GX check.

    Data Docs renders a description in place of GX's generic sentence, which would name
    neither the rule nor its meaning.
    """
    import great_expectations as gx

    kwargs = rule.check.kwargs
    columns = " vs ".join(str(kwargs[k]) for k in ("column", "column_A", "column_B")
                          if k in kwargs)
    gx_type = getattr(gx.expectations, rule.check.expectation).expectation_type
    traps = f" ({', '.join(rule.traps)})" if rule.traps else ""
    return f"{rule.name}: {rule.summary}{traps} [{gx_type} on {columns}]"


def _validate_suite(
    context: Any, suite: str, frame: pd.DataFrame, docs: _DocsRun | None = None
) -> dict[str, Any]:
    """Validate one suite over one whole-DataFrame batch; results keyed by rule name.

    With docs, the suite result is also stored for Data Docs (rendered by docs.build()).
    """
    datasource = context.data_sources.add_pandas(name=f"gate_{suite}")
    asset = datasource.add_dataframe_asset(name=suite)
    batch_definition = asset.add_batch_definition_whole_dataframe(name="whole")
    # A docs context keeps its suites on disk, so an earlier call may have added this one.
    add = context.suites.add_or_update if docs is not None else context.suites.add
    expectation_suite = add(_build_suite(suite))
    # GX hashes the whole batch to fingerprint it, so it gets only the columns the suite's
    # expectations read (same rows, same RangeIndex: unexpected indexes are still positions
    # in frame). A column the frame lacks is left for GX to report as the rule's error.
    batch = batch_definition.get_batch(batch_parameters={"dataframe": _checked_columns(
        suite, frame)})
    # COMPLETE (not the default SUMMARY) is what lists every unexpected row index. The
    # unexpected_index_query would repeat that list as one Python literal string: skipped.
    outcome = batch.validate(expectation_suite, result_format={
        "result_format": "COMPLETE", "return_unexpected_index_query": False})
    if docs is not None:
        docs.store(suite, batch.id, outcome)
    return {result.expectation_config.meta["rule"]: result for result in outcome.results}


def _checked_columns(suite: str, frame: pd.DataFrame) -> pd.DataFrame:
    read = _unique(rule.check.kwargs[key] for rule in rules_of_suite(suite)
                   for key in ("column", "column_A", "column_B") if key in rule.check.kwargs)
    return frame[[column for column in read if column in frame.columns]]


def _gx_error(result: Any) -> str | None:
    """The exception GX caught while evaluating an expectation, if any.

    GX 1.24 reports it in two shapes: a flat {"raised_exception": ...} dict, or (for
    metric failures such as a missing column) a dict keyed by metric id whose values are
    such flat dicts.
    """
    info = result.exception_info or {}
    candidates = [info, *(v for v in info.values() if isinstance(v, dict))]
    for candidate in candidates:
        if candidate.get("raised_exception"):
            return str(candidate.get("exception_message") or "unknown GX error")
    return None


# --- per-subject results ----------------------------------------------------------------


_NO_ROWS = np.empty(0, dtype=np.intp)


def _rows_of(frame: pd.DataFrame) -> dict[Any, np.ndarray]:
    """Each subject's row positions in frame, ascending (one groupby per suite)."""
    return {s: np.asarray(rows, dtype=np.intp)
            for s, rows in frame.groupby(_SUBJECT, sort=False).indices.items()}


def _unexpected_mask(index_list: Sequence[Any], n_rows: int) -> np.ndarray:
    """GX's unexpected_index_list (positions: prepared frames have a RangeIndex) as a mask."""
    mask = np.zeros(n_rows, dtype=bool)
    if len(index_list):
        positions = np.asarray(index_list, dtype=np.int64)
        mask[positions[(positions >= 0) & (positions < n_rows)]] = True
    return mask


def _split_by_subject(
    rule: Rule, result: Any, frame: pd.DataFrame, subjects: Sequence[Any],
    rows_of: Mapping[Any, np.ndarray] | None = None,
) -> list[RuleResult]:
    error = _gx_error(result)
    index_list = (result.result or {}).get("unexpected_index_list") or []
    if error is None and not result.success and not len(index_list):
        # Never let a failure GX could not attribute to rows turn into per-subject passes.
        error = "GX reported a failure without unexpected rows"
    unexpected = _unexpected_mask(index_list, len(frame))
    if rows_of is None:
        rows_of = _rows_of(frame)
    observe = _OBSERVE[rule.name]
    out = []
    for subject in subjects:
        rows = rows_of.get(subject, _NO_ROWS)
        bad = rows[unexpected[rows]]
        expected, found = observe(dict(rule.check.kwargs), frame, rows, bad)
        if error is not None:
            found = f"GX error: {error}"
        out.append(RuleResult(rule.suite, str(subject), rule.name,
                              error is None and not len(bad), expected, found))
    return out


# --- observed strings ("expected <...>, found <...>", MLPerf-checker style) --------------

Kw = dict[str, Any]  # an expectation's arguments (the catalogue's GxCheck.kwargs)
Rows = np.ndarray  # row positions in a prepared frame (intp, ascending)
Seen = tuple[str, str]  # (expected, found)
Observer = Callable[[Kw, pd.DataFrame, Rows, Rows], Seen]


def _show(value: Any) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "NULL"
    return repr(value) if isinstance(value, str) else str(value)


def _join(values: Iterable[Any]) -> str:
    # Subjects are normally one row; a duplicated id shows every row instead of hiding one.
    return "; ".join(_show(v) for v in values)


def _summarise(values: Iterable[Any]) -> str:
    """'missing' for one distinct value, else "'missing' (2), NULL (1)", most common first."""
    return _listed(Counter(_show(v) for v in values))


def _listed(shown: Counter[str]) -> str:
    """A Counter of shown values (keys in order of first occurrence) as _summarise says it;
    most_common() keeps that order among equal counts."""
    counts = shown.most_common()
    if len(counts) == 1:
        return counts[0][0]
    listed = ", ".join(f"{value} ({n})" for value, n in counts[:_MAX_LISTED])
    return listed + (", ..." if len(counts) > _MAX_LISTED else "")


def _summarise_rows(column: pd.Series, rows: Rows) -> str:
    """_summarise(column.iloc[rows]), counted per distinct value instead of per row."""
    values = column.iloc[rows]
    shown = _shown_counts(values)
    return _summarise(values) if shown is None else _listed(shown)


def _shown_counts(values: pd.Series) -> Counter[str] | None:
    """Counter(_show(v) for v in values) from one factorize, or None for a column whose
    equal values might show differently (mixed objects, extension types): the caller then
    counts row by row.

    Exact where used: float64 values are told apart by their bits (0.0 and -0.0 show
    differently but compare equal; every NaN shows NULL), str values by equality.
    """
    dtype = values.dtype
    if isinstance(dtype, np.dtype) and dtype == np.float64:
        data = values.to_numpy()
        missing = np.isnan(data)
        keys: Any = data.view(np.int64)
    elif isinstance(dtype, np.dtype) and dtype.kind in "iub":
        missing = np.zeros(len(values), dtype=bool)
        keys = values.to_numpy()
    elif isinstance(dtype, pd.StringDtype) or (
            dtype == np.dtype(object) and set(map(type, values.dropna())) <= {str}):
        missing = values.isna().to_numpy()
        keys = values
    else:
        return None
    codes = np.where(missing, -1, pd.factorize(keys)[0])
    _, first, counts = np.unique(codes, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")  # distinct values by first occurrence
    shown: Counter[str] = Counter()
    # .tolist() boxes values as iterating the Series does (the row-by-row reading).
    for value, n in zip(values.iloc[first[order]].tolist(), counts[order].tolist(),
                        strict=True):
        shown[_show(value)] += n
    return shown


def _observe_status(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    return f"status in {kw['value_set']}", _join(frame.loc[rows, "status"])


def _observe_accounting(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    found = []
    for row in rows:
        r = frame.loc[row]
        sign = "!=" if row in bad else "=="
        found.append(
            f"{_show(r['submitted'])} {sign} {_show(r['completed'])} + {_show(r['failed'])}"
            f" + {_show(r['unresolved'])}"
        )
    return "submitted == completed + failed + unresolved", "; ".join(found)


def _observe_min(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    # The required n differs per window (T4: 15 speculative, 5 otherwise), so name it.
    return (
        f"completed >= {_join(frame.loc[rows, 'min_requests'])}",
        _join(frame.loc[rows, "completed"]),
    )


def _share(frame: pd.DataFrame, column: str, rows: Rows, bad: Rows) -> str:
    """Like "15 of 15 rows 'missing'": the offending values, or all values if none offend."""
    if not len(rows):
        return "0 of 0 rows (no measured requests)"
    shown = bad if len(bad) else rows
    return f"{len(shown)} of {len(rows)} rows {_summarise_rows(frame[column], shown)}"


def _observe_token_source(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    completed = rows[frame[_IS_COMPLETED].to_numpy()[rows]]
    found = _share(frame, "token_source", completed, bad).replace(" rows ", " completed rows ")
    return f"token_source in {kw['value_set']} on completed requests", found


def _observe_temperature(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    expected = " or ".join(f"temperature == {v}" for v in kw["value_set"])
    return expected, _share(frame, "temperature", rows, bad)


def _observe_ttft(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    # The denominator is the rows the rule could check, not every measured request.
    checked = int((frame[kw["column_A"]].iloc[rows].notna().to_numpy()
                   & frame[kw["column_B"]].iloc[rows].notna().to_numpy()).sum())
    found = f"{len(bad)} of {checked} completed rows with ttft_s > e2e_s"
    if len(bad):
        listed = ", ".join(
            f"{frame.at[row, 'request_id']} (ttft_s {_show(frame.at[row, 'ttft_s'])},"
            f" e2e_s {_show(frame.at[row, 'e2e_s'])})"
            for row in bad[:_MAX_LISTED]
        )
        found += f": {listed}" + (", ..." if len(bad) > _MAX_LISTED else "")
    return "ttft_s <= e2e_s on completed requests", found


_COUNT_NAME = re.compile(r"\b(?:output|max|prompt|cached)_tokens\b(?! NULL)")


def _observe_usage(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    """How many usage reports were judged, why the bad ones cannot be true (per reason),
    and the first few offending requests with their values."""
    verdicts = frame[kw["column"]]
    checked = int(verdicts.iloc[rows].notna().to_numpy().sum())
    found = f"{len(bad)} of {checked} completed rows with usage implausible"
    if len(bad):
        reasons = verdicts.iloc[bad].value_counts(sort=False)
        found += ": " + ", ".join(f"{reason} ({n})" for reason, n in reasons.items())
        listed = ", ".join(
            f"{frame.at[row, 'request_id']} ({_usage_detail(frame, row, kw['column'])})"
            for row in bad[:_MAX_LISTED])
        found += f"; {listed}" + (", ..." if len(bad) > _MAX_LISTED else "")
    return (f"0 <= output_tokens <= max_tokens, 0 <= prompt_tokens <= {R.MAX_PROMPT_TOKENS} "
            "and 0 <= cached_tokens <= prompt_tokens on completed requests with usage", found)


def _usage_detail(frame: pd.DataFrame, row: int, column: str) -> str:
    """A row's verdict with its values: 'output_tokens 1000000000 above max_tokens 8'."""
    return _COUNT_NAME.sub(lambda m: f"{m[0]} {_show_count(frame.at[row, m[0]])}",
                           frame.at[row, column])


def _show_count(value: Any) -> str:
    # Integer counts come as float64 when the column has NULLs: 21.0 reads as 21.
    if isinstance(value, float | np.floating) and float(value).is_integer() \
            and abs(value) < 2**53:
        return str(int(value))
    return _show(value)


def _observe_check(label: str) -> Observer:
    """For the entry rules: the labelled value where the rule applies."""

    def observe(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
        column = kw["column"]
        applicable = [row for row in rows if frame.at[row, column] is not None
                      and not (isinstance(frame.at[row, column], float)
                               and pd.isna(frame.at[row, column]))]
        values = [None if v == _NULL else v for v in frame.loc[applicable, column]]
        found = _join(values) if applicable else "rule not applicable"
        return f"{label} in {kw['value_set']}", found

    return observe


def _observe_reconcile(prefix: str, counter: str) -> Observer:
    def observe(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
        details = [frame.at[row, f"{prefix}_detail"] for row in rows]
        found = "; ".join(str(d) for d in details if isinstance(d, str)) or "not reconciled"
        tolerance = _join(frame.loc[rows, "reconcile_tolerance"])
        return f"{counter} delta within {tolerance} (relative) of the client's count", found

    return observe


def _observe_calibration(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    tolerance = _join(frame.loc[rows, "reconcile_tolerance"])
    expected = (f"the server tokenizer's counts within {tolerance} (relative) of usage on "
                "the calibration requests")
    checked = [row for row in rows if isinstance(frame.at[row, kw["column"]], str)]
    if not checked:
        counts = _join(frame.loc[rows, "token_count"]) if len(rows) else "NULL"
        return expected, f"rule not applicable (token_count {counts})"
    found = "; ".join(f"{frame.at[row, kw['column']]}: "
                      f"{_detail(frame.at[row, 'calibration_detail'])}" for row in checked)
    return expected, found


def _detail(value: Any) -> str:
    """A sentence the pipeline wrote (shown as it is), or 'no detail'."""
    return value if isinstance(value, str) and value else "no detail"


def _observe_logprobs(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    """How many logprob counts could be held against usage, and the first that disagree."""
    checked = int(frame[kw["column"]].iloc[rows].notna().to_numpy().sum())
    found = f"{len(bad)} of {checked} completed rows counted from logprobs with usage disagree"
    if len(bad):
        listed = ", ".join(
            f"{frame.at[row, 'request_id']} (logprobs {_show_count(frame.at[row, 'output_tokens'])}"
            f", usage {_show_count(frame.at[row, 'usage_output_tokens'])})"
            for row in bad[:_MAX_LISTED])
        found += f": {listed}" + (", ..." if len(bad) > _MAX_LISTED else "")
    return ("output_tokens (logprobs) == usage.completion_tokens on completed requests that "
            "have both"), found


def _observe_clock(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    details = [frame.at[row, "clock_detail"] for row in rows]
    found = "; ".join(str(d) for d in details if isinstance(d, str)) or "no clock samples"
    return (f"SM clock under load >= {_join(frame.loc[rows, 'min_clock_ratio'])} of max",
            found)


def _observe_counts(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    checked = [row for row in rows if isinstance(frame.at[row, kw["column"]], str)]
    found = "; ".join(f"{_show_count(frame.at[row, 'n_submitted'])} "
                      f"{'!=' if row in bad else '=='} "
                      f"{_show_count(frame.at[row, 'n_completed'])} + "
                      f"{_show_count(frame.at[row, 'n_failed'])} + "
                      f"{_show_count(frame.at[row, 'n_unresolved'])}" for row in checked)
    return ("n_submitted == n_completed + n_failed + n_unresolved where all are recorded",
            found or "rule not applicable (counts not recorded)")


def _observe_value(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    found = "no value: no window behind it passed every rule" if len(bad) else _join(
        frame.loc[rows, "value"])
    return "a value from windows that passed every rule", found


def _observe_configs(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    found = "; ".join(
        f"{frame.at[row, 'a']} {_short(frame.at[row, 'a_config'])}, "
        f"{frame.at[row, 'b']} {_short(frame.at[row, 'b_config'])}"
        + (" (identical)" if row in bad else "") for row in rows)
    return "arms with different effective configs", found or "rule not applicable"


def _short(config: Any) -> str:
    return "unknown" if config is None or (isinstance(config, float) and pd.isna(config)) \
        else str(config)[:12]


def _observe_restarts(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    found = "; ".join(f"{frame.at[row, 'a']} {frame.at[row, 'a_restarts']}, "
                      f"{frame.at[row, 'b']} {frame.at[row, 'b_restarts']}" for row in rows)
    return f"restarts per arm >= {kw['min_value']}", found or "rule not applicable"


def _observe_control(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    checked = [row for row in rows if frame.loc[row, [kw["column_A"], kw["column_B"]]]
               .notna().all()]
    found = "; ".join(f"|{_show(frame.at[row, 'difference'])}| vs "
                      f"|{_show(frame.at[row, 'control_difference'])}|" for row in checked)
    return ("|difference| > |A/A control difference|",
            found or "rule not applicable (no control difference measured)")


_OBSERVE: dict[str, Observer] = {
    # The family's own counter (vLLM, SGLang, llama.cpp, TGI name them differently); the
    # found text names the one read.
    R.GENERATION_TOKENS_RECONCILE.name: _observe_reconcile(
        "generation", "the server's generation-token counter"),
    R.PROMPT_TOKENS_RECONCILE.name: _observe_reconcile(
        "prompt", "the server's prompt-token counter"),
    R.FINISHED_REQUESTS_RECONCILE.name: _observe_reconcile(
        "success", "the server's finished-request counter"),
    R.CLOCK_UNDER_LOAD.name: _observe_clock,
    R.TOKENIZER_CALIBRATED.name: _observe_calibration,
    R.LOGPROBS_MATCH_USAGE.name: _observe_logprobs,
    R.ENTRY_TOKEN_SOURCE_SINGLE.name: _observe_check("token_source"),
    R.ENTRY_HAS_VALIDATED_VALUE.name: _observe_value,
    R.INCOMPLETE_RATE_LABELLED.name: _observe_check("population"),
    R.LATENCY_POPULATION_LABELLED.name: _observe_check("population"),
    R.RATE_NUMERATOR_LABELLED.name: _observe_check("numerator"),
    R.PREFILL_RATE_COLD_PROMPTS.name: _observe_check("prompt_cache"),
    R.EVIDENCE_LABELLED.name: _observe_check("evidence"),
    R.RATE_DENOMINATOR_STATED.name: _observe_check("denominator"),
    R.REQUEST_COUNTS_BALANCE.name: _observe_counts,
    R.SERVER_LOG_KEPT_APART.name: _observe_check("metric / statistic"),
    R.RESTART_HEALTHY.name: _observe_status,
    R.ACCOUNTING_BALANCES.name: _observe_accounting,
    R.N_AT_LEAST_MIN.name: _observe_min,
    R.TOKEN_SOURCE_IS_USAGE.name: _observe_token_source,
    R.TEMPERATURE_IS_ZERO.name: _observe_temperature,
    R.TTFT_NOT_ABOVE_E2E.name: _observe_ttft,
    R.USAGE_PLAUSIBLE.name: _observe_usage,
    R.AB_ARMS_DIFFER.name: _observe_configs,
    R.AB_RESTARTS_REPLICATED.name: _observe_restarts,
    R.AB_BEYOND_CONTROL.name: _observe_control,
}
