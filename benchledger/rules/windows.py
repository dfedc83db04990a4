"""The windows suite: one row per measured window (and the coverage query's rule)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from benchledger.rules.core import (
    ABOVE_TOLERANCE,
    BEHIND_SCHEDULE,
    BLOCK_ENERGY_ENTRIES,
    BLOCK_ENTRIES,
    BLOCK_STREAM_ENTRIES,
    BLOCK_TIMING_ENTRIES,
    BUFFERED,
    CLIENT_LAG_SHARE,
    COUNTER_UNREADABLE,
    COUNTERS_READ,
    DEFAULT_MAX_BURST_FRACTION,
    DEFAULT_RECONCILE_TOLERANCE,
    ENERGY_READ,
    ENERGY_UNREADABLE,
    LAG_TYPICAL_ABOVE,
    LAG_WITHIN,
    MAX_GPU_POWER_W,
    MIN_GPU_POWER_W,
    MIN_REQUESTS_PLAIN,
    MIN_REQUESTS_SPECULATIVE,
    NO_CALIBRATION,
    NO_TOLERANCE,
    ON_SCHEDULE,
    POWER_HEADROOM,
    SERVER_TOKENIZER,
    STREAMED,
    UNREADABLE_NO_FAMILY,
    WITHIN_TOLERANCE,
    Frame,
    Kw,
    Observer,
    QueryCheck,
    Rows,
    Rule,
    SuiteFrame,
    gx,
)
from benchledger.rules.frame import (
    NOT_APPLICABLE,
    as_float,
    detail,
    equals,
    first_verdict,
    join,
    sentences,
    show,
    show_count,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

SUITE = SuiteFrame(
    "windows", frame="windows", subject="window_id",
    required=("window_id", "submitted", "completed", "failed", "unresolved", "min_requests"),
    # Evidence a caller may not have (no counters scraped, rows from before token_count
    # was recorded): NULL, so the rules that read it find nothing to check there.
    optional=("token_count", "calibration_rel_error", "calibration_detail",
              "generation_detail", "prompt_detail", "success_detail",
              # whether its counters could be read (issue #22): the first unreadable
              # reconciliation's detail, and the family its restart recorded
              "unreadable_detail", "server_family",
              # speculation its evidence shows (issue #23; the view window_speculation):
              # 'observed: counters', 'observed: chunks', NULL where not observed
              "speculation_observed",
              # its energy (issue #39; the view window_energy): where its joules came
              # from, and what kept it from having any
              "energy_source", "energy_gaps"),
    numeric=("reconcile_tolerance", "generation_error", "prompt_error", "success_error",
             # the ruler (T17): NULL for windows recorded before the client measured its
             # lag, and for imports; the medians come from the window's requests, the
             # bound from the sweep (None: derived from the medians)
             "client_lag_p50_ms", "client_lag_p99_ms", "client_cpu_share",
             "bunched_event_fraction", "median_ttft_ms", "median_decode_span_ms",
             "max_client_lag_ms",
             # how its streams arrived (issue #22): completed measured requests with 2 or
             # more content events, those of them delivered in one read, and the share of
             # them the sweep allows (None: the protocol's default)
             "streamed_requests", "one_read_requests", "max_burst_fraction",
             # its reconciliations that could not read a counter (NULL: none made)
             "counters_unreadable",
             # the evidence behind speculation_observed: output tokens per content event
             # of its streamed requests, 1 + accepted / drafts from its counters
             "streamed_tokens_per_chunk", "spec_acceptance_length",
             # an open-loop window's schedule (issue #26): how late the client sent its
             # requests (p99, ms; NULL: a closed loop, nothing was due) and the bound
             "arrival_lag_p99_ms", "arrival_lag_max_ms", "max_arrival_lag_ms",
             "requested_span_s", "achieved_span_s",
             # 1 where its arm's telemetry reported energy or power in any window (0:
             # none did, NULL: imported), and the window's energy (NULL: none)
             "energy_expected", "window_energy_j"))

WINDOWS_PRESENT = Rule(
    name="windows_present", traps=("T5", "T14"), applies_to="window", effect=BLOCK_ENTRIES,
    summary="every planned (arm, workload, concurrency) has one window per planned restart; "
            "a crashed task or failed restart is never a silent gap",
    threshold="restarts planned for the arm", threshold_source="the sweep file",
    check=QueryCheck("coverage", "audit_windows_present"))


def _accounted(frame: Frame) -> pd.Series:
    # GX compares two columns, not a column with a sum, so the sum becomes a column.
    return frame["completed"] + frame["failed"] + frame["unresolved"]


def _observe_accounting(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    found = []
    for row in rows:
        r = frame.loc[row]
        sign = "!=" if row in bad else "=="
        found.append(f"{show(r['submitted'])} {sign} {show(r['completed'])} + "
                     f"{show(r['failed'])} + {show(r['unresolved'])}")
    return "submitted == completed + failed + unresolved", "; ".join(found)


ACCOUNTING_BALANCES = Rule(
    name="accounting_balances", traps=("T14",), applies_to="window", effect=BLOCK_ENTRIES,
    summary="the window accounts for every request: "
            "submitted == completed + failed + unresolved",
    check=gx(SUITE, "ExpectColumnPairValuesToBeEqual",
             column_A="submitted", column_B="accounted", ignore_row_if="neither",
             columns={"accounted": _accounted}, observe=_observe_accounting))


def _required_n(frame: Frame) -> pd.Series:
    """The n each window must complete (T4): the sweep's (its declared speculation's floor,
    or more where min_requests raised it), and at least the speculative floor where its
    evidence shows speculation, whatever the sweep declared (issue #23)."""
    import numpy as np

    observed = frame["speculation_observed"].notna().to_numpy()
    declared = as_float(frame["min_requests"])
    return frame["min_requests"].where(
        ~observed, np.maximum(declared, MIN_REQUESTS_SPECULATIVE))


def _speculation_text(r: pd.Series) -> str:
    """Why a window got the speculative floor its sweep did not ask for ('' where not)."""
    observed = r["speculation_observed"]
    if not isinstance(observed, str) or r["min_requests"] >= MIN_REQUESTS_SPECULATIVE:
        return ""
    evidence = [f"{name} {value:.2f}" for name, value in
                (("acceptance length", r["spec_acceptance_length"]),
                 ("tokens per chunk", r["streamed_tokens_per_chunk"]))
                if isinstance(value, float | int) and math.isfinite(value)]
    return (f" (speculative, {observed}" + (f": {', '.join(evidence)}" if evidence else "")
            + f"; the sweep declared it non-speculative, n >= {show_count(r['min_requests'])})")


def _observe_min(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    # The required n differs per window (T4: 15 speculative, 5 otherwise), so name it, and
    # where it is the speculative one only because the evidence showed speculation, why.
    return ("; ".join(f"completed >= {show_count(frame.at[row, 'required_n'])}"
                      f"{_speculation_text(frame.loc[row])}" for row in rows),
            join(frame.loc[rows, "completed"]))


N_AT_LEAST_MIN = Rule(
    name="n_at_least_min", traps=("T4",), applies_to="window", effect=BLOCK_ENTRIES,
    summary="the window completed at least the n the protocol requires, speculative where "
            "the sweep declares it or its evidence shows it (the server's spec-decode "
            "counters moved, or its streams carried several tokens per event: the view "
            "window_speculation), whatever the sweep says; a sweep asking for fewer "
            "measured requests than its declared floor is refused before it runs",
    threshold=f"n >= {MIN_REQUESTS_SPECULATIVE} speculative (declared or observed), "
              f">= {MIN_REQUESTS_PLAIN} otherwise",
    threshold_source="the protocol (T4); a sweep may raise it with min_requests",
    check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
             column_A="completed", column_B="required_n", or_equal=True,
             ignore_row_if="neither", columns={"required_n": _required_n},
             observe=_observe_min))


def _observe_reconcile(prefix: str, counter: str) -> Observer:
    def observe(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
        tolerance = join(frame.loc[rows, "reconcile_tolerance"])
        return (f"{counter} delta within {tolerance} (relative) of the client's count",
                sentences(frame, f"{prefix}_detail", rows) or "not reconciled")

    return observe


def _reconcile(name: str, prefix: str, quantity: str, vllm_name: str, client: str) -> Rule:
    """A counter rule: reconcile_run wrote the window's relative error (<prefix>_error)
    and the sentence naming the counter it read (<prefix>_detail). Each server family
    names its counters its own way (docs/protocol.md, server families): vLLM's names stand
    for the quantity here; the found text names the counter really read."""
    return Rule(
        name=name, traps=("T1", "T3"), applies_to="window", effect=BLOCK_ENTRIES,
        summary=f"the server's {quantity} counter ({vllm_name} or its family's own) delta "
                f"over the window matches {client} within the tolerance (a server without "
                "the counter is recorded as not reconciled)",
        threshold=f"relative error <= reconcile_tolerance (default "
                  f"{DEFAULT_RECONCILE_TOLERANCE})",
        threshold_source="sweep key reconcile_tolerance",
        check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
                 column_A="reconcile_tolerance", column_B=f"{prefix}_error", or_equal=True,
                 ignore_row_if="either_value_is_missing",
                 observe=_observe_reconcile(prefix, f"the server's {quantity} counter")))


GENERATION_TOKENS_RECONCILE = _reconcile(
    "generation_tokens_reconcile", "generation", "generation-token",
    "vllm:generation_tokens_total", "the output tokens in per-request usage")
PROMPT_TOKENS_RECONCILE = _reconcile(
    "prompt_tokens_reconcile", "prompt", "prompt-token", "vllm:prompt_tokens_total",
    "the prompt tokens in per-request usage")
FINISHED_REQUESTS_RECONCILE = _reconcile(
    "finished_requests_reconcile", "success", "finished-request",
    "vllm:request_success_total", "the completed requests")


def _readable_verdicts(frame: Frame) -> pd.Series:
    """Per window with reconciliations: its counters read (or its server has none), one
    unreadable where the restart's family exports counters, or one unreadable with no
    family known; None for windows never reconciled (GX skips them)."""
    import numpy as np

    unreadable = as_float(frame["counters_unreadable"])
    family = frame["server_family"].notna().to_numpy()
    return first_verdict(frame, [(COUNTERS_READ, unreadable == 0),
                                 (COUNTER_UNREADABLE, family)],
                         UNREADABLE_NO_FAMILY, ~np.isnan(unreadable))


def _readable_text(r: pd.Series) -> str:
    verdict = r["counters_readable_check"]
    if not isinstance(verdict, str):
        return f"{NOT_APPLICABLE} (the window was not reconciled: imported evidence)"
    if verdict == COUNTERS_READ:
        return "every /metrics scrape read, or no /metrics endpoint (no counter)"
    why = detail(r["unreadable_detail"])
    if verdict == COUNTER_UNREADABLE:
        return (f"{verdict}: {why}; the server's family ({r['server_family']}) exports "
                "counters, so the window's token counts went unconfirmed")
    return (f"{verdict}: {why}; the server recorded no family (arms.server_family), so "
            "nothing says it has counters: its entries say counter_check 'counter "
            "unreadable'")


def _observe_readable(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    # One text per row: a duplicated window id shows every row instead of hiding one.
    return ("the server's /metrics read before and after the window, where its family "
            "exports counters", "; ".join(_readable_text(frame.loc[row]) for row in rows)
            or "no window")


# A scrape cut at its bound (arms.metrics_timeout_s), an error status or a page that is not
# Prometheus text is not a server without counters: its counters may be there, and may
# disagree. Recorded as `counter unreadable` in reconciliations (warehouse/reconcile.py),
# never as `no counter`, and blocking where the server is known to export counters.
COUNTERS_READABLE = Rule(
    name="counters_readable", traps=("T3",), applies_to="window", effect=BLOCK_ENTRIES,
    summary="the server's /metrics was read before and after the window wherever its "
            "family exports counters (restarts.server_family, declared or recognised when "
            "it was ready): a scrape that timed out, answered an error status or was not "
            "Prometheus text is 'counter unreadable' and blocks the entries resting on the "
            "window; a server without a /metrics endpoint (HTTP 404) is 'no counter' and "
            "does not",
    threshold="no reconciliation 'counter unreadable' where server_family is known",
    threshold_source="the restart's server_family; arms.metrics_timeout_s bounds each "
                     "scrape",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="counters_readable_check",
             value_set=[COUNTERS_READ, UNREADABLE_NO_FAMILY],
             columns={"counters_readable_check": _readable_verdicts},
             observe=_observe_readable))


def _calibration_verdicts(frame: Frame) -> pd.Series:
    """Per window counted by the server's tokenizer: whether its calibration's relative
    error is within reconcile_tolerance; None for every other window (GX skips it)."""
    import numpy as np

    error = as_float(frame["calibration_rel_error"])
    tolerance = as_float(frame["reconcile_tolerance"])
    return first_verdict(frame, [(NO_CALIBRATION, np.isnan(error)),
                                 (NO_TOLERANCE, np.isnan(tolerance)),
                                 (WITHIN_TOLERANCE, error <= tolerance)],
                         ABOVE_TOLERANCE, equals(frame["token_count"], SERVER_TOKENIZER))


def _observe_calibration(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    tolerance = join(frame.loc[rows, "reconcile_tolerance"])
    expected = (f"the server tokenizer's counts within {tolerance} (relative) of usage on "
                "the calibration requests")
    checked = [row for row in rows if isinstance(frame.at[row, kw["column"]], str)]
    if not checked:
        counts = join(frame.loc[rows, "token_count"]) if len(rows) else "NULL"
        return expected, f"{NOT_APPLICABLE} (token_count {counts})"
    found = "; ".join(f"{frame.at[row, kw['column']]}: "
                      f"{detail(frame.at[row, 'calibration_detail'])}" for row in checked)
    return expected, found


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
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="calibration_check",
             value_set=[WITHIN_TOLERANCE],
             columns={"calibration_check": _calibration_verdicts},
             observe=_observe_calibration))


def _lag_bound(frame: Frame) -> np.ndarray:
    """The client lag p50 each window may show (ms): the sweep's max_client_lag_ms, else
    CLIENT_LAG_SHARE of the smaller of its median TTFT and median decode span (NaN where it
    has neither: no completed measured request to measure against)."""
    import numpy as np

    sweep = as_float(frame["max_client_lag_ms"])
    smallest = np.fmin(as_float(frame["median_ttft_ms"]),
                       as_float(frame["median_decode_span_ms"]))
    return np.where(np.isnan(sweep), CLIENT_LAG_SHARE * smallest, sweep)


def _lag_verdicts(frame: Frame) -> pd.Series:
    """Per window whose lag p50 and bound are known: within bound or above it; None for
    the rest (GX skips them: nothing to check)."""
    import numpy as np

    bound, p50 = as_float(frame["client_lag_bound_ms"]), as_float(frame["client_lag_p50_ms"])
    known = ~(np.isnan(bound) | np.isnan(p50))
    return first_verdict(frame, [(LAG_TYPICAL_ABOVE, p50 > bound)], LAG_WITHIN, known)


def _ms(value: float) -> str:
    """Milliseconds as a reader reads them: 0.741, 7.4, 12.3, 254."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


_SHARE = {0.1: "a tenth of"}.get(CLIENT_LAG_SHARE, f"{CLIENT_LAG_SHARE:g} x")


def _bound_text(r: pd.Series) -> str:
    import pandas as pd

    if not pd.isna(r["max_client_lag_ms"]):
        bound = r["max_client_lag_ms"]
        return f"client lag p50 <= {_ms(bound)} ms (the sweep's max_client_lag_ms)"
    ttft, span = r["median_ttft_ms"], r["median_decode_span_ms"]
    if pd.isna(ttft) and pd.isna(span):
        return (f"client lag p50 <= {_SHARE} the smaller of the median TTFT and median decode "
                "span (no completed measured request to take them from)")
    name, value = (("median TTFT", ttft) if pd.isna(span) or (not pd.isna(ttft) and ttft <= span)
                   else ("median decode span", span))
    bound = r["client_lag_bound_ms"]
    return f"client lag p50 <= {_ms(bound)} ms ({_SHARE} the {name}, {_ms(value)} ms)"


def _lag_text(r: pd.Series) -> str:
    import pandas as pd

    if pd.isna(r["client_lag_p99_ms"]):
        return ("client lag not measured (a window recorded before the client measured it, "
                "or imported evidence): nothing to check")
    seen = [f"p50 {_ms(r['client_lag_p50_ms'])} ms"] if not pd.isna(r["client_lag_p50_ms"]) \
        else []
    if not pd.isna(r["client_cpu_share"]):
        seen.append(f"CPU share {r['client_cpu_share']:.2f}")
    if not pd.isna(r["bunched_event_fraction"]):
        seen.append(f"{100 * r['bunched_event_fraction']:.0f}% of events bunched")
    found = f"client lag p99 {_ms(r['client_lag_p99_ms'])} ms" + (
        f" ({', '.join(seen)})" if seen else "")
    if isinstance(r["client_lag_check"], str) and r["client_lag_check"] != LAG_WITHIN:
        found = f"{r['client_lag_check']}: {found}"
    return found + ("; no bound to check it against" if pd.isna(r["client_lag_bound_ms"])
                    else "")


def _observe_lag(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    # One text per row: a duplicated window id shows every row instead of hiding one.
    windows = [frame.loc[row] for row in rows]
    return ("; ".join(map(_bound_text, windows)) or "client lag within its bound",
            "; ".join(map(_lag_text, windows)) or "no window")


CLIENT_LAG_WITHIN_BOUND = Rule(
    name="client_lag_within_bound", traps=("T17",), applies_to="window",
    effect=BLOCK_TIMING_ENTRIES,
    summary="the measurement client was not too late to stamp the window's stream events: "
            "its typical event-loop lag (p50) is within the bound, else the per-request "
            "timing entries resting on the window are blocked (its aggregate entries still "
            "publish); a window whose lag was not measured has nothing to check",
    threshold=f"client lag p50 <= max_client_lag_ms, else <= {CLIENT_LAG_SHARE:g} x "
              "min(median TTFT, median decode span) of its completed measured requests",
    threshold_source="sweep key max_client_lag_ms; the protocol (T17)",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="client_lag_check",
             value_set=[LAG_WITHIN],
             columns={"client_lag_bound_ms": _lag_bound, "client_lag_check": _lag_verdicts},
             observe=_observe_lag))


def _one_read_share(frame: Frame) -> np.ndarray:
    """one_read_requests / streamed_requests; NaN where no request had 2 content events."""
    import numpy as np

    one_read, streamed = as_float(frame["one_read_requests"]), as_float(frame["streamed_requests"])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(streamed > 0, one_read / streamed, np.nan)


def _one_read_bound(frame: Frame) -> np.ndarray:
    """The sweep's max_burst_fraction the window was validated under, else the default."""
    import numpy as np

    bound = as_float(frame["max_burst_fraction"])
    return np.where(np.isnan(bound), DEFAULT_MAX_BURST_FRACTION, bound)


def _one_read_verdicts(frame: Frame) -> pd.Series:
    """Per window with requests of 2 or more content events: streamed, or delivered in one
    read (above the bound); None for the rest (GX skips them: nothing to check)."""
    import numpy as np

    share, bound = _one_read_share(frame), _one_read_bound(frame)
    return first_verdict(frame, [(BUFFERED, share > bound)], STREAMED, ~np.isnan(share))


def _observe_one_read(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    # One text per row: a duplicated window id shows every row instead of hiding one.
    bounds, shares = _one_read_bound(frame)[rows], _one_read_share(frame)[rows]
    expected, found = [], []
    for row, bound, share in zip(rows, bounds, shares, strict=True):
        expected.append(f"at most {100 * bound:.0f}% of the completed measured requests "
                        "with 2 or more content events arrived whole in one network read "
                        f"(max_burst_fraction {bound:g})")
        if math.isnan(share):  # no such request
            found.append(f"{NOT_APPLICABLE} (no completed measured request with 2 or more "
                         "content events)")
            continue
        text = (f"{show_count(frame.at[row, 'one_read_requests'])} of "
                f"{show_count(frame.at[row, 'streamed_requests'])} arrived whole in one read "
                f"({100 * share:.0f}%)")
        if frame.at[row, kw["column"]] == BUFFERED:
            text = (f"{BUFFERED}: {text}: a proxy that buffers, or compression without "
                    "flushes; their TTFT is the whole answer's time and their decode span 0")
        found.append(text)
    return "; ".join(expected) or "streams delivered as streams", "; ".join(found) or "no window"


# A stream the client did not see as a stream: the answer arrived in one read (a proxy that
# buffers whole responses, gzip without flushes), so what would be its TTFT is the time to
# the whole answer and its decode span is zero. Such requests have no ttft_s, prefill,
# decode rate, TPOT or ITL in the requests view (rate_withheld says why); a window made
# mostly of them would publish the others' numbers, or none, without a word.
STREAMS_NOT_BUFFERED = Rule(
    name="streams_not_buffered", traps=("T17",), applies_to="window",
    effect=BLOCK_STREAM_ENTRIES,
    summary="the window's answers arrived as streams: at most max_burst_fraction of its "
            "completed measured requests with 2 or more content events arrived whole in "
            "one network read (a buffering proxy, compression without flushes), else the "
            "per-request timing entries and the aggregate decode rate resting on the "
            "window are blocked (their TTFT is the time to the whole answer, their decode "
            "span zero); its throughput, counts and fractions still publish",
    threshold=f"one-read requests / requests with >= 2 content events <= "
              f"max_burst_fraction (default {DEFAULT_MAX_BURST_FRACTION})",
    threshold_source="sweep key max_burst_fraction",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="one_read_check",
             value_set=[STREAMED], columns={"one_read_check": _one_read_verdicts},
             observe=_observe_one_read))


def _schedule_verdicts(frame: Frame) -> pd.Series:
    """Per open-loop window: its arrival lag p99 within the bound or not; None for a closed
    loop (nothing was due: GX skips it)."""
    import numpy as np

    lag, bound = as_float(frame["arrival_lag_p99_ms"]), as_float(frame["max_arrival_lag_ms"])
    known = ~(np.isnan(lag) | np.isnan(bound))
    return first_verdict(frame, [(BEHIND_SCHEDULE, lag > bound)], ON_SCHEDULE, known)


def _schedule_texts(r: pd.Series) -> tuple[str, str]:
    """(expected, found) of one window: its bound and how late its requests went out."""
    import pandas as pd

    if pd.isna(r["arrival_lag_p99_ms"]):
        return "nothing due (a closed loop)", "closed loop: no request had a due time"
    bound = ("no bound" if pd.isna(r["max_arrival_lag_ms"])
             else f"arrival lag p99 <= {_ms(r['max_arrival_lag_ms'])} ms")
    found = (f"arrival lag p99 {_ms(r['arrival_lag_p99_ms'])} ms, max "
             f"{_ms(r['arrival_lag_max_ms'])} ms; submissions spanned "
             f"{r['achieved_span_s']:.3g} s of the {r['requested_span_s']:.3g} s scheduled")
    return bound, found


def _observe_schedule(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    # One text per row: a duplicated window id shows every row instead of hiding one.
    texts = [_schedule_texts(frame.loc[row]) for row in rows]
    return ("; ".join(e for e, _ in texts) or "requests sent when due",
            "; ".join(f for _, f in texts) or "no window")


# An open-loop window (Poisson arrivals at rate_rps, or a trace replayed at its own times)
# measures the load its schedule describes only if its requests were sent when due: a
# client that fell behind (its concurrency cap reached, its loop too busy) offered less
# load than the entry would claim, and the window says so instead of publishing.
ARRIVALS_ON_SCHEDULE = Rule(
    name="arrivals_on_schedule", traps=("T14",), applies_to="window", effect=BLOCK_ENTRIES,
    summary="an open-loop window (Poisson or a replayed trace) sent its requests when they "
            "were due: the p99 of how late each was submitted (t_submit - due) is within "
            "the bound, else the window fell behind its schedule and its entries are "
            "blocked; a closed-loop window has nothing to check",
    threshold="arrival lag p99 <= max_arrival_lag_ms (default 100 ms)",
    threshold_source="sweep key max_arrival_lag_ms",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="schedule_check",
             value_set=[ON_SCHEDULE], columns={"schedule_check": _schedule_verdicts},
             observe=_observe_schedule))


def _energy_verdicts(frame: Frame) -> pd.Series:
    """Per window whose arm's telemetry reported energy or power (in any of its windows):
    its energy read whole, or unreadable; None for the rest (GX skips them: a source
    without energy makes no energy entries)."""
    import numpy as np

    expected = as_float(frame["energy_expected"]) > 0
    unreadable = np.isnan(as_float(frame["window_energy_j"]))
    return first_verdict(frame, [(ENERGY_UNREADABLE, unreadable)], ENERGY_READ, expected)


def _energy_text(r: pd.Series) -> str:
    import pandas as pd

    if r["energy_check"] is None:
        return (f"{NOT_APPLICABLE} (its arm's GPU telemetry reported no energy counter and "
                "no power)")
    if r["energy_check"] == ENERGY_READ:
        return f"{r['window_energy_j']:.1f} J ({r['energy_source']})"
    gaps = r["energy_gaps"]
    return f"{ENERGY_UNREADABLE}: " + (gaps if isinstance(gaps, str) and gaps else
                                       "no GPU telemetry over the window" if pd.isna(gaps)
                                       else "no energy")


def _observe_energy(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    # One text per row: a duplicated window id shows every row instead of hiding one.
    return ("every node and every GPU its deployment listed read before and after the "
            "window, each GPU's readings able to be true (view window_energy)",
            "; ".join(_energy_text(frame.loc[row]) for row in rows) or "no window")


# A GPU page that lies (issue #39: negative power, a counter that goes backwards, freezes or
# jumps, a GPU listed at launch and then left off the page) gave negative, zero and absurd
# joules per token, published. The view window_energy leaves such a window without energy
# and says why; this rule makes that visible on the energy entries instead of letting
# them rest, unremarked, on the windows that happened to read well.
ENERGY_READABLE = Rule(
    name="energy_readable", traps=("T18",), applies_to="window", effect=BLOCK_ENERGY_ENTRIES,
    summary="where the arm's GPU telemetry reports energy or power, the window's energy was "
            "read whole and can be true: every node, and every GPU its deployment listed "
            "when it was ready, read before and after the window; no negative counter or "
            "power reading; no counter that went backwards, froze or moved more than the "
            "GPU can draw; no power reading above that; else the window has no energy "
            "(window_energy.energy_gaps names the GPU and what was wrong) and the energy "
            "entries resting on it are blocked; its other entries still publish",
    threshold=f"{MIN_GPU_POWER_W:g} W <= each GPU's mean power over the window <= "
              f"{POWER_HEADROOM:g} x its ceiling, and each power reading 0 <= p <= that; "
              f"ceiling: the power limit its telemetry reports, at most {MAX_GPU_POWER_W:g} "
              f"W ({MAX_GPU_POWER_W:g} W where it reports none)",
    threshold_source="the protocol (T18); dcgm-exporter's power limit fields where its "
                     "counters list them",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet", column="energy_check",
             value_set=[ENERGY_READ], columns={"energy_check": _energy_verdicts},
             observe=_observe_energy))
