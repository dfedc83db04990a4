"""The gate's per-subject results, computed without per-row Python, against a reference that
reads the rules row by row.

run_gate splits GX's verdicts per subject with numpy masks and builds the "found" texts from
per-value counts. The reference below restates every run_gate rule and text plainly, one row
at a time, from the raw frames (no GX, no pandas grouping), so a speed-up that changes a
verdict or a single character of a result fails here. The frames are randomised, with the
troubles a real sweep shows sprinkled in: NULL and non-usage token sources, temperature 0.7
(and -0.0, which passes but shows differently), TTFT above E2E, failed/unresolved/NULL
statuses, missing times, whole windows without usage, usage that cannot be true (10**9 or
negative tokens, more than max_tokens, NULL or non-integer counts, more cached than prompt
tokens), windows without requests, requests of a window the windows frame lacks, and
duplicated restart and window ids.

validate_run's own reading is checked on a loaded warehouse: gate_requests gives exactly the
rows and order of measured_requests.sql, and reconcile_run's SQL sums equal the client's counts
summed row by row (tests/reference.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pytest

from benchledger.expectations.gate import REQUEST_COLUMNS, SUITES, RuleResult, run_gate
from benchledger.raw.layout import RunLayout
from benchledger.rules import rules_of_suite
from benchledger.rules.frame import show as _show
from benchledger.rules.frame import summarise as _summarise
from benchledger.rules.frame import summarise_rows as _summarise_rows
from benchledger.warehouse.db import connect, query_frame
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.reconcile import reconcile_run
from benchledger.warehouse.validate import gate_requests
from tests.reference import reconcile_requests
from tests.sweeps import simulator_arm, sweep
from tests.synthetic import request_row, write_synthetic_run

# --- the reference: every rule of run_gate, row by row ------------------------------------


def show(value: Any) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "NULL"
    return repr(value) if isinstance(value, str) else str(value)


def null(value: Any) -> bool:
    return value is None or (not isinstance(value, str) and pd.isna(value))


def join(values) -> str:
    return "; ".join(show(v) for v in values)


def summarise(values) -> str:
    counts = Counter(show(v) for v in values).most_common()
    if len(counts) == 1:
        return counts[0][0]
    return ", ".join(f"{v} ({n})" for v, n in counts[:3]) + (", ..." if len(counts) > 3 else "")


def share(values: list, bad: list, what: str) -> str:
    if not values:
        return f"0 of 0 {what} (no measured requests)"
    shown = bad or values
    return f"{len(shown)} of {len(values)} {what} {summarise(shown)}"


def reference_requests(rule: str, rows: list[dict]) -> tuple[bool, str, str]:
    completed = [r for r in rows if r["status"] == "completed"]
    if rule == "token_source_is_usage":
        counted = ("usage", "logprobs", "server_tokenizer")
        bad = [r["token_source"] for r in completed if r["token_source"] not in counted]
        return (not bad, f"token_source in {list(counted)} on completed requests",
                share([r["token_source"] for r in completed], bad, "completed rows"))
    if rule == "logprobs_match_usage":
        return reference_logprobs(completed)
    if rule == "temperature_is_zero":
        bad = [r["temperature"] for r in rows if null(r["temperature"]) or r["temperature"] != 0]
        return (not bad, "temperature == 0.0",
                share([r["temperature"] for r in rows], bad, "rows"))
    if rule == "usage_plausible":
        return reference_usage(completed)
    assert rule == "ttft_not_above_e2e"
    checked = [r for r in completed if not null(r["ttft_s"]) and not null(r["e2e_s"])]
    bad = [r for r in checked if r["ttft_s"] > r["e2e_s"]]
    found = f"{len(bad)} of {len(checked)} completed rows with ttft_s > e2e_s"
    if bad:
        found += ": " + ", ".join(f"{r['request_id']} (ttft_s {show(r['ttft_s'])}, "
                                  f"e2e_s {show(r['e2e_s'])})" for r in bad[:3])
        found += ", ..." if len(bad) > 3 else ""
    return not bad, "ttft_s <= e2e_s on completed requests", found


def reference_logprobs(completed: list[dict]) -> tuple[bool, str, str]:
    checked = [r for r in completed if r["token_source"] == "logprobs"
               and not null(r.get("usage_output_tokens"))]
    bad = [r for r in checked if r["output_tokens"] != r["usage_output_tokens"]]
    found = f"{len(bad)} of {len(checked)} completed rows counted from logprobs with usage disagree"
    if bad:
        found += ": " + ", ".join(f"{r['request_id']} (logprobs {count(r['output_tokens'])}, "
                                  f"usage {count(r['usage_output_tokens'])})" for r in bad[:3])
        found += ", ..." if len(bad) > 3 else ""
    return (not bad, "output_tokens (logprobs) == usage.completion_tokens on completed requests "
                     "that have both", found)


def usage_fault(r: dict) -> str | None:
    """Why a usage report cannot be true (the first reason, in the rule's order)."""
    o, m, p, c = (r[k] for k in ("output_tokens", "max_tokens", "prompt_tokens",
                                 "cached_tokens"))
    e = r.get("chunks")

    def fractional(x) -> bool:
        return not null(x) and np.isfinite(x) and x != int(x)

    checks = [("output_tokens NULL", null(o)),
              ("output_tokens not an integer", fractional(o)),
              ("output_tokens below 0", not null(o) and o < 0),
              ("max_tokens NULL", null(m)),
              ("output_tokens above max_tokens", not null(o) and not null(m) and o > m),
              ("output_tokens below chunks", not null(o) and not null(e) and o < e),
              ("prompt_tokens NULL", null(p)),
              ("prompt_tokens not an integer", fractional(p)),
              ("prompt_tokens below 0", not null(p) and p < 0),
              ("prompt_tokens above 16777216", not null(p) and p > 2**24),
              ("cached_tokens not an integer", fractional(c)),
              ("cached_tokens below 0", not null(c) and c < 0),
              ("cached_tokens above prompt_tokens", not null(c) and not null(p) and c > p)]
    return next((reason for reason, broken in checks if broken), None)


def count(value) -> str:
    return "NULL" if null(value) else (str(int(value)) if float(value).is_integer()
                                       else str(value))


USAGE_DETAIL = {  # each reason with the row's values
    "output_tokens NULL": "output_tokens NULL",
    "output_tokens not an integer": "output_tokens {o} not an integer",
    "output_tokens below 0": "output_tokens {o} below 0",
    "max_tokens NULL": "max_tokens NULL",
    "output_tokens above max_tokens": "output_tokens {o} above max_tokens {m}",
    "output_tokens below chunks": "output_tokens {o} below chunks {e}",
    "prompt_tokens NULL": "prompt_tokens NULL",
    "prompt_tokens not an integer": "prompt_tokens {p} not an integer",
    "prompt_tokens below 0": "prompt_tokens {p} below 0",
    "prompt_tokens above 16777216": "prompt_tokens {p} above 16777216",
    "cached_tokens not an integer": "cached_tokens {c} not an integer",
    "cached_tokens below 0": "cached_tokens {c} below 0",
    "cached_tokens above prompt_tokens": "cached_tokens {c} above prompt_tokens {p}",
}


def reference_usage(completed: list[dict]) -> tuple[bool, str, str]:
    judged = [r for r in completed if r["token_source"] == "usage"]
    bad = [(r, reason) for r in judged if (reason := usage_fault(r))]
    found = f"{len(bad)} of {len(judged)} completed rows with usage implausible"
    if bad:
        reasons = Counter(reason for _, reason in bad)  # in order of first occurrence
        found += ": " + ", ".join(f"{reason} ({n})" for reason, n in reasons.items())
        found += "; " + ", ".join(
            f"{r['request_id']} (" + USAGE_DETAIL[reason].format(
                o=count(r["output_tokens"]), m=count(r["max_tokens"]),
                p=count(r["prompt_tokens"]), c=count(r["cached_tokens"]),
                e=count(r.get("chunks"))) + ")"
            for r, reason in bad[:3]) + (", ..." if len(bad) > 3 else "")
    return (not bad, "0 <= output_tokens <= max_tokens, output_tokens >= chunks (its "
                     "text-bearing events), 0 <= prompt_tokens <= 16777216 and "
                     "0 <= cached_tokens <= prompt_tokens on completed requests with usage",
            found)


RECONCILED = {
    "generation_tokens_reconcile": ("generation", "the server's generation-token counter"),
    "prompt_tokens_reconcile": ("prompt", "the server's prompt-token counter"),
    "finished_requests_reconcile": ("success", "the server's finished-request counter")}


def reference_windows(rule: str, rows: list[dict]) -> tuple[bool, str, str]:
    if rule == "accounting_balances":
        sides = [(r, r["submitted"] == r["completed"] + r["failed"] + r["unresolved"])
                 for r in rows]
        found = "; ".join(f"{show(r['submitted'])} {'==' if ok else '!='} {show(r['completed'])}"
                          f" + {show(r['failed'])} + {show(r['unresolved'])}" for r, ok in sides)
        return (all(ok for _, ok in sides), "submitted == completed + failed + unresolved",
                found)
    if rule == "n_at_least_min":
        return reference_min(rows)
    if rule == "tokenizer_calibrated":
        return reference_calibration(rows)
    if rule == "client_lag_within_bound":
        return reference_lag(rows)
    if rule == "streams_not_buffered":
        return reference_one_read(rows)
    if rule == "counters_readable":
        return reference_readable(rows)
    if rule == "arrivals_on_schedule":
        return reference_schedule(rows)
    if rule == "energy_readable":
        return reference_energy(rows)
    prefix, counter = RECONCILED[rule]
    ok = all(null(r["reconcile_tolerance"]) or null(r[f"{prefix}_error"])
             or r["reconcile_tolerance"] >= r[f"{prefix}_error"] for r in rows)
    details = [r[f"{prefix}_detail"] for r in rows if isinstance(r[f"{prefix}_detail"], str)]
    return (ok, f"{counter} delta within {join(r['reconcile_tolerance'] for r in rows)} "
                "(relative) of the client's count", "; ".join(details) or "not reconciled")


def reference_energy(rows: list[dict]) -> tuple[bool, str, str]:
    """Issue #39: where the arm's telemetry reported energy or power, the window has it."""
    found, ok = [], True
    for r in rows:
        expected, joules = r.get("energy_expected"), r.get("window_energy_j")
        if null(expected) or not expected > 0:
            found.append("rule not applicable (its arm's GPU telemetry reported no energy "
                         "counter and no power)")
        elif not null(joules):
            found.append(f"{joules:.1f} J ({r.get('energy_source')})")
        else:
            ok = False
            gaps = r.get("energy_gaps")
            found.append("energy unreadable: " + (
                gaps if isinstance(gaps, str) and gaps
                else "no GPU telemetry over the window" if null(gaps) else "no energy"))
    return (ok, "every node and every GPU its deployment listed read before and after the "
                "window, each GPU's readings able to be true (view window_energy)",
            "; ".join(found) or "no window")


def reference_schedule(rows: list[dict]) -> tuple[bool, str, str]:
    expected, found, ok = [], [], True
    for r in rows:
        lag, bound = r.get("arrival_lag_p99_ms"), r.get("max_arrival_lag_ms")
        if null(lag):
            expected.append("nothing due (a closed loop)")
            found.append("closed loop: no request had a due time")
            continue
        ok = ok and (null(bound) or lag <= bound)
        expected.append("no bound" if null(bound) else f"arrival lag p99 <= {ms(bound)} ms")
        found.append(f"arrival lag p99 {ms(lag)} ms, max {ms(r['arrival_lag_max_ms'])} ms; "
                     f"submissions spanned {r['achieved_span_s']:.3g} s of the "
                     f"{r['requested_span_s']:.3g} s scheduled")
    return ok, "; ".join(expected) or "requests sent when due", "; ".join(found) or "no window"


def reference_calibration(rows: list[dict]) -> tuple[bool, str, str]:
    tolerances = join(r["reconcile_tolerance"] for r in rows)
    expected = (f"the server tokenizer's counts within {tolerances} (relative) of usage on "
                "the calibration requests")
    checked = [r for r in rows if r.get("token_count") == "server_tokenizer"]
    if not checked:
        return True, expected, ("rule not applicable (token_count "
                                f"{join(r.get('token_count') for r in rows) or 'NULL'})")
    verdicts = ["no calibration" if null(r["calibration_rel_error"])
                else "no reconcile_tolerance" if null(r["reconcile_tolerance"])
                else "within reconcile_tolerance"
                if r["calibration_rel_error"] <= r["reconcile_tolerance"]
                else "above reconcile_tolerance" for r in checked]
    details = [r["calibration_detail"] if isinstance(r["calibration_detail"], str)
               else "no detail" for r in checked]
    found = "; ".join(f"{v}: {d}" for v, d in zip(verdicts, details, strict=True))
    return all(v == "within reconcile_tolerance" for v in verdicts), expected, found


def ms(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def reference_lag(rows: list[dict]) -> tuple[bool, str, str]:
    """Issue #21: the client lag p50 within the sweep's bound, else a tenth of the smaller
    of the window's median TTFT and median decode span; not measured, nothing to check."""
    expected, found, ok = [], [], True
    for r in rows:
        sweep, ttft, span = (r.get(k) for k in ("max_client_lag_ms", "median_ttft_ms",
                                                "median_decode_span_ms"))
        lag, p50 = r.get("client_lag_p99_ms"), r.get("client_lag_p50_ms")
        if not null(sweep):
            bound = sweep
            expected.append(f"client lag p50 <= {ms(sweep)} ms (the sweep's max_client_lag_ms)")
        elif null(ttft) and null(span):
            bound = None
            expected.append("client lag p50 <= a tenth of the smaller of the median TTFT and "
                            "median decode span (no completed measured request to take them "
                            "from)")
        else:
            name, value = (("median TTFT", ttft) if null(span) or (not null(ttft) and ttft <= span)
                           else ("median decode span", span))
            bound = 0.1 * value
            expected.append(f"client lag p50 <= {ms(bound)} ms (a tenth of the {name}, "
                            f"{ms(value)} ms)")
        if null(lag):
            found.append("client lag not measured (a window recorded before the client "
                         "measured it, or imported evidence): nothing to check")
            continue
        seen = [] if null(p50) else [f"p50 {ms(p50)} ms"]
        if not null(r.get("client_cpu_share")):
            seen.append(f"CPU share {r['client_cpu_share']:.2f}")
        if not null(r.get("bunched_event_fraction")):
            seen.append(f"{100 * r['bunched_event_fraction']:.0f}% of events bunched")
        broke = ("p50 above bound" if bound is not None and not null(p50) and p50 > bound
                 else None)
        found.append((f"{broke}: " if broke else "") + f"client lag p99 {ms(lag)} ms"
                     + (f" ({', '.join(seen)})" if seen else "")
                     + ("; no bound to check it against" if bound is None else ""))
        ok &= broke is None
    return ok, "; ".join(expected), "; ".join(found)


def reference_one_read(rows: list[dict]) -> tuple[bool, str, str]:
    """Issue #22: at most max_burst_fraction (default 0.1) of a window's completed measured
    requests with 2 or more content events arrived whole in one read."""
    expected, found, ok = [], [], True
    for r in rows:
        bound = 0.1 if null(r.get("max_burst_fraction")) else r["max_burst_fraction"]
        expected.append(f"at most {100 * bound:.0f}% of the completed measured requests with "
                        "2 or more content events arrived whole in one network read "
                        f"(max_burst_fraction {bound:g})")
        streamed, one_read = r.get("streamed_requests"), r.get("one_read_requests")
        if null(streamed) or not streamed > 0:
            found.append("rule not applicable (no completed measured request with 2 or more "
                         "content events)")
            continue
        share = one_read / streamed
        text = f"{count(one_read)} of {count(streamed)} arrived whole in one read " \
               f"({100 * share:.0f}%)"
        if share > bound:
            ok = False
            text = ("delivered in one read: " + text + ": a proxy that buffers, or "
                    "compression without flushes; their TTFT is the whole answer's time and "
                    "their decode span 0")
        found.append(text)
    return ok, "; ".join(expected), "; ".join(found)


def reference_readable(rows: list[dict]) -> tuple[bool, str, str]:
    """Issue #22: no counter unreadable where the restart's family is known."""
    found, ok = [], True
    for r in rows:
        unreadable, family = r.get("counters_unreadable"), r.get("server_family")
        detail = r.get("unreadable_detail")
        detail = detail if isinstance(detail, str) and detail else "no detail"
        if null(unreadable):
            found.append("rule not applicable (the window was not reconciled: imported "
                         "evidence)")
        elif unreadable == 0:
            found.append("every /metrics scrape read, or no /metrics endpoint (no counter)")
        elif not null(family):
            ok = False
            found.append(f"counter unreadable: {detail}; the server's family ({family}) "
                         "exports counters, so the window's token counts went unconfirmed")
        else:
            found.append(f"counter unreadable, no known family: {detail}; the server "
                         "recorded no family (arms.server_family), so nothing says it has "
                         "counters: its entries say counter_check 'counter unreadable'")
    return (ok, "the server's /metrics read before and after the window, where its family "
                "exports counters", "; ".join(found) or "no window")


def reference_restarts(rule: str, rows: list[dict]) -> tuple[bool, str, str]:
    if rule == "restart_healthy":
        return (all(r["status"] in ("ok", "external") for r in rows),
                "status in ['ok', 'external']", join(r["status"] for r in rows))
    assert rule == "clock_under_load"
    ok = True
    for r in rows:
        ratio, floor = r["clock_ratio"], r["min_clock_ratio"]
        if null(ratio) and not null(floor):  # unreadable: fails only if the check is required
            ok &= r["require_clock_check"] is False
        elif not null(ratio) and not null(floor):
            ok &= ratio >= floor
    details = [r["clock_detail"] for r in rows if isinstance(r["clock_detail"], str)]
    return (ok, f"SM clock under load >= {join(r['min_clock_ratio'] for r in rows)} of max",
            "; ".join(details) or "no clock samples")


def reference_gate(restarts: pd.DataFrame, windows: pd.DataFrame,
                   requests: pd.DataFrame) -> list[RuleResult]:
    records = {"restarts": restarts.to_dict("records"), "windows": windows.to_dict("records"),
               "measured_requests": requests.to_dict("records")}
    subject_of = {"restarts": "restart_id", "windows": "window_id",
                  "measured_requests": "window_id"}
    subjects = {
        "restarts": list(dict.fromkeys(restarts["restart_id"])),
        "windows": list(dict.fromkeys(windows["window_id"])),
        "measured_requests": list(dict.fromkeys([*windows["window_id"],
                                                 *requests["window_id"]])),
    }
    check = {"restarts": reference_restarts, "windows": reference_windows,
             "measured_requests": reference_requests}
    out = []
    for suite in SUITES:
        for rule in rules_of_suite(suite):
            for subject in subjects[suite]:
                rows = [r for r in records[suite] if r[subject_of[suite]] == subject]
                success, expected, found = check[suite](rule.name, rows)
                out.append(RuleResult(suite, subject, rule.name, success, expected, found))
    return out


# --- randomised runs -------------------------------------------------------------------


def random_usage(rng: np.random.Generator, n: int, p_bad: float, *,
                 everything_absurd: bool) -> dict[str, np.ndarray]:
    """Usage counts as Arrow hands them to pandas (float64 where NULLs occur): mostly
    possible, with every kind of impossible count sprinkled in."""
    max_tokens = rng.choice([8, 128], n).astype(float)
    output = np.floor(rng.uniform(0, max_tokens + 1))
    prompt = rng.integers(0, 3000, n).astype(float)
    cached = np.where(rng.random(n) < 0.3, np.nan, np.floor(rng.uniform(0, prompt + 1)))
    broken = rng.random(n) < p_bad
    output[broken] = rng.choice([10**9, -5, 129, 9, np.nan, 2.5], broken.sum())
    broken = rng.random(n) < p_bad
    prompt[broken] = rng.choice([np.nan, -3, 0.5, 10**9], broken.sum())
    broken = rng.random(n) < p_bad
    cached[broken] = rng.choice([-1, 4000, 1.5], broken.sum())
    max_tokens[rng.random(n) < p_bad / 10] = np.nan
    if everything_absurd:  # a whole window from a server that reports nonsense
        output[:] = 10**9
    return {"max_tokens": max_tokens, "output_tokens": output, "prompt_tokens": prompt,
            "cached_tokens": cached}


def random_calibration(rng: np.random.Generator, w: int) -> dict:
    """A window's token_count and calibration: a few counted by the server's tokenizer,
    calibrated within the tolerance, beyond it, or not at all."""
    if w not in (1, 6, 10, 14):
        return {"token_count": rng.choice(np.array(["usage", None], dtype=object)),
                "calibration_rel_error": np.nan, "calibration_detail": None}
    error = rng.choice([0.0, 0.004, 0.05, np.nan])
    return {"token_count": "server_tokenizer", "calibration_rel_error": error,
            "calibration_detail": None if np.isnan(error) else f"5 of 5 calibration requests: "
                                                             f"{error:+.2%}"}


def random_ruler(rng: np.random.Generator) -> dict:
    """A window's client lag (issue #21): not measured, well within its bound, or beyond it;
    bounded by the sweep, by its medians, or by nothing."""
    lag = rng.choice([np.nan, 0.02, 0.5, 12.3])
    return {"client_lag_p99_ms": lag,
            "client_lag_p50_ms": np.nan if np.isnan(lag) else rng.choice([np.nan, lag / 3]),
            "client_cpu_share": rng.choice([np.nan, 0.35, 0.98]),
            "bunched_event_fraction": rng.choice([np.nan, 0.0, 0.41]),
            "median_ttft_ms": rng.choice([np.nan, 7.4, 2500.0]),
            "median_decode_span_ms": rng.choice([np.nan, 254.0, 3.0]),
            "max_client_lag_ms": rng.choice([np.nan, np.nan, 1.0])}


def random_delivery(rng: np.random.Generator) -> dict:
    """How a window's streams arrived and whether its counters could be read (issue #22):
    no request of 2 or more content events, none or a few delivered in one read, or most,
    bounded by the sweep or the default; not reconciled, read, or some unreadable, with
    or without a known server family."""
    streamed = rng.choice([np.nan, 0, 20])
    one_read = np.nan if np.isnan(streamed) else rng.choice([0, 2, 3, streamed])
    unreadable = rng.choice([np.nan, 0, 3])
    return {"streamed_requests": streamed, "one_read_requests": one_read,
            "max_burst_fraction": rng.choice([np.nan, 0.1, 0.5]),
            "counters_unreadable": unreadable,
            "unreadable_detail": None if np.isnan(unreadable) or not unreadable
            else rng.choice(["vllm:generation_tokens_total: not reconciled (timed out)", None]),
            "server_family": rng.choice(np.array([None, "vllm"], dtype=object))}


def reference_min(rows: list[dict]) -> tuple[bool, str, str]:
    """T4's n per window: the sweep's, at least 15 where the evidence showed speculation
    (issue #23), and why where the sweep asked for fewer."""
    expected, ok = [], True
    for r in rows:
        observed = r.get("speculation_observed")
        required = r["min_requests"]
        text = ""
        if isinstance(observed, str) and required < 15:
            required = 15
            evidence = [f"{name} {r[column]:.2f}" for name, column in
                        (("acceptance length", "spec_acceptance_length"),
                         ("tokens per chunk", "streamed_tokens_per_chunk"))
                        if not null(r.get(column))]
            text = (f" (speculative, {observed}"
                    + (f": {', '.join(evidence)}" if evidence else "")
                    + f"; the sweep declared it non-speculative, n >= {r['min_requests']})")
        ok = ok and r["completed"] >= required
        expected.append(f"completed >= {required}{text}")
    return ok, "; ".join(expected), join(r["completed"] for r in rows)


def random_speculation(rng: np.random.Generator) -> dict:
    """Issue #23's evidence: mostly none, else counters or chunks showing speculation."""
    kind = rng.choice(np.array([None, None, "observed: counters", "observed: chunks"],
                               dtype=object))
    return {"speculation_observed": kind,
            "spec_acceptance_length": rng.uniform(1.5, 3.0)
            if kind == "observed: counters" else np.nan,
            "streamed_tokens_per_chunk": rng.choice([rng.uniform(1.2, 4.0), np.nan])
            if kind is not None else rng.choice([1.0, np.nan])}


def random_energy(rng: np.random.Generator) -> dict:
    """Issue #39's columns: an arm with or without energy, a window with its joules or
    unreadable, and why."""
    return {"energy_expected": rng.choice([1.0, 1.0, 0.0, np.nan]),
            "window_energy_j": rng.choice([1234.56, np.nan]),
            "energy_source": rng.choice(np.array(["energy counter", None], dtype=object)),
            "energy_gaps": rng.choice(np.array([
                "readings that cannot be true: local/gpu0: negative power reading (-600 W)",
                "", None], dtype=object))}


def random_run(seed: int, *, object_strings: bool = False,
               ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    extra = np.random.default_rng(seed + 1000)  # issue #13's columns
    texts = np.random.default_rng(seed + 2200)  # issue #22's: the text-bearing events
    ruler = np.random.default_rng(seed + 2000)  # issue #21's
    delivery = np.random.default_rng(seed + 2100)  # issue #22's windows
    speculation = np.random.default_rng(seed + 2300)  # issue #23's
    energy = np.random.default_rng(seed + 2400)  # issue #39's
    n_restarts = 5
    restarts = pd.DataFrame({
        "restart_id": [f"r{i}" for i in range(n_restarts)],
        "status": rng.choice(["ok", "ok", "ok", "external", "failed", None], n_restarts),
        "clock_ratio": rng.choice([0.95, 0.97, 0.5, np.nan], n_restarts),
        "min_clock_ratio": rng.choice([0.9, 0.9, np.nan], n_restarts),
        "require_clock_check": rng.choice(np.array([True, False, None], dtype=object),
                                          n_restarts),
        "clock_detail": rng.choice(np.array(["GPU 0: median 2400 of 2520 MHz", None],
                                            dtype=object), n_restarts),
    })
    restarts = pd.concat([restarts, restarts.iloc[[1]].assign(status="crashed")],
                         ignore_index=True)  # a restart id twice
    window_rows, request_rows = [], []
    for w in range(16):
        window_id = f"r{w % n_restarts}-w{w}"
        n = 0 if w in (4, 11) else int(rng.integers(1, 400))  # two windows without requests
        statuses = rng.choice(["completed"] * 30 + ["failed", "unresolved", None], n)
        p_bad = rng.choice([0.0, 0.002, 0.02, 0.2])
        token = np.where(rng.random(n) < p_bad,
                         rng.choice(np.array(["missing", "chunks", "max_tokens", None],
                                             dtype=object), n), "usage")
        if w == 7:
            token[:] = "missing"  # a whole window without usage
        temperature = np.where(rng.random(n) < p_bad, rng.choice([0.7, 1.0, np.nan], n), 0.0)
        temperature[rng.random(n) < 0.01] = -0.0  # passes (== 0.0), shows as -0.0
        ttft = rng.gamma(4.0, 0.01, n).round(4)
        e2e = (ttft + rng.uniform(0.5, 3.0, n)).round(4)
        late = rng.random(n) < p_bad
        ttft[late] = e2e[late] + rng.choice([0.0, 0.5], late.sum())  # equal times pass
        ttft[rng.random(n) < 0.01] = np.nan
        e2e[rng.random(n) < 0.01] = np.nan
        usage = random_usage(rng, n, p_bad, everything_absurd=w == 9)
        # Issue #13, from its own generator (the draws above stay as they were): windows
        # counted from logprobs, whose usage mostly agrees; elsewhere usage's own count.
        usage["usage_output_tokens"] = usage["output_tokens"].copy()
        if w in (3, 12):
            token = np.where(token == "usage", "logprobs", token)
            off = extra.random(n) < 0.05
            usage["usage_output_tokens"][off] += extra.choice([1, -2, np.nan], off.sum())
        # Issue #22: the text-bearing events, mostly fewer than the tokens; a few more
        # (usage below the events), and some not handed over (NULL: not judged).
        events = np.floor(np.abs(np.nan_to_num(usage["output_tokens"])) / 2)
        events[texts.random(n) < p_bad] += 200
        events[texts.random(n) < 0.01] = np.nan
        usage["chunks"] = events
        request_rows += [{"request_id": f"{window_id}-q{i}", "window_id": window_id,
                          "status": statuses[i], "token_source": token[i],
                          "temperature": temperature[i], "ttft_s": ttft[i], "e2e_s": e2e[i],
                          **{column: values[i] for column, values in usage.items()}}
                         for i in range(n)]
        completed = int((statuses == "completed").sum())
        failed = int((statuses == "failed").sum())
        unresolved = n - completed - failed
        error = rng.choice([0.0, 0.004, 0.05, np.nan])
        window_rows.append({
            "window_id": window_id, "submitted": n + int(rng.random() < 0.15),
            "completed": completed, "failed": failed, "unresolved": unresolved,
            "min_requests": int(rng.choice([5, 15])),
            "reconcile_tolerance": rng.choice([0.01, 0.01, np.nan]),
            "generation_error": error, "prompt_error": rng.choice([0.0, 0.02]),
            "success_error": np.nan,
            "generation_detail": None if np.isnan(error) else f"delta vs usage ({error:+.1%})",
            "prompt_detail": "prompt delta", "success_detail": None,
            **random_calibration(extra, w), **random_ruler(ruler),
            **random_delivery(delivery), **random_speculation(speculation),
            **random_energy(energy),
        })
    windows = pd.DataFrame(window_rows)
    windows = pd.concat([windows, windows.iloc[[2]].assign(submitted=0)],
                        ignore_index=True)  # a window id twice
    requests = pd.DataFrame(request_rows)
    orphans = requests[requests["window_id"] == "r0-w5"].head(3).assign(window_id="r9-w99")
    requests = pd.concat([requests, orphans], ignore_index=True)  # a window not in windows
    requests = requests.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    if object_strings:  # as older pandas or hand-built frames give them
        for column in ("status", "token_source"):
            requests[column] = requests[column].astype(object).where(
                requests[column].notna(), None)
    return restarts, windows, requests


@pytest.mark.parametrize("object_strings", [False, True], ids=["str", "object"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gate_results_equal_a_row_by_row_reference(seed, object_strings):
    restarts, windows, requests = random_run(seed, object_strings=object_strings)
    got = run_gate(restarts, windows, requests)
    want = reference_gate(restarts, windows, requests)
    assert [(r.suite, r.subject, r.expectation) for r in got] == [
        (r.suite, r.subject, r.expectation) for r in want]
    mismatches = [(g, w) for g, w in zip(got, want, strict=True) if g != w]
    assert not mismatches, mismatches[:3]
    # The run has every kind of trouble, so both verdicts of every request rule occur.
    verdicts = {(r.expectation, r.success) for r in got if r.suite == "measured_requests"}
    assert len(verdicts) == 2 * len(rules_of_suite("measured_requests")), verdicts


def test_reference_sees_the_troubles_it_was_given():
    # The comparison means something only if the random runs break the rules in many ways.
    found = [r.found for seed in range(4) for r in reference_gate(*random_run(seed))
             if not r.success]
    text = "\n".join(found)
    for trouble in ("NULL", "'missing'", "0.7", ", ...", " != ", "ttft_s > e2e_s: ",
                    "'crashed'", "output_tokens 1000000000 above max_tokens 8",
                    "output_tokens -5 below 0", "prompt_tokens NULL", "cached_tokens 4000 above",
                    "output_tokens 2.5 not an integer", "max_tokens NULL",
                    "prompt_tokens 1000000000 above 16777216",
                    # issue #13: logprobs against usage, tokenizer calibrations
                    "with usage disagree: ", "above reconcile_tolerance: ",
                    "no calibration: no detail",
                    # issue #21: a late client, bounded by the sweep and by the medians
                    "client lag p99 12.3 ms (", "of events bunched",
                    # issue #22: usage below the events, answers delivered in one read
                    "below chunks", "20 of 20 arrived whole in one read (100%)",
                    # and counters that could not be read
                    "counter unreadable: vllm:generation_tokens_total: not reconciled",
                    "counter unreadable: no detail; the server's family (vllm)",
                    # issue #39: a GPU page that lies, and a window without telemetry
                    "energy unreadable: readings that cannot be true: local/gpu0",
                    "energy unreadable: no GPU telemetry over the window"):
        assert trouble in text, trouble


# --- the per-value counting behind the found texts ----------------------------------------


@pytest.mark.parametrize("values", [
    pd.Series([0.0, -0.0, np.nan, 0.7, 0.0, np.nan, 1.0, -0.0]),
    pd.Series(["usage", None, "missing", "chunks", "missing", None, "usage"]),
    pd.Series(["usage", None, "missing", "chunks"], dtype=object),
    pd.Series(["a", np.str_("a"), None], dtype=object),  # equal, shown differently
    pd.Series([1, 1.0, True, "1", None], dtype=object),  # equal, shown differently
    pd.Series([3, 1, 3, 2]),
    pd.Series([True, False, True]),
    pd.Series(pd.array([1, None, 1], dtype="Int64")),
    pd.Series(["x", "y", "x"], dtype="category"),
], ids=["float", "str", "object-str", "np-str", "mixed", "int", "bool", "Int64", "category"])
def test_found_counts_equal_row_by_row_counts(values):
    rng = np.random.default_rng(7)
    for rows in (np.arange(len(values)), np.sort(rng.choice(len(values), 3, replace=False))):
        assert _summarise_rows(values, rows) == _summarise(values.iloc[rows])
        assert _summarise(values.iloc[rows]) == summarise(list(values.iloc[rows]))


def test_show_is_the_reference_show():
    for value in (None, np.nan, "x", 0.7, -0.0, 3, np.float64(1.5), True, pd.NA):
        assert _show(value) == show(value)


# --- what validate_run reads from the warehouse ------------------------------------------

RUN_ID = "manual__2026-11-30T00:00:00+00:00"
SWEEP = sweep(
    "scale",
    [simulator_arm("a")],
    defaults={"requests": 6, "warmup": 1, "restarts": 2},
    workloads=["code", "prose"],
)


@pytest.fixture
def warehouse(tmp_path):
    windows = {}
    for k in (0, 1):
        for workload in ("code", "prose"):
            window_id = RunLayout(tmp_path / "data", RUN_ID).window_id("a", k, workload, 1)
            rows = [request_row(window_id, 0, warm=True, tokens=9, submit_s=0)]
            rows += [request_row(window_id, i, status=status, tokens=20 + i,
                                 submit_s=100 + i * 10)
                     for i, status in enumerate(["completed"] * 9 + ["failed", "unresolved"])]
            rows[3].update(output_tokens=None, token_source="missing")  # no usage
            rows[1:] = rows[:0:-1]  # written out of request_id order
            windows[("a", k, workload)] = (rows, {"drain_deadline_s": 1000})
    con = connect(":memory:")
    load_run_dir(con, write_synthetic_run(tmp_path, SWEEP, windows, run_id=RUN_ID).run_dir)
    yield con
    con.close()


def test_gate_requests_are_the_measured_requests_in_their_order(warehouse):
    got = gate_requests(warehouse, RUN_ID)
    want = query_frame(warehouse, "measured_requests", run_id=RUN_ID)[list(REQUEST_COLUMNS)]
    assert len(got) == 4 * 11
    # Arrow hands integer columns with NULLs (usage counts) to pandas as float64 and .df()
    # as Int64: the same values, which the gate reads alike.
    pd.testing.assert_frame_equal(got, want.astype(got.dtypes.to_dict()))


def test_reconcile_run_sums_what_the_row_by_row_reference_sums(warehouse):
    stored = reconcile_run(warehouse, RUN_ID)
    windows = warehouse.execute("SELECT * FROM windows WHERE run_id = ?", [RUN_ID]).df()
    requests = warehouse.execute(
        "SELECT window_id, is_warmup, status, output_tokens, prompt_tokens "
        "FROM request_records").df()
    no_metrics = pd.DataFrame(columns=["window_id", "phase", "name", "labels", "value"])
    one_by_one = pd.DataFrame(
        [row for _, w in windows.iterrows()
         for row in reconcile_requests(w, requests[requests["window_id"] == w["window_id"]],
                                       no_metrics)], columns=stored.columns)
    pd.testing.assert_frame_equal(stored, one_by_one)
    generation = stored[stored["counter"] == "vllm:generation_tokens_total"]
    # 9 completed minus the one without usage: 20 + 21 + 23 + ... + 28; never the warm-up's
    assert set(generation["client_value"]) == {float(sum(range(20, 29)) - 22)}
