"""The report's first screen: the run's verdicts (each A/B comparison and frontier
finding, with its interval and the A/A control's difference), then one card per arm with
its headline numbers, each with its restart-level interval and its labels."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from markupsafe import Markup

from benchledger.publishing.formatting import (
    answers_said,
    cell,
    interval,
    person_unit,
    person_value,
    signed,
    significant,
)
from benchledger.publishing.report import load_point
from benchledger.publishing.templating import fragment
from benchledger.stats import restart_interval_meaning
from benchledger.warehouse.compare import IMPROVEMENT, NO_FINDING, NOT_DECIDABLE, REGRESSION
from benchledger.warehouse.frontier import FINDINGS, NO_CONTROL

VERDICTS_TITLE = "Verdicts"
CARDS_TITLE = "Headline entries"
FINDING_VERDICTS = (IMPROVEMENT, REGRESSION)


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
    if verdict == NO_FINDING and _excludes_zero(row["ci95_low"], row["ci95_high"]):
        return "refuted by the A/A control", "refuted"
    return verdict, "nofinding" if verdict == NO_FINDING else "undecidable"


@dataclass(frozen=True)
class Verdict:
    """One line of the verdicts (templates/report_verdicts.html): its word and style, what
    was compared, the numbers (in the units a person reads), and why where it is not a
    finding (a finding's reason is the rule itself: its tooltip is enough)."""

    css: str
    word: str
    reason: str
    b: str
    a: str
    what: str  # after `b vs a`: the workload, metric and load
    numbers: str
    show_reason: bool


def _comparison_item(row: pd.Series) -> Verdict:
    word, css = verdict_word(row)
    unit = row["unit"]

    def shown(value: object) -> object:
        return person_value(value, unit)

    numerator = f" ({row['numerator']})" if isinstance(row["numerator"], str) else ""
    df = f", df {significant(row['df'])}" if pd.notna(row["df"]) else ""
    restarts = (f"{cell(row['b_restarts'])} vs {cell(row['a_restarts'])} restarts"
                if pd.notna(row["a_restarts"]) else "restarts not counted")
    control = ""
    if isinstance(row["control_a"], str):
        control = (f"; A/A control ({cell(row['control_b'])} vs {cell(row['control_a'])}): "
                   f"{signed(shown(row['control_difference']), person_unit(unit))}")
    numbers = (f"difference (b - a) {signed(shown(row['difference']), person_unit(unit))}, "
               f"95% CI {interval(shown(row['ci95_low']), shown(row['ci95_high']))}{df} "
               f"({restarts}){control}{_design(row)}")
    if answers := answers_said(row):
        numbers += f"; {answers}"
    return Verdict(css, word, cell(row["reason"]), cell(row["b"]), cell(row["a"]),
                   f", {cell(row['workload'])}, {cell(row['metric'])}{numerator} at "
                   f"{load_point(row)}", numbers, css != "finding")


def _controls_item(controls: pd.DataFrame) -> Verdict:
    """Every A/A control (an arm against its twin) with its own verdict, in one line, pair
    by pair: what each A/B above is held to, and whether it could decide at all."""
    words = [str(row["verdict"]) for _, row in controls.iterrows()]  # the control's own
    said: dict[tuple[str, str], list[str]] = {}  # (pair, verdict): what it was said of
    for word, (_, row) in zip(words, controls.iterrows(), strict=True):
        said.setdefault((f"{cell(row['b'])} vs {cell(row['a'])}", word.upper()), []).append(
            f"{cell(row['workload'])} {cell(row['metric'])} {load_point(row)}")
    text = "; ".join(f"{pair}: {word} on {', '.join(cells)}"
                     for (pair, word), cells in said.items())
    css = "undecidable" if NOT_DECIDABLE in words else "nofinding"
    return Verdict(css, "A/A controls", "an arm against its twin: the noise each A/B above "
                   "is held to", "", "", "", text, False)


def _design(row: pd.Series) -> str:
    """What the comparison could have detected, its drift and its order (issue #41)."""
    parts = []
    detectable = row.get("detectable_relative")
    if detectable is not None and pd.notna(detectable):
        parts.append(f"could detect >= {significant(100 * detectable)}% (80% power)")
    drift = row.get("drift")
    if drift is not None and pd.notna(drift):
        parts.append(f"drift over the sweep {significant(100 * drift)}%")
    if row.get("restart_order") == "arm_by_arm":
        parts.append("restarts ran arm by arm")
    return "; " + ", ".join(parts) if parts else ""


def _frontier_item(row: pd.Series) -> Verdict:
    finding = str(row["finding"])
    css = ("finding" if finding in FINDINGS
           else "undecidable" if finding == NOT_DECIDABLE else "nofinding")
    role = "" if row["role"] == "ab" else f" ({cell(row['role'])})"
    # a finding's reason is only its tooltip, but one held to no control says so in view
    unheld = (f"; {NO_CONTROL}" if css == "finding" and NO_CONTROL in str(row["reason"])
              else "")
    numbers = (f"throughput {signed(row['throughput_difference'], 'tok/s')} "
               f"{interval(row['throughput_ci95_low'], row['throughput_ci95_high'])}, per user "
               f"{signed(row['per_user_difference'], 'tok/s')} "
               f"{interval(row['per_user_ci95_low'], row['per_user_ci95_high'])}{unheld}")
    return Verdict(css, f"frontier: {finding}", cell(row["reason"]), cell(row["b"]),
                   cell(row["a"]), f"{role}, {cell(row['workload'])} at {load_point(row)}",
                   numbers, css != "finding")


def verdicts_section(comparisons: pd.DataFrame, frontier_findings: pd.DataFrame) -> Markup:
    """Each A/B comparison (its A/A controls are shown in it, not on their own) and each
    frontier finding; a plain sentence where the run compared nothing."""
    ab = comparisons[comparisons["role"] == "ab"]
    items = [_comparison_item(row) for _, row in ab.iterrows()]
    items += [_frontier_item(row) for _, row in frontier_findings.iterrows()]
    # every A/A control's own verdict in view, decidable or not: a control that cannot
    # decide limits every A/B held to it, and a reader must see that first
    controls = comparisons[comparisons["role"] == "control"]
    if len(controls):
        items.append(_controls_item(controls))
    return fragment("report_verdicts.html", title=VERDICTS_TITLE, items=items)


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


@dataclass(frozen=True)
class Number:
    """One number of a card (templates/report_cards.html): what, the entry's value as
    published and its unit, its restart-level interval; then restarts and labels."""

    entry_id: str
    label: str
    value: object
    unit: str
    spread: str
    labels: str


def _number(entry: pd.Series, label: str) -> Number:
    # In the unit a person reads, like the tables below (TTFT in ms, stored in seconds):
    # tests/integration/publishing/test_publication.py reads each card against published_entries
    # scaled the same way.
    stored_unit = entry["unit"] if isinstance(entry["unit"], str) else ""
    unit = person_unit(stored_unit)
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
    return Number(cell(entry["entry_id"]), label, person_value(entry["value"], stored_unit),
                  unit, interval(person_value(entry["restart_ci95_low"], stored_unit),
                                 person_value(entry["restart_ci95_high"], stored_unit)),
                  " · ".join(labels))


def headline_numbers(entries: pd.DataFrame) -> list[tuple[str, str, str, pd.Series]]:
    """(arm, workload, label, entry) of every number the cards show, in card order."""
    found = []
    for (arm, workload), mine in entries.groupby(["arm", "workload"], sort=True):
        for headline in HEADLINES:
            entry = _pick(mine, headline)
            if entry is not None:
                found.append((str(arm), str(workload), headline.label, entry))
    return found


def cards_section(entries: pd.DataFrame) -> Markup:
    """One card per arm of this pipeline's published entries, a block per workload."""
    numbers = headline_numbers(entries)
    cards = [(arm, [(workload, [_number(entry, label) for a, w, label, entry in numbers
                                if (a, w) == (arm, workload)])
                    for workload in dict.fromkeys(w for a, w, *_ in numbers if a == arm)])
             for arm in dict.fromkeys(arm for arm, *_ in numbers)]
    return fragment("report_cards.html", title=CARDS_TITLE, cards=cards)
