"""Two entries compared by hand (`benchledger compare A B`), not a sweep's
[[comparisons]]: a difference and a ratio, never a finding (docs/protocol.md, T16)."""

from __future__ import annotations

import duckdb
import pandas as pd

from benchledger.warehouse.compare import NOT_DECIDABLE


class ComparisonRefused(ValueError):
    """Two entries that must not be compared; the message says why."""


# What must match before two entries' values say anything about each other: the same
# quantity, measured the same way.
SAME_QUANTITY = ("metric", "unit", "numerator", "statistic", "scope")


def compare_entries(con: duckdb.DuckDBPyConnection, a_entry_id: str,
                    b_entry_id: str) -> dict:
    """b - a and b / a for two entries of the same quantity, evidence kind and profile.

    Entries of different evidence kinds (a rerun, an import, a historical report row, a
    value derived from other runs) or of different profiles (workload shapes) are refused
    (T16): their difference would compare runs that were never a controlled experiment.
    Without restart means on both sides no interval is claimed, so the verdict is at best
    'not decidable'; findings come from a sweep's [[comparisons]] (A/B with an A/A control).
    """
    a, b = (_entry(con, entry_id) for entry_id in (a_entry_id, b_entry_id))
    reasons = refusal_reasons(a, b)
    if reasons:
        raise ComparisonRefused(
            f"refused: comparing entry {a_entry_id} with {b_entry_id} would compare runs "
            f"that were never a controlled experiment ({'; '.join(reasons)})")
    difference = None if a["value"] is None or b["value"] is None else b["value"] - a["value"]
    ratio = b["value"] / a["value"] if difference is not None and a["value"] else None
    return {"a": a_entry_id, "b": b_entry_id, "evidence": a["evidence"],
            "profile": _profile(a), "metric": a["metric"], "a_value": a["value"],
            "b_value": b["value"], "difference": difference, "ratio": ratio,
            "verdict": NOT_DECIDABLE, "a_entry": a, "b_entry": b,
            "reason": "two entries compared by hand: a difference, not a finding (no interval "
                      "over restarts and no A/A control; a sweep's [[comparisons]] gives one)"}


def refusal_reasons(a: dict, b: dict) -> list[str]:
    """Why two entries may not be compared (empty: they may)."""
    reasons = []
    if a["evidence"] != b["evidence"]:
        reasons.append(f"evidence {a['evidence']} vs {b['evidence']}: evidence of different "
                       "kinds is never compared")
    profiles = (_profile(a), _profile(b))
    if None in profiles:
        reasons.append("profile not recorded for "
                       + " and ".join(e["entry_id"] for e in (a, b) if _profile(e) is None))
    elif profiles[0] != profiles[1]:
        reasons.append(f"profile {profiles[0]} vs {profiles[1]}")
    differing = [f"{label} {a[label]} vs {b[label]}" for label in SAME_QUANTITY
                 if a[label] != b[label]]
    if differing:
        reasons.append("not the same quantity: " + ", ".join(differing))
    return reasons


def _profile(entry: dict) -> str | None:
    """The workload shape an entry describes: a report's profile, else its workload."""
    return entry.get("profile") or entry.get("workload")


def _entry(con: duckdb.DuckDBPyConnection, entry_id: str) -> dict:
    frame = con.execute("SELECT * FROM entries WHERE entry_id = ?", [entry_id]).df()
    if frame.empty:
        raise LookupError(f"no entry {entry_id!r} in the warehouse")
    row = frame.iloc[0].to_dict()
    return {k: (None if not isinstance(v, str | list) and pd.isna(v) else v)
            for k, v in row.items()}
