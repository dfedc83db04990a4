"""The GX gate: protocol rules checked before any derived number is produced.

Each protocol rule is one named Great Expectations (GX 1.x) expectation. Rules are grouped
into three ExpectationSuites ("restarts", "windows", "measured_requests"); every rule runs
(GX catches per-expectation errors, so one broken rule never hides the others) and every
(subject, rule) pair becomes exactly one RuleResult row for the `validations` table.

Speed: a suite is validated ONCE over all its subjects (one pandas batch per suite) and the
verdict is split per subject using GX's `unexpected_index_list` (result_format COMPLETE).
Validating one batch per subject also works but costs ~0.1 s per subject, which grows with
every window of a concurrency ladder; three validations per call stay flat.

GX itself is imported lazily: importing great_expectations takes seconds, and this module
is imported by code (DAG files, the warehouse) that must stay cheap to import.

Data Docs (optional, `docs_dir=`): the very results the rows come from are also stored in a
GX validation results store and rendered by `context.build_data_docs()` into a filesystem
site rooted at docs_dir (docs_dir/index.html). The suites and results live in file stores
under docs_dir/.gx/, so later calls with the same docs_dir add to the same index.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

SUITES = ("restarts", "windows", "measured_requests")  # run_gate; run_entry_gate: "entries"

# Rows are matched to subjects through this column, added by the _prepare_* functions.
_SUBJECT = "subject"
# GX map expectations skip nulls, so a NULL status/token_source/temperature would pass
# silently. Rules that must see every row check a copy where nulls become this marker.
# No angle brackets: Data Docs writes unexpected values into its HTML unescaped.
_NULL = "[null]"
_MAX_LISTED = 3

# The protocol rule -> GX expectation table. Columns named *_or_null, accounted and
# completed_* are computed by the _prepare_* functions below (see there for why).
# suite, rule, GX 1.x expectation (gx.expectations.<name>), its arguments
_EXPECTATIONS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("restarts", "restart_healthy", "ExpectColumnValuesToBeInSet",
     {"column": "status_or_null", "value_set": ["ok", "external"]}),
    ("windows", "accounting_balances", "ExpectColumnPairValuesToBeEqual",
     {"column_A": "submitted", "column_B": "accounted", "ignore_row_if": "neither"}),
    ("windows", "n_at_least_min", "ExpectColumnPairValuesAToBeGreaterThanB",
     {"column_A": "completed", "column_B": "min_requests", "or_equal": True,
      "ignore_row_if": "neither"}),
    # Server counter delta vs client usage: relative error within the sweep's tolerance.
    # Windows without the counter (or without a tolerance) have NULL there and are skipped.
    ("windows", "generation_tokens_reconcile", "ExpectColumnPairValuesAToBeGreaterThanB",
     {"column_A": "reconcile_tolerance", "column_B": "generation_error",
      "or_equal": True, "ignore_row_if": "either_value_is_missing"}),
    ("windows", "prompt_tokens_reconcile", "ExpectColumnPairValuesAToBeGreaterThanB",
     {"column_A": "reconcile_tolerance", "column_B": "prompt_error",
      "or_equal": True, "ignore_row_if": "either_value_is_missing"}),
    ("windows", "finished_requests_reconcile", "ExpectColumnPairValuesAToBeGreaterThanB",
     {"column_A": "reconcile_tolerance", "column_B": "success_error",
      "or_equal": True, "ignore_row_if": "either_value_is_missing"}),
    # SM clock under load as a fraction of max; an unreadable clock is -1 when the sweep
    # requires a check (fails) and NULL when it does not (skipped, and labelled).
    ("restarts", "clock_under_load", "ExpectColumnPairValuesAToBeGreaterThanB",
     {"column_A": "clock_ratio_checked", "column_B": "min_clock_ratio", "or_equal": True,
      "ignore_row_if": "either_value_is_missing"}),
    ("measured_requests", "token_source_is_usage", "ExpectColumnValuesToBeInSet",
     {"column": "completed_token_source", "value_set": ["usage"]}),
    ("measured_requests", "temperature_is_zero", "ExpectColumnValuesToBeInSet",
     {"column": "temperature_or_null", "value_set": [0.0]}),
    ("measured_requests", "ttft_not_above_e2e", "ExpectColumnPairValuesAToBeGreaterThanB",
     {"column_A": "completed_e2e_s", "column_B": "completed_ttft_s", "or_equal": True,
      "ignore_row_if": "either_value_is_missing"}),
    # Derived entries, checked before anything is published. Each *_check column holds the
    # labelled value where the rule applies and NULL elsewhere (GX skips NULLs there).
    ("entries", "incomplete_rate_labelled", "ExpectColumnValuesToBeInSet",
     {"column": "incomplete_rate_check", "value_set": ["completed_only"]}),
    ("entries", "latency_population_labelled", "ExpectColumnValuesToBeInSet",
     {"column": "latency_population_check", "value_set": ["completed_only"]}),
    ("entries", "rate_numerator_labelled", "ExpectColumnValuesToBeInSet",
     {"column": "rate_numerator_check",
      "value_set": ["output_tokens", "input_plus_output_tokens", "prompt_tokens"]}),
    ("entries", "prefill_rate_cold_prompts", "ExpectColumnValuesToBeInSet",
     {"column": "prefill_rate_check", "value_set": ["cold"]}),
    ("entries", "server_log_kept_apart", "ExpectColumnValuesToBeInSet",
     {"column": "server_log_check", "value_set": ["server_log_* metric with a server_log_* "
                                                  "statistic"]}),
)  # fmt: skip

RULES: dict[str, str] = {
    "restart_healthy": "the server restart ended ok (or is an external server): status in "
    "{'ok', 'external'}",
    "accounting_balances": "the window accounts for every request: "
    "submitted == completed + failed + unresolved (T14)",
    "n_at_least_min": "the window completed at least the n the protocol requires (T4)",
    "generation_tokens_reconcile": "the server's vllm:generation_tokens_total delta over the "
    "window matches the delivered usage within the tolerance (T1, T3)",
    "prompt_tokens_reconcile": "the server's vllm:prompt_tokens_total delta matches the "
    "prompt tokens in usage within the tolerance",
    "finished_requests_reconcile": "the server's vllm:request_success_total delta matches "
    "the completed requests within the tolerance",
    "clock_under_load": "the restart's GPUs ran at >= min_clock_ratio of their max SM clock "
    "under load; an unreadable clock fails unless require_clock_check = false (T10)",
    "token_source_is_usage": "every completed measured request's output tokens come from "
    "server usage, never from chunk counts (T1)",
    "temperature_is_zero": "every measured request ran at temperature 0 (T9)",
    "ttft_not_above_e2e": "for completed requests with both times, TTFT <= E2E latency",
    "incomplete_rate_labelled": "a rate from a window with unresolved requests (drain "
    "incomplete) is labelled population = 'completed_only' (T14)",
    "latency_population_labelled": "a latency from windows where requests failed or stayed "
    "unresolved is labelled population = 'completed_only' (T14)",
    "rate_numerator_labelled": "every rate names its numerator: output_tokens, "
    "input_plus_output_tokens or prompt_tokens (T12)",
    "prefill_rate_cold_prompts": "a prefill rate comes from cold prompts only; warm prompts "
    "measure the prefix cache (T9, T15)",
    "server_log_kept_apart": "server log values (peak, mean) stay under server_log_* metric "
    "names and are never labelled as a delivered rate (T2)",
}

_REQUIRED_COLUMNS = {
    "restarts": ("restart_id", "status"),
    "windows": ("window_id", "submitted", "completed", "failed", "unresolved", "min_requests"),
    "requests": ("request_id", "window_id", "status", "token_source", "temperature",
                 "ttft_s", "e2e_s"),
    "entries": ("entry_id", "metric", "unit", "numerator", "population", "drain_status",
                "prompt_cache", "n_failed", "n_unresolved", "statistic"),
}  # fmt: skip


@dataclass(frozen=True)
class RuleResult:
    suite: str  # "restarts" | "windows" | "measured_requests"
    subject: str  # the restart_id or window_id the result is about
    expectation: str  # the rule name (a key of RULES)
    success: bool
    observed: str  # "expected <...>, found <...>"


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
        "measured_requests": _unique([*windows["window_id"], *requests["window_id"]]),
    }
    context = _ephemeral_context(docs_dir)
    docs = _DocsRun(context, "run_gate") if docs_dir is not None else None
    results: list[RuleResult] = []
    for suite in SUITES:
        gx_results = _validate_suite(context, suite, frames[suite], docs)
        for _, rule, _, kwargs in _rules_of(suite):
            results.extend(
                _split_by_subject(suite, rule, kwargs, gx_results[rule], frames[suite],
                                  subjects[suite])
            )  # fmt: skip
    if docs is not None:
        docs.build()
    return results


def run_entry_gate(entries: pd.DataFrame, *, docs_dir: Path | None = None) -> list[RuleResult]:
    """Run the entry rules over derived entries; one RuleResult per (entry_id, rule).

    With docs_dir, the validation is also rendered as GX Data Docs there.
    """
    _check_columns(entries=entries)
    frame = _prepare_entries(entries)
    context = _ephemeral_context(docs_dir)
    docs = _DocsRun(context, "run_entry_gate") if docs_dir is not None else None
    gx_results = _validate_suite(context, "entries", frame, docs)
    if docs is not None:
        docs.build()
    subjects = _unique(entries["entry_id"])
    results: list[RuleResult] = []
    for _, rule, _, kwargs in _rules_of("entries"):
        results.extend(_split_by_subject("entries", rule, kwargs, gx_results[rule], frame,
                                         subjects))
    return results


def to_records(results: Iterable[RuleResult]) -> list[dict[str, Any]]:
    """Plain dicts with RuleResult's keys, for loading into the warehouse."""
    return [asdict(result) for result in results]


# --- inputs ---------------------------------------------------------------------------


def _check_columns(**frames: pd.DataFrame) -> None:
    # A missing column is a caller bug, not a protocol failure: failing rows would blame
    # the measurement, so refuse loudly instead.
    for name, frame in frames.items():
        missing = [c for c in _REQUIRED_COLUMNS[name] if c not in frame.columns]
        if missing:
            raise ValueError(f"run_gate: {name} frame lacks columns {missing}")


def _base(frame: pd.DataFrame, subject_column: str) -> pd.DataFrame:
    # A fresh RangeIndex makes GX's unexpected_index_list usable as row positions.
    out = frame.reset_index(drop=True).copy()
    out[_SUBJECT] = out[subject_column]
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
    out = _base(windows, "window_id")
    # GX compares two columns, not a column with a sum, so the sum becomes a column.
    out["accounted"] = out["completed"] + out["failed"] + out["unresolved"]
    _optional(out, "reconcile_tolerance", "generation_error", "prompt_error", "success_error",
              "generation_detail", "prompt_detail", "success_detail")
    return out


def _prepare_requests(requests: pd.DataFrame) -> pd.DataFrame:
    out = _base(requests, "window_id")
    # A failed or unresolved request has no usage by nature; the rule is that every
    # completed one's tokens come from usage (its NULL elsewhere is skipped by GX).
    completed = out["status"] == "completed"
    out["completed_token_source"] = _or_null(out["token_source"]).where(completed)
    out["temperature_or_null"] = _or_null(out["temperature"])
    # Only completed requests have a meaningful TTFT/E2E pair; blanking the others lets
    # ignore_row_if="either_value_is_missing" skip them together with rows lacking a time.
    completed = out["status"] == "completed"
    out["completed_ttft_s"] = out["ttft_s"].where(completed)
    out["completed_e2e_s"] = out["e2e_s"].where(completed)
    return out


def _prepare_entries(entries: pd.DataFrame) -> pd.DataFrame:
    out = _base(entries, "entry_id")
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
    return out


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


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

    def store(self, suite: str, batch_id: str, outcome: Any) -> None:
        from great_expectations.data_context.types.resource_identifiers import (
            ExpectationSuiteIdentifier,
            ValidationResultIdentifier,
        )

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

    def build(self) -> None:
        # Only this call's pages are rendered; the index is rebuilt over every stored result.
        self.context.build_data_docs(site_names=[_DOCS_SITE], resource_identifiers=self.keys)


def _rules_of(suite: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    return [row for row in _EXPECTATIONS if row[0] == suite]


def _build_suite(suite: str) -> Any:
    import great_expectations as gx

    expectations = [
        # meta carries the rule name so each GX result can be matched back to its rule.
        getattr(gx.expectations, expectation)(
            **kwargs, meta={"rule": rule}, description=_describe(rule, expectation, kwargs))
        for _, rule, expectation, kwargs in _rules_of(suite)
    ]
    return gx.ExpectationSuite(name=suite, expectations=expectations)


def _describe(rule: str, expectation: str, kwargs: dict[str, Any]) -> str:
    """What Data Docs shows for an expectation: the rule, its meaning and the GX check.

    Data Docs renders a description in place of GX's generic sentence, which would name
    neither the rule nor its meaning.
    """
    import great_expectations as gx

    columns = " vs ".join(str(kwargs[k]) for k in ("column", "column_A", "column_B")
                          if k in kwargs)
    gx_type = getattr(gx.expectations, expectation).expectation_type
    return f"{rule}: {RULES[rule]} [{gx_type} on {columns}]"


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
    batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
    # COMPLETE (not the default SUMMARY) is what lists every unexpected row index.
    outcome = batch.validate(expectation_suite, result_format={"result_format": "COMPLETE"})
    if docs is not None:
        docs.store(suite, batch.id, outcome)
    return {result.expectation_config.meta["rule"]: result for result in outcome.results}


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


def _split_by_subject(
    suite: str,
    rule: str,
    kwargs: dict[str, Any],
    result: Any,
    frame: pd.DataFrame,
    subjects: Sequence[Any],
) -> list[RuleResult]:
    error = _gx_error(result)
    unexpected = set((result.result or {}).get("unexpected_index_list") or [])
    if error is None and not result.success and not unexpected:
        # Never let a failure GX could not attribute to rows turn into per-subject passes.
        error = "GX reported a failure without unexpected rows"
    rows_of = {s: list(rows) for s, rows in frame.groupby(_SUBJECT, sort=False).indices.items()}
    out = []
    for subject in subjects:
        rows = rows_of.get(subject, [])
        bad = [row for row in rows if row in unexpected]
        expected, found = _OBSERVE[rule](kwargs, frame, rows, bad)
        if error is not None:
            found = f"GX error: {error}"
        observed = f"expected {expected}, found {found}"
        out.append(RuleResult(suite, str(subject), rule, error is None and not bad, observed))
    return out


# --- observed strings ("expected <...>, found <...>", MLPerf-checker style) --------------

Kw = dict[str, Any]  # an expectation's arguments from _EXPECTATIONS
Rows = list[int]  # row positions in a prepared frame
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
    counts = Counter(_show(v) for v in values).most_common()
    if len(counts) == 1:
        return counts[0][0]
    listed = ", ".join(f"{value} ({n})" for value, n in counts[:_MAX_LISTED])
    return listed + (", ..." if len(counts) > _MAX_LISTED else "")


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
    if not rows:
        return "0 of 0 rows (no measured requests)"
    shown = bad or rows
    return f"{len(shown)} of {len(rows)} rows {_summarise(frame.loc[shown, column])}"


def _observe_token_source(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    completed = [row for row in rows if frame.at[row, "status"] == "completed"]
    found = _share(frame, "token_source", completed, bad).replace(" rows ", " completed rows ")
    return f"token_source in {kw['value_set']} on completed requests", found


def _observe_temperature(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    expected = " or ".join(f"temperature == {v}" for v in kw["value_set"])
    return expected, _share(frame, "temperature", rows, bad)


def _observe_ttft(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    # The denominator is the rows the rule could check, not every measured request.
    checked = int(frame.loc[rows, [kw["column_A"], kw["column_B"]]].notna().all(axis=1).sum())
    found = f"{len(bad)} of {checked} completed rows with ttft_s > e2e_s"
    if bad:
        listed = ", ".join(
            f"{frame.at[row, 'request_id']} (ttft_s {_show(frame.at[row, 'ttft_s'])},"
            f" e2e_s {_show(frame.at[row, 'e2e_s'])})"
            for row in bad[:_MAX_LISTED]
        )
        found += f": {listed}" + (", ..." if len(bad) > _MAX_LISTED else "")
    return "ttft_s <= e2e_s on completed requests", found


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


def _observe_clock(kw: Kw, frame: pd.DataFrame, rows: Rows, bad: Rows) -> Seen:
    details = [frame.at[row, "clock_detail"] for row in rows]
    found = "; ".join(str(d) for d in details if isinstance(d, str)) or "no clock samples"
    return (f"SM clock under load >= {_join(frame.loc[rows, 'min_clock_ratio'])} of max",
            found)


_OBSERVE: dict[str, Observer] = {
    "generation_tokens_reconcile": _observe_reconcile("generation",
                                                      "vllm:generation_tokens_total"),
    "prompt_tokens_reconcile": _observe_reconcile("prompt", "vllm:prompt_tokens_total"),
    "finished_requests_reconcile": _observe_reconcile("success", "vllm:request_success_total"),
    "clock_under_load": _observe_clock,
    "incomplete_rate_labelled": _observe_check("population"),
    "latency_population_labelled": _observe_check("population"),
    "rate_numerator_labelled": _observe_check("numerator"),
    "prefill_rate_cold_prompts": _observe_check("prompt_cache"),
    "server_log_kept_apart": _observe_check("metric / statistic"),
    "restart_healthy": _observe_status,
    "accounting_balances": _observe_accounting,
    "n_at_least_min": _observe_min,
    "token_source_is_usage": _observe_token_source,
    "temperature_is_zero": _observe_temperature,
    "ttft_not_above_e2e": _observe_ttft,
}
