"""What `benchledger run` prints of a finished run (issue #43, item 3): a summary a person
reads in one screen, the rest in the report and behind `run --verbose`.

A run that published nothing starts with why (:func:`why_blocked`): each rule that blocked
its entries or failed beneath them, with its count, one expected/found and what to do (the
catalogue's advice, benchledger.rules.FIXES). A run that published prints its headline
entries (at most MAX_HEADLINE_ROWS), one line per blocking rule and one per comparison.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchledger.publishing import read
from benchledger.publishing.report import (
    format_blocked,
    format_entries,
    format_rules_behind,
    headline,
    load_point,
)

if TYPE_CHECKING:
    import duckdb

# Headline entries shown in the summary; a sweep of many arms and loads has more, and the
# report (and `run --verbose`) shows them all.
MAX_HEADLINE_ROWS = 12
MAX_COMPARISONS = 8


def why_blocked(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The rules that blocked the run's entries and those beneath them, each with one
    example and what to do; None when no entry is blocked."""
    blocked = read.blocked_entries(con, run_id)
    if not len(blocked):
        return None
    parts = [f"Blocked entries ({len(blocked)}; not published), by the rule that blocked "
             "them, with what to do:",
             format_blocked(read.blocks(con, run_id), advice=True)]
    behind = read.rules_behind_blocked(con, run_id)
    if len(behind):
        parts += ["Beneath them, the rules that left restarts out or failed the windows and "
                  "requests they rest on:", format_rules_behind(behind, advice=True)]
    return "\n".join(parts)


def run_summary(con: duckdb.DuckDBPyConnection, run_id: str, *,
                with_blocked: bool = True) -> str | None:
    """The headline entries, the rules that blocked others (one line each, unless
    `with_blocked` is False: the caller printed why_blocked) and the comparisons' verdicts;
    None for a run the warehouse does not hold."""
    counts = read.run_entry_counts(con, run_id)
    if counts is None:
        return None
    shown = headline(read.published_entries(con, run_id))
    parts = [f"Published entries of run {run_id}: {counts['published']} of "
             f"{counts['entries']} (headline means below; every entry is in the report, "
             "`benchledger publish` and `benchledger sql`)"]
    if len(shown):
        parts.append(format_entries(shown.head(MAX_HEADLINE_ROWS)))
        if len(shown) > MAX_HEADLINE_ROWS:
            parts.append(f"  ... {len(shown) - MAX_HEADLINE_ROWS} more headline entries "
                         "(run --verbose, or the report)")
    if with_blocked and counts["blocked"]:
        parts += [f"Blocked entries ({counts['blocked']}), by rule (the report and "
                  "`benchledger explain` say why):",
                  format_blocked(read.blocks(con, run_id), examples=False)]
    found = read.comparisons(con, run_id)
    if len(found):
        parts.append("Comparisons (held to their A/A control; the report has each interval):")
        parts += [f"  {c.role:<7} {c.a} {'vs' if c.role == 'control' else '->'} {c.b}  "
                  f"{c.workload}  {c.metric} {load_point(c)}: {str(c.verdict).upper()}"
                  for c in found.head(MAX_COMPARISONS).itertuples()]
        if len(found) > MAX_COMPARISONS:
            parts.append(f"  ... {len(found) - MAX_COMPARISONS} more (the report)")
    return "\n".join(parts)
