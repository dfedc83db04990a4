"""Plain-text tables of entries for the terminal (the CLI's printed output)."""

from __future__ import annotations

import pandas as pd


def _number(value) -> str:
    if value is None or pd.isna(value):
        return "-"
    return f"{value:.4g}" if abs(value) < 1 else f"{value:.1f}"


def format_entries(entries: pd.DataFrame) -> str:
    """One line per entry: the value with its interval, n, restarts and every label."""
    if entries.empty:
        return "  (none)"
    rows = []
    for e in entries.itertuples():
        interval = (f"[{_number(e.ci95_low)}, {_number(e.ci95_high)}]"
                    if e.ci95_low is not None and not pd.isna(e.ci95_low) else "[-]")
        restart = (f"{_number(e.restart_mean)} [{_number(e.restart_ci95_low)}, "
                   f"{_number(e.restart_ci95_high)}]")
        rows.append({
            "arm": e.arm, "workload": e.workload, "metric": e.metric, "phase": e.phase,
            "scope": f"{e.scope} c={e.concurrency}", "mean": f"{_number(e.value)} {e.unit}",
            "95% CI": interval, "n": e.n_requests, "restarts": e.n_restarts,
            "restart-level mean [95% CI]": restart,
            "flag": "restart_effect" if e.restart_effect else "",
        })
    return pd.DataFrame(rows).to_string(index=False)


def format_blocked(entries: pd.DataFrame, width: int = 160) -> str:
    lines = []
    for e in entries.itertuples():
        reason = e.blocked_by or ""
        if len(reason) > width:
            reason = reason[: width - 3] + "..."
        lines.append(f"  {e.arm} / {e.workload} / {e.metric} c={e.concurrency}: {reason}")
    return "\n".join(lines)
