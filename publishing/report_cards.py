"""The report's first screen: the run's verdicts (each A/B comparison and frontier
finding, with its interval and the A/A control's difference), then one card per arm with
its headline numbers, each with its restart-level interval and its labels."""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from benchledger.publishing.report import load_point
from benchledger.publishing.report_markup import cell, esc, interval
from benchledger.stats import restart_interval_meaning
from benchledger.warehouse.frontier import NO_CONTROL

VERDICTS_TITLE = "Verdicts"
CARDS_TITLE = "Headline entries"
FINDING_VERDICTS = ("improvement", "regression")


def _excludes_zero(low: float | None, high: float | None) -> bool:
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return False
    return low > 0 or high < 0


def verdict_word(row: pd.Series) -> tuple[str, str]:
    """What a reader is told first, and its style: a finding (improvement, regression);
    'refuted' where the A/B's interval excluded 0 but its difference was no larger than the
    A/A control's (warehouse/compare.py decide: that is the only 'no finding' whose
    interval excludes 0); 'no finding'; 'not decidable'."""
    verdict = str(row["verdict"])
    if verdict in FINDING_VERDICTS:
        return f"finding: {verdict}", "finding"
    if verdict == "no finding" and _excludes_zero(row["ci95_low"], row["ci95_high"]):
        return "refuted by the A/A control", "refuted"
    return verdict, "nofinding" if verdict == "no finding" else "undecidable"


def _signed(value: float | None, unit: object) -> str:
    if value is None or pd.isna(value):
        return "not computed"
    unit_text = f" {unit}" if isinstance(unit, str) and unit else ""
    return f"{float(value):+.4g}{unit_text}"


def _comparison_item(row: pd.Series) -> str:
    word, css = verdict_word(row)
    numerator = f" ({row['numerator']})" if isinstance(row["numerator"], str) else ""
    what = (f"<b>{esc(row['b'])}</b> vs {esc(row['a'])}, {esc(row['workload'])}, "
            f"{esc(row['metric'])}{esc(numerator)} at {esc(load_point(row))}")
    df = f", df {float(row['df']):.3g}" if pd.notna(row["df"]) else ""
    restarts = (f"{cell(row['b_restarts'])} vs {cell(row['a_restarts'])} restarts"
                if pd.notna(row["a_restarts"]) else "restarts not counted")
    control = ""
    if isinstance(row["control_a"], str):
        control = (f"; A/A control ({esc(row['control_b'])} vs {esc(row['control_a'])}): "
                   f"{esc(_signed(row['control_difference'], row['unit']))}")
    return (f"<li class='verdict {css}' title='{esc(row['reason'])}'><span class='word'>"
            f"{html.escape(word)}</span> {what}: difference (b - a) "
            f"{esc(_signed(row['difference'], row['unit']))}, 95% CI "
            f"{esc(interval(row['ci95_low'], row['ci95_high']))}{esc(df)} "
            f"({esc(restarts)}){control}{_reason(row['reason'], css)}</li>")


def _reason(reason: object, css: str) -> str:
    """Why, in words: a finding's reason is the rule itself (a tooltip is enough); a
    verdict that is not a finding says what stopped it."""
    return "" if css == "finding" else f"<div class='reason'>{esc(reason)}</div>"


def _frontier_item(row: pd.Series) -> str:
    finding = str(row["finding"])
    css = ("finding" if finding in ("b dominates", "a dominates", "trade-off")
           else "undecidable" if finding == "not decidable" else "nofinding")
    role = "" if row["role"] == "ab" else f" ({esc(row['role'])})"
    # a finding's reason is only its tooltip, but one held to no control says so in view
    unheld = (f"; {esc(NO_CONTROL)}" if css == "finding" and NO_CONTROL in str(row["reason"])
              else "")
    return (f"<li class='verdict {css}' title='{esc(row['reason'])}'><span class='word'>"
            f"frontier: {esc(finding)}</span> "
            f"<b>{esc(row['b'])}</b> vs {esc(row['a'])}{role}, {esc(row['workload'])} at "
            f"{esc(load_point(row))}: throughput "
            f"{esc(_signed(row['throughput_difference'], 'tok/s'))} "
            f"{esc(interval(row['throughput_ci95_low'], row['throughput_ci95_high']))}, per user "
            f"{esc(_signed(row['per_user_difference'], 'tok/s'))} "
            f"{esc(interval(row['per_user_ci95_low'], row['per_user_ci95_high']))}{unheld}"
            f"{_reason(row['reason'], css)}</li>")


def verdicts_section(comparisons: pd.DataFrame, frontier_findings: pd.DataFrame) -> list[str]:
    """Each A/B comparison (its A/A controls are shown in it, not on their own) and each
    frontier finding; a plain sentence where the run compared nothing."""
    ab = comparisons[comparisons["role"] == "ab"]
    items = [_comparison_item(row) for _, row in ab.iterrows()]
    items += [_frontier_item(row) for _, row in frontier_findings.iterrows()]
    body = (f"<ul class='verdicts'>{''.join(items)}</ul>" if items else
            "<p class='none'>No verdict: this run compared no arms (its sweep declares no "
            "<code>[[comparisons]]</code>), so the numbers below are measurements, not "
            "findings.</p>")
    return [f"<section id='verdicts'><h2>{VERDICTS_TITLE}</h2>",
            "<p class='note'>A finding: the 95% interval of the difference over restart "
            "means excludes 0, and the difference exceeds the A/A control's (an arm against "
            "its twin) where the sweep names one.</p>", body, "</section>"]


@dataclass(frozen=True)
class Headline:
    """One number of a card: which entries it is taken from and at which load."""

    label: str
    metric: str
    statistic: str
    aggregate: bool  # scope: aggregate (window-level) or per request
    numerators: tuple[str | None, ...]  # first present wins
    highest_load: bool


HEADLINES = (
    Headline("single-stream decode", "decode_rate", "mean", False,
             ("output_tokens", "answer_tokens", "output_tokens_with_reasoning"), False),
    Headline("aggregate throughput", "throughput", "mean", True,
             ("output_tokens", "answer_tokens", "output_tokens_with_reasoning"), True),
    Headline("TTFT p50", "ttft", "p50", False, (None,), False),
    Headline("TTFT p90", "ttft", "p90", False, (None,), False),
    Headline("goodput", "goodput", "mean", True,
             ("output_tokens", "output_tokens_with_reasoning", "requests_meeting_all_slos"),
             True),
    Headline("energy per token", "energy_per_token", "mean", True, ("gpu_energy_j",), True),
)


def _load_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Lowest load first: a rate ladder's rate, then the concurrency."""
    key = frame.assign(_rate=frame["requested_rate_rps"].fillna(-1.0))
    return key.sort_values(["_rate", "concurrency"], kind="stable").drop(columns="_rate")


def _pick(entries: pd.DataFrame, headline: Headline) -> pd.Series | None:
    rows = entries[(entries["metric"] == headline.metric)
                   & (entries["statistic"] == headline.statistic)
                   & ((entries["scope"] == "aggregate") == headline.aggregate)]
    for numerator in headline.numerators:
        mine = rows[rows["numerator"].isna()] if numerator is None else rows[
            rows["numerator"] == numerator]
        if not mine.empty:
            ordered = _load_order(mine)
            return ordered.iloc[-1 if headline.highest_load else 0]
    return None


def _number_line(entry: pd.Series, label: str) -> str:
    """Two lines: what, value and unit, restart-level interval; then restarts and labels."""
    unit = entry["unit"] if isinstance(entry["unit"], str) else ""
    restarts = int(entry["n_restarts"]) if pd.notna(entry["n_restarts"]) else 0
    _, reaches_zero, needed = restart_interval_meaning(
        [entry["restart_mean"]], [entry["restart_ci95_high"]], [entry["n_restarts"]])
    labels = [f"{restarts} restart{'s' if restarts != 1 else ''}"]
    if reaches_zero[0]:
        labels.append("interval reaches 0: too few restarts" + (
            f" (about {int(needed[0])} would keep it above 0)" if needed[0] == needed[0]
            else ""))
    labels += [str(v) for v in (entry["population"], entry["numerator"], load_point(entry),
                                entry["scope"]) if isinstance(v, str) and v]
    return (f"<div class='number' data-entry='{esc(entry['entry_id'])}'>"
            f"<span class='what'>{html.escape(label)}</span>"
            f"<span class='figure'><span class='value'>{esc(entry['value'])}</span> "
            f"<span class='unit'>{html.escape(unit)}</span></span>"
            f"<span class='spread' title='restart-level 95% interval'>"
            f"{html.escape(interval(entry['restart_ci95_low'], entry['restart_ci95_high']))}"
            f"</span><span class='labels'>{html.escape(' · '.join(labels))}</span></div>")


def headline_numbers(entries: pd.DataFrame) -> list[tuple[str, str, str, pd.Series]]:
    """(arm, workload, label, entry) of every number the cards show, in card order."""
    found = []
    for (arm, workload), mine in entries.groupby(["arm", "workload"], sort=True):
        for headline in HEADLINES:
            entry = _pick(mine, headline)
            if entry is not None:
                found.append((str(arm), str(workload), headline.label, entry))
    return found


def cards_section(entries: pd.DataFrame) -> list[str]:
    """One card per arm of this pipeline's published entries, a block per workload."""
    numbers = headline_numbers(entries)
    cards = []
    for arm in dict.fromkeys(arm for arm, *_ in numbers):
        blocks = []
        for workload in dict.fromkeys(w for a, w, *_ in numbers if a == arm):
            lines = "".join(_number_line(entry, label)
                            for a, w, label, entry in numbers if (a, w) == (arm, workload))
            blocks.append(f"<h4>{html.escape(workload)}</h4>{lines}")
        cards.append(f"<div class='card'><h3>{html.escape(arm)}</h3>{''.join(blocks)}</div>")
    body = (f"<div class='cards'>{''.join(cards)}</div>" if cards else
            "<p class='none'>No published entry to show: every entry of this run was "
            "blocked (see the blocked entries below).</p>")
    return [f"<section id='headline'><h2>{CARDS_TITLE}</h2>",
            "<p class='note'>Per arm and workload: single-stream decode and TTFT at the "
            "lowest load; aggregate throughput, goodput (where the sweep has SLOs) and "
            "energy per token (where measured) at the highest. Each value has its "
            "restart-level 95% interval [low, high], then its restarts and labels "
            "(population · numerator · load point · scope).</p>",
            body, "</section>"]
