"""The GX gate: the catalogue's GX checks run over a run's rows, one result per subject.

Each GX rule of the catalogue (benchledger.rules) is one named Great Expectations (GX 1.x)
expectation; the rules of a suite form one ExpectationSuite. Every rule runs (GX catches
per-expectation errors, so one broken rule never hides the others) and every (subject,
rule) pair becomes exactly one RuleResult row for the `validations` table. A rule declares
what it checks (the columns it reads, their builders, its expected and found texts); this
module is the runtime: it prepares each suite's frame as the catalogue declares it,
validates it, and splits each verdict per subject.

Speed: a suite is validated ONCE over all its subjects (one pandas batch per suite) and the
verdict is split per subject using GX's `unexpected_index_list` (result_format COMPLETE);
one batch per subject would cost ~0.1 s per subject, growing with every window of a
concurrency ladder. Scale: a sweep measures 10^5-10^6 requests, so nothing loops over
requests in Python. The unexpected_index_list becomes one boolean mask per rule, each
subject's rows are numpy positions (one groupby per suite), and a subject is a window or a
restart, never a request. The batch GX validates holds only the columns the suite's
expectations read (GX fingerprints the whole batch), and GX is told not to build its
unexpected_index_query (a string listing every unexpected row again). GX itself is
imported lazily: importing great_expectations takes seconds.

Data Docs (optional, `docs_dir=`): the very results the rows come from are also stored in a
GX validation results store and rendered by `context.build_data_docs()` into a filesystem
site rooted at docs_dir (docs_dir/index.html). The suites and results live in file stores
under docs_dir/.gx/, so later calls with the same docs_dir add to the same index.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchledger.rules import SUITE_FRAMES, GxCheck, Rule, rules_of_suite
from benchledger.rules.frame import numbers

SUITES = ("restarts", "windows", "measured_requests")  # run_gate's suites; see also
# run_entry_gate ("entries") and run_comparison_gate ("comparisons").

# Rows are matched to subjects through this column, which prepare() adds.
_SUBJECT = "subject"
# The columns of the requests frame run_gate reads (callers may select just these).
REQUEST_COLUMNS: tuple[str, ...] = SUITE_FRAMES["measured_requests"].inputs


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
    frames = dict(zip(SUITES, (restarts, windows, requests), strict=True))
    _check_columns(frames)
    # A window with no measured requests still gets its request-rule rows, so the
    # subjects come from the windows, plus any window_id only the requests mention.
    subjects = {
        "restarts": _unique(restarts["restart_id"]),
        "windows": _unique(windows["window_id"]),
        "measured_requests": _unique([*windows["window_id"],
                                      *_unique_column(requests["window_id"])]),
    }
    return _run_suites({suite: (prepare(suite, frames[suite]), subjects[suite])
                        for suite in SUITES}, docs_dir, "run_gate")


def run_entry_gate(entries: pd.DataFrame, *, docs_dir: Path | None = None) -> list[RuleResult]:
    """Run the entry rules over derived entries; one RuleResult per (entry_id, rule).

    With docs_dir, the validation is also rendered as GX Data Docs there.
    """
    return _run_one_suite("entries", entries, docs_dir)


def run_comparison_gate(comparisons: pd.DataFrame) -> list[RuleResult]:
    """Run the comparison rules over A/B candidates; one RuleResult per (comparison, rule).
    The frame has one row per A/B, as benchledger.rules.comparisons describes it."""
    return _run_one_suite("comparisons", comparisons, None)


def _run_one_suite(suite: str, frame: pd.DataFrame, docs_dir: Path | None) -> list[RuleResult]:
    _check_columns({suite: frame})
    subjects = _unique(frame[SUITE_FRAMES[suite].subject])
    return _run_suites({suite: (prepare(suite, frame), subjects)}, docs_dir, f"gate_{suite}")


def _run_suites(suites: Mapping[str, tuple[pd.DataFrame, list[Any]]], docs_dir: Path | None,
                run_name: str) -> list[RuleResult]:
    """Validate each prepared frame with its suite; its results split per subject."""
    context = _ephemeral_context(docs_dir)
    docs = _DocsRun(context, run_name) if docs_dir is not None else None
    results: list[RuleResult] = []
    for suite, (frame, subjects) in suites.items():
        gx_results = _validate_suite(context, suite, frame, docs)
        rows_of = _rows_of(frame)
        for rule, check in _gx_rules(suite):
            results.extend(_split_by_subject(rule, check, gx_results[rule.name], frame,
                                             subjects, rows_of))
    if docs is not None:
        docs.build()  # after the split: it trims the stored row lists
    return results


# --- inputs ---------------------------------------------------------------------------


def _check_columns(frames: Mapping[str, pd.DataFrame]) -> None:
    # A missing column is a caller bug, not a protocol failure: failing rows would blame
    # the measurement, so refuse loudly instead.
    for suite, frame in frames.items():
        declared = SUITE_FRAMES[suite]
        missing = [c for c in declared.required if c not in frame.columns]
        if missing:
            raise ValueError(f"run_gate: {declared.frame} frame lacks columns {missing}")


def prepare(suite: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The frame GX validates for suite, as its SuiteFrame declares it: the caller's columns
    with the subject, the optional and numeric columns (NULL where absent), the suite's own
    columns and, after them, the columns each of its rules builds."""
    declared = SUITE_FRAMES[suite]
    # A fresh RangeIndex makes GX's unexpected_index_list usable as row positions.
    out = frame.reset_index(drop=True).copy()
    out[_SUBJECT] = out[declared.subject]
    for column in (*declared.optional, *declared.numeric):
        if column not in out.columns:
            out[column] = None
    for column in declared.numeric:
        out[column] = numbers(out[column])
    for name, build in declared.columns.items():
        out[name] = build(out)
    for _, check in _gx_rules(suite):
        for name, build in check.columns.items():
            out[name] = build(out)
    return out


def _gx_rules(suite: str) -> list[tuple[Rule, GxCheck]]:
    """The suite's rules with their checks (every rule of a GX suite has a GxCheck)."""
    return [(rule, rule.check) for rule in rules_of_suite(suite)
            if isinstance(rule.check, GxCheck)]


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def _unique_column(column: pd.Series) -> list[Any]:
    """_unique(column) without a Python pass over 10^6 rows where that gives the same list:
    strings without NULLs are equal exactly when they are the same string."""
    if isinstance(column.dtype, pd.StringDtype) and not column.isna().any():
        return pd.unique(column).tolist()
    return _unique(column)


# --- GX -------------------------------------------------------------------------------


# GX logs at INFO while it imports: a line for each function its docs decorator skips and
# each metric declared twice, which Airflow's logging writes into the task log (214 of the
# 758 lines of an 8-restart sweep's run log). Quieted to warnings before the first import.
_GX_IMPORT_LOGGERS = ("great_expectations._docs_decorators",
                      "great_expectations.expectations.registry")


def import_gx() -> Any:
    """`import great_expectations`, without its import-time INFO lines."""
    for name in _GX_IMPORT_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    import great_expectations

    return great_expectations


_DOCS_SITE = "gate"
_DOCS_STORES = ".gx"  # inside docs_dir: the suites and results the site is rendered from


def _ephemeral_context(docs_dir: Path | None = None) -> Any:
    gx = import_gx()
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
        getattr(gx.expectations, check.expectation)(
            **check.kwargs, meta={"rule": rule.name}, description=_describe(rule, check))
        for rule, check in _gx_rules(suite)
    ]
    return gx.ExpectationSuite(name=suite, expectations=expectations)


def _describe(rule: Rule, check: GxCheck) -> str:
    """What Data Docs shows for an expectation: the rule, its meaning and the GX check.

    Data Docs renders a description in place of GX's generic sentence, which would name
    neither the rule nor its meaning.
    """
    import great_expectations as gx

    gx_type = getattr(gx.expectations, check.expectation).expectation_type
    traps = f" ({', '.join(rule.traps)})" if rule.traps else ""
    return f"{rule.name}: {rule.summary}{traps} [{gx_type} on {' vs '.join(check.reads)}]"


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
    read = _unique(column for _, check in _gx_rules(suite) for column in check.reads)
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
    rule: Rule, check: GxCheck, result: Any, frame: pd.DataFrame, subjects: Sequence[Any],
    rows_of: Mapping[Any, np.ndarray],
) -> list[RuleResult]:
    error = _gx_error(result)
    index_list = (result.result or {}).get("unexpected_index_list") or []
    if error is None and not result.success and not len(index_list):
        # Never let a failure GX could not attribute to rows turn into per-subject passes.
        error = "GX reported a failure without unexpected rows"
    unexpected = _unexpected_mask(index_list, len(frame))
    out = []
    for subject in subjects:
        rows = rows_of.get(subject, _NO_ROWS)
        bad = rows[unexpected[rows]]
        expected, found = check.observe(check.kwargs, frame, rows, bad)
        if error is not None:
            found = f"GX error: {error}"
        out.append(RuleResult(rule.suite, str(subject), rule.name,
                              error is None and not len(bad), expected, found))
    return out
