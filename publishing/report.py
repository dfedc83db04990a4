"""Plain-text tables of entries for the terminal (the CLI's printed output)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from benchledger.publishing.formatting import (
    answers_said,
    count,
    missing,
    percent,
    person_frame,
    person_unit,
    person_value,
    signed,
    significant,
    text_interval,
    text_number,
)
from benchledger.rules.core import RECONCILED

if TYPE_CHECKING:
    import duckdb

# The few entries a reader looks at first; every other entry is in the warehouse and the
# exports. (metric, numerator) pairs; statistic is always the mean here.
HEADLINE = (("decode_rate", "output_tokens"), ("e2e_rate", "output_tokens"),
            ("ttft", None), ("throughput", "output_tokens"),
            ("energy_per_token", "gpu_energy_j"))


def load_point(row: object) -> str:
    """A row's load point: c=8, or c=64 r=2.5 on a rate ladder (issue #27)."""
    point = getattr(row, "load_point", None)
    if isinstance(point, str) and point:
        return point.replace("c", "c=", 1).replace("-r", " r=")
    return f"c={getattr(row, 'concurrency', '')}"


def _get(row: Any, column: str) -> Any:
    """A label of an entry row, None where the frame lacks it (derived before it existed)."""
    return getattr(row, column, None)


def _known(value: Any) -> bool:
    return not missing(value)


def headline(entries: pd.DataFrame) -> pd.DataFrame:
    pairs = set(HEADLINE)
    wanted = pd.Series([(m, n if isinstance(n, str) else None) in pairs
                        for m, n in zip(entries["metric"], entries["numerator"], strict=True)],
                       index=entries.index, dtype=bool)
    return entries[wanted & (entries["statistic"] == "mean")]


def format_entries(entries: pd.DataFrame) -> str:
    """One line per entry: the value with its interval, n, restarts and its labels."""
    if entries.empty:
        return "  (none)"
    # scipy, behind it, is imported only when entries are shown (the CLI starts fast)
    from benchledger.stats import restart_interval_meaning

    # latencies in ms, as a person reads them (the warehouse and exports keep seconds)
    entries = person_frame(entries, ["value", "ci95_low", "ci95_high", "restart_mean",
                                     "restart_ci95_low", "restart_ci95_high"])
    rows = []
    df, reaches_zero, needed = restart_interval_meaning(
        entries["restart_mean"], entries["restart_ci95_high"], entries["n_restarts"])
    for i, e in enumerate(entries.itertuples()):
        effect = e.restart_effect is not None and not pd.isna(e.restart_effect) and bool(
            e.restart_effect)
        flags = [f for f, on in (("restart_effect", effect),
                                 (e.population, e.population != "all_submitted"),
                                 (f"drain {e.drain_status}", e.drain_status == "incomplete"),
                                 # how far the server's counters confirmed the token counts
                                 (f"counters: {e.counter_check}",
                                  e.counter_check != RECONCILED),
                                 # the ruler's own error behind it (T17), where measured
                                 (f"client lag p99 {text_number(_get(e, 'client_lag_p99_ms'))} ms",
                                  _known(_get(e, "client_lag_p99_ms"))),
                                 (f"{count(_get(e, 'n_burst'))} in a burst",
                                  _known(_get(e, "n_burst")) and _get(e, "n_burst") > 0),
                                 # where an energy entry's joules came from (T18)
                                 (f"joules: {_get(e, 'energy_source')}",
                                  _known(_get(e, "energy_source"))))
                 if on]
        rows.append({
            "arm": e.arm, "workload": e.workload, "metric": e.metric, "phase": e.phase,
            "scope": f"{e.scope} {load_point(e)}",
            "numerator": e.numerator if isinstance(e.numerator, str) else "",
            "mean": f"{text_number(e.value)} {e.unit}",
            "95% CI": text_interval(e.ci95_low, e.ci95_high),
            "n": e.n_requests, "restarts": e.n_restarts,
            "restart-level mean [95% CI]":
                f"{text_number(e.restart_mean)} "
                f"{text_interval(e.restart_ci95_low, e.restart_ci95_high)}"
                + (f" (df {df[i]:g})" if _known(df[i]) else ""),
            "labels": ", ".join(flags + [_reaches_zero_label(needed[i])] if reaches_zero[i]
                                else flags),
        })
    return pd.DataFrame(rows).to_string(index=False)


def _reaches_zero_label(needed: float) -> str:
    """Why a restart-level interval of a positive quantity reaches 0, and what would not."""
    more = (f"about {int(needed)} restarts would keep it above 0" if _known(needed)
            else "no number of restarts up to 1000 would keep it above 0")  # MAX_RESTARTS_TO_DECIDE
    return f"restart CI reaches 0 (too few restarts for t; {more})"


def format_blocked(blocks: pd.DataFrame, width: int = 150, *, advice: bool = False,
                   examples: bool = True) -> str:
    """Blocked entries grouped by the rule that blocked them (entry_blocks rows), with one
    example each (`examples`) and what to do (`advice`: the catalogue's fix). An entry
    blocked by two rules is counted under both."""
    lines = []
    for rule, members in blocks.groupby(blocks["rule"].fillna("(not recorded)"), sort=True):
        cells = sorted({f"{m.arm}/{m.workload}/{m.metric}" for m in members.itertuples()})
        first = members.iloc[0]
        example = (f"[{first['subject']}] expected {first['expected']}, found {first['found']}"
                   if isinstance(first["rule"], str) else str(first["blocked_by"]))
        if len(example) > width:
            example = example[: width - 3] + "..."
        shown = ", ".join(cells[:4]) + (", ..." if len(cells) > 4 else "")
        lines.append(f"  {rule}: {members['entry_id'].nunique()} entries ({shown})"
                     + (f"\n      e.g. {example}" if examples else "")
                     + (_fix(rule) if advice else ""))
    return "\n".join(lines)


def _fix(rule: str) -> str:
    """The catalogue's advice for a rule, as a line under it ('' for a name it lacks)."""
    from benchledger.rules import FIXES

    return f"\n      fix: {FIXES[rule]}" if rule in FIXES else ""


# What each kind of subject is called when counting the subjects a rule failed on.
_SUBJECTS = {"restarts": "restarts", "coverage": "planned cells", "windows": "windows",
             "measured_requests": "windows"}


def format_rules_behind(rules: pd.DataFrame, width: int = 150, *,
                        advice: bool = False) -> str:
    """The rules that failed beneath the entries (restarts left out, windows failed), with
    counts, one example each and (`advice`) what to do: the cause where the entries fail
    only for want of a validated window (entry_has_validated_value)."""
    lines = []
    for r in rules.itertuples():
        what = "left out" if r.effect == "exclude_restart" else f"failed ({r.effect})"
        example = (f"[{r.example_subject}] expected {r.example_expected}, "
                   f"found {r.example_found}")
        if len(example) > width:
            example = example[: width - 3] + "..."
        lines.append(f"  {r.rule}: {int(r.n_failed)} of {int(r.n_checked)} "
                     f"{_SUBJECTS.get(r.suite, r.suite)} {what}\n      e.g. {example}"
                     + (_fix(str(r.rule)) if advice else ""))
    return "\n".join(lines)


def _df(c: Any) -> str:
    """The degrees of freedom behind the interval (Welch over restart means)."""
    df = _get(c, "df")
    return f" (df {df:.1f})" if _known(df) and _known(_get(c, "ci95_low")) else ""


def _undecided(c: Any) -> str:
    """An A/B interval over restart means that spans 0: how many restarts would decide."""
    if not (_known(_get(c, "undecided")) and bool(_get(c, "undecided"))):
        return ""
    needed = _get(c, "restarts_to_decide")
    estimate = (f"about {int(needed)} restarts per arm would, at the observed difference "
                "and spread between restarts" if _known(needed)
                # 1000: MAX_RESTARTS_TO_DECIDE of warehouse/compare.py (importing it
                # would bring the gate into the terminal summary)
                else "no number of restarts up to 1000 per arm would at the observed "
                     "difference and spread" if _known(_get(c, "difference"))
                     and _get(c, "difference") != 0 else "there is no difference to find")
    return (f"\n      UNDECIDED: {int(c.a_restarts)} vs {int(c.b_restarts)} restarts cannot "
            f"decide this; {estimate}")


def format_comparisons(comparisons: pd.DataFrame) -> str:
    """Each verdict with its difference, interval, ratio and the control it was held to."""
    if comparisons.empty:
        return "  (none)"
    lines = []
    for c in comparisons.itertuples():
        arrow = "vs" if c.role == "control" else "->"
        head = (f"  {c.role:<7} {c.a} {arrow} {c.b}  {c.workload}  {c.metric} "
                f"c={c.concurrency}: {c.verdict.upper()}")
        numbers = ""
        if c.difference is not None and not pd.isna(c.difference):
            numbers = (f"  difference {text_number(c.difference)} "
                       f"{text_interval(c.ci95_low, c.ci95_high)}{_df(c)}")
            if c.ratio is not None and not pd.isna(c.ratio):
                numbers += f", ratio {significant(c.ratio)}x"
            if c.control_difference is not None and not pd.isna(c.control_difference):
                numbers += f", A/A control difference {text_number(c.control_difference)}"
            detectable = getattr(c, "detectable_relative", None)
            if detectable is not None and not pd.isna(detectable):
                numbers += f", could detect >= {100 * detectable:.3g}%"
        answers = answers_said(c)
        lines.append(f"{head}{numbers}\n      ({c.reason}){_undecided(c)}"
                     + (f"\n      {answers}" if answers else ""))
    return "\n".join(lines)


def format_variance(report: pd.DataFrame) -> str:
    if report.empty:
        return "  (none)"
    rows = [{"arm": r.arm, "workload": r.workload, "metric": r.metric,
             "scope": f"{r.scope} {load_point(r)}", "restarts": r.n_restarts,
             "CV within restarts": percent(r.cv_within_restarts),
             "CV between restarts": percent(r.cv_between_restarts)}
            for r in report.itertuples()]
    return pd.DataFrame(rows).to_string(index=False)


def format_delivered_vs_server(frame: pd.DataFrame) -> str:
    """Delivered rates beside the server's log and counters, each under its own label."""
    if frame.empty:
        return "  (none)"
    rows = []
    for r in frame.itertuples():
        checks = "-" if pd.isna(r.checks) else (
            f"{int(r.reconciled)}/{int(r.checks)} ok" + (
                f", {int(r.mismatched)} MISMATCH" if r.mismatched else ""))
        rows.append({
            "arm": r.arm, "workload": r.workload, "c": r.concurrency,
            "delivered throughput": text_number(r.delivered_throughput),
            "delivered decode": text_number(r.delivered_decode_rate),
            "server_log_peak": text_number(r.server_log_peak),
            "server_log_mean": text_number(r.server_log_mean),
            "tokens/chunk": text_number(r.tokens_per_chunk),
            "acceptance (counters)": text_number(r.counter_acceptance_length),
            "counters reconciled": checks,
        })
    return pd.DataFrame(rows).to_string(index=False)


def format_ruler(windows: pd.DataFrame) -> str:
    """Per window, the ruler's own error (T17): the client's lag and CPU share, events that
    shared a read, requests that arrived in a burst, and whether the lag was within its
    bound."""
    if windows.empty:
        return "  (none)"
    rows = []
    for w in windows.itertuples():
        verdict = ("not measured" if not _known(w.client_lag_p99_ms)
                   else "-" if not _known(w.lag_within_bound)
                   else "within bound" if w.lag_within_bound else "BEYOND BOUND")
        rows.append({
            "arm": w.arm, "workload": w.workload, "load": load_point(w),
            "restart": count(w.restart_index), "workers": count(w.client_workers),
            "lag p50 ms": significant(w.client_lag_p50_ms),
            "lag p99 ms": significant(w.client_lag_p99_ms),
            "CPU share": percent(w.client_cpu_share, 0),
            "bunched events": percent(w.bunched_event_fraction, 0),
            "bursts": f"{int(w.burst_requests)}/{int(w.completed_measured)}",
            "client lag": verdict,
        })
    return pd.DataFrame(rows).to_string(index=False)


def _ruler_worth_showing(windows: pd.DataFrame) -> bool:
    """Whether any window measured its lag or had a burst (else the table is all dashes)."""
    return bool(windows["client_lag_p99_ms"].notna().any()
                or (windows["burst_requests"] > 0).any())


def format_frontier(points: pd.DataFrame, findings: pd.DataFrame) -> str:
    """The frontier's points, one line each, then the frontier comparisons' findings."""
    rows = [{"arm": p.arm, "workload": p.workload,
             "load": ("* " if p.sustained else "  ") + load_point(p),
             "per-user tok/s": f"{text_number(p.per_user_tok_s)} "
                               f"{text_interval(p.per_user_low, p.per_user_high)}",
             "aggregate tok/s": f"{text_number(p.throughput_tok_s)} "
                                f"{text_interval(p.throughput_low, p.throughput_high)}",
             "attainment": percent(p.attainment),
             "saturated": p.saturation_reason if p.saturated else "-"}
            for p in points.itertuples()]
    text = pd.DataFrame(rows).to_string(index=False)
    for f in findings.itertuples():
        text += (f"\n  {f.role} {f.a} vs {f.b}  {f.workload} {f.load_point}: "
                 f"{f.finding.upper()} ({f.reason})")
    return text


def run_tables(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """What `benchledger run` prints of a finished run: the published headline means,
    delivered beside what the server said, blocked entries by rule, the comparisons and
    the variance report; None for a run the warehouse does not hold (never another run's
    numbers in its place)."""
    from benchledger.publishing import read

    if read.run_entry_counts(con, run_id) is None:
        return None
    published = read.published_entries(con, run_id)
    parts = [f"Published entries of run {run_id} (validated only; headline means):",
             format_entries(headline(published)),
             f"\n{len(published)} published entries in all (percentiles, per-user and "
             "aggregate rates, outcomes): benchledger publish / benchledger sql",
             "\nDelivered (tok/s, from per-request usage) beside what the server said "
             "(its log lines and counters; never the delivered rate):",
             format_delivered_vs_server(read.delivered_vs_server(con, run_id))]
    windows = read.ruler(con, run_id)
    if _ruler_worth_showing(windows):
        parts += ["\nThe ruler's own error per window (T17): the client's lateness, events "
                  "that shared a read, requests that arrived in a burst:",
                  format_ruler(windows)]
    blocked = read.blocked_entries(con, run_id)
    if len(blocked):
        parts += [f"\nBlocked entries ({len(blocked)}; not published), by the rule that "
                  "blocked them:", format_blocked(read.blocks(con, run_id))]
        behind = read.rules_behind_blocked(con, run_id)
        if len(behind):
            parts += ["Beneath them, the rules that left restarts out or failed the windows "
                      "and requests they rest on:", format_rules_behind(behind)]
    found = read.comparisons(con, run_id)
    if len(found):
        parts += ["\nComparisons (Welch over restart means, held to the A/A control; "
                  "refuted ones included):", format_comparisons(found)]
    points = read.frontier(con, run_id)
    if len(points):
        parts += ["\nThe frontier (issue #27): per load, per-user decode tok/s against "
                  "aggregate tok/s with restart-level 95% intervals; SLO attainment over all "
                  "submitted requests; * the load the arm sustains:",
                  format_frontier(points, read.frontier_findings(con, run_id))]
    parts += ["\nVariance report (decode rate): spread within vs between restarts",
              format_variance(read.variance(con, run_id))]
    from benchledger.publishing.findings import speculation_findings  # issue #23, item 2

    findings = speculation_findings(con, run_id)
    if findings:
        parts += [f"\n{findings}"]
    return "\n".join(parts)


def format_compared(result: dict) -> str:
    """`benchledger compare`'s answer for people: which entry each side is (arm, workload,
    load point, run), the quantity and its unit, the two values, their difference and
    ratio at the terminal's precision (latencies in ms), each side's interval over its
    restarts where it has one, and the verdict with its reason."""
    a, b = result["a_entry"], result["b_entry"]
    unit = a.get("unit")
    shown_unit = person_unit(unit)
    suffix = f" {shown_unit}" if isinstance(shown_unit, str) and shown_unit else ""

    def number(value: Any) -> str:
        return text_number(person_value(value, unit)) + suffix if _known(value) else "-"

    def side(entry: dict) -> str:
        where = " / ".join(str(entry.get(k)) for k in ("arm", "workload") if entry.get(k))
        point = load_point(pd.Series(entry)) if _known(entry.get("concurrency")) else ""
        low, high = entry.get("restart_ci95_low"), entry.get("restart_ci95_high")
        spread = ""
        if _known(low) and _known(high):
            bounds = text_interval(person_value(low, unit), person_value(high, unit))
            spread = f", {bounds} over {count(entry.get('n_restarts'))} restarts"
        place = ", ".join(part for part in (where, point) if part)
        return (f"{number(entry.get('value'))}{spread}  ({place or 'no arm'}; run "
                f"{entry.get('run_id')}, entry {entry.get('entry_id')})")

    quantity = " ".join(str(a.get(k)) for k in ("metric", "statistic") if a.get(k))
    lines = [f"quantity: {quantity} ({a.get('scope') or 'no scope'}; {result['evidence']} "
             f"evidence, profile {result['profile']}), in {shown_unit or 'no unit'}",
             f"       a: {side(a)}",
             f"       b: {side(b)}",
             f"   b - a: {signed(person_value(result['difference'], unit), shown_unit)}",
             f"   b / a: {significant(result['ratio'])}x" if _known(result["ratio"])
             else "   b / a: -",
             f" verdict: {result['verdict']}: {result['reason']}"]
    return "\n".join(lines)
