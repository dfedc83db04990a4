"""The history of a recurring sweep (issue #28, docs/protocol.md "History and the
regression gate"): each headline entry across the sweep's runs, with its restart-level
interval; a run-to-run change flagged only where it exceeds what the sweep's own A/A
control shows; and a line broken, never joined, where the arm's configuration changed.

A line is one arm's headline entry (workload, metric, statistic, scope, numerator, load
point). Its runs are split into segments by the arm's effective config sha256 and server
version: a run whose configuration differs from the run before it starts a new segment
and says what changed. Within a segment each published value is compared with the one
before it (the previous published value; blocked runs are skipped for the comparison but
stay in the line): Welch's interval over the two runs' restart means (each side's sd
recovered from its restart-level interval), and the largest A/A difference the two runs'
control pairs show for the same quantity. The verdicts mirror an A/B's (compare.decide):

    first run | config changed | blocked | no control: not decidable | not decidable |
    no change | improvement | regression

A change smaller than the sweep's smallest change of interest (`[sweep]
regression_min_change`, a fraction of the previous mean) is `no change` however sure.

The regression gate (`[sweep] regression_gate = true`) writes the verdicts of one run to
`regression_checks` and fails its task where any is a regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import get_args

import duckdb
import numpy as np
import pandas as pd

from benchledger import __version__
from benchledger.stats import sd_from_interval, welch_bounds
from benchledger.sweep.values import HeadlineMetric
from benchledger.warehouse.compare import IMPROVEMENT, LOWER_IS_BETTER, NOT_DECIDABLE, REGRESSION
from benchledger.warehouse.db import insert_frame, query_frame

# What a line is: one arm's headline quantity at one load point.
LINE = ["arm", "workload", "metric", "statistic", "scope", "numerator", "load_point"]
QUANTITY = [c for c in LINE if c != "arm"]
HEADLINE_METRICS = get_args(HeadlineMetric)

# A line's change since the previous run; NOT_DECIDABLE, IMPROVEMENT and REGRESSION are a
# comparison's verdicts (warehouse.compare), here of a run against the one before it.
FIRST_RUN = "first run"
CONFIG_CHANGED = "config changed"
BLOCKED = "blocked"
NO_CONTROL = "no control: not decidable"
NO_CHANGE = "no change"
FLAGGED = (IMPROVEMENT, REGRESSION)


class UnknownSweep(LookupError):
    """A sweep name the warehouse has no run of; the message lists the ones it has."""


def sweep_history(con: duckdb.DuckDBPyConnection, sweep: str,
                  metrics: Sequence[str] = (), min_change: float = 0.0) -> pd.DataFrame:
    """Every headline entry of every run of `sweep`, oldest run first, with its line's
    segment, the comparison with the previous published run of that segment and the
    verdict (module docstring). `min_change`: the smallest relative change worth a flag
    (`[sweep] regression_min_change`). Unknown metrics and sweeps are refused by name."""
    if not 0.0 <= min_change < 1.0:
        raise ValueError(f"the smallest change of interest must be a fraction in [0, 1): "
                         f"found {min_change!r} (0.03 is 3%)")
    unknown = sorted(set(metrics) - set(HEADLINE_METRICS))
    if unknown:
        raise ValueError(f"not a headline metric: {', '.join(unknown)} "
                         f"(headline metrics: {', '.join(HEADLINE_METRICS)})")
    frame = query_frame(con, "sweep_history", sweep=sweep, metrics=list(metrics))
    if frame.empty:
        known = [r[0] for r in con.execute(
            "SELECT DISTINCT sweep_name FROM runs WHERE coalesce(evidence, 'rerun') = "
            "'rerun' ORDER BY 1").fetchall()]
        if sweep not in known:
            raise UnknownSweep(f"no run of sweep {sweep!r} in this warehouse (sweeps: "
                               f"{', '.join(known) or 'none'})")
        return frame
    frame["numerator"] = frame["numerator"].fillna("")
    frame["run_order"] = frame.groupby(LINE, sort=False).cumcount()
    _segments(frame)
    _previous(frame)
    _control_bounds(frame, query_frame(con, "sweep_controls", sweep=sweep))
    _verdicts(frame, min_change)
    return frame


def _segments(frame: pd.DataFrame) -> None:
    """`segment` (0, 1, ...) per line, starting anew where the arm's configuration differs
    from the run before; `config_change` says what changed on the first run of a new one.
    A NULL config sha256 (the arm's restarts disagreed) is a configuration of its own: it
    equals no other run's, not even another NULL (a server whose /version changes at every
    start would otherwise join all its runs into one line, and a real change of a flag
    would read as an improvement). A NULL server version (none recorded) equals another:
    a version the restarts disagreed on makes the sha256 NULL too."""
    sha = frame["effective_config_sha256"]
    version = frame["server_version"].fillna("not recorded")
    by_line = frame.groupby(LINE, sort=False)
    before_sha = by_line["effective_config_sha256"].shift()
    before_version = by_line["server_version"].shift().fillna("not recorded")
    first = frame["run_order"] == 0
    unknown = sha.isna() | before_sha.isna()
    config_moved = ~first & (unknown | (sha != before_sha))
    version_moved = ~first & (version != before_version)
    frame["segment"] = (config_moved | version_moved).astype(int).groupby(
        [frame[c] for c in LINE], sort=False).cumsum()
    change = np.where(config_moved, "effective config " + _config_text(before_sha) + " -> "
                      + _config_text(sha), "")
    change = np.where(version_moved, np.where(config_moved, change + "; ", "")
                      + "server version " + before_version + " -> " + version, change)
    # Where the configuration is unknown, the version is what is known of it.
    same_version = config_moved & unknown & ~version_moved & frame["server_version"].notna()
    frame["config_change"] = np.where(same_version, change + "; server version " + version
                                      + " (unchanged)", change)


UNKNOWN_CONFIG = "unknown (restarts disagreed)"


def _config_text(sha: pd.Series) -> pd.Series:
    """A config sha256 as a change names it: its first 12 digits, or that it is unknown."""
    return sha.str[:12].fillna(UNKNOWN_CONFIG)


def _previous(frame: pd.DataFrame) -> None:
    """The previous published run of the same line and segment: its run id, mean, sd and
    restarts (`previous_*`); NaN where there is none."""
    published = frame["publishable"].astype(bool) & frame["restart_mean"].notna()
    frame["restart_sd"] = sd_from_interval(frame["restart_mean"], frame["restart_ci95_high"],
                                           frame["n_restarts"])
    keys = [frame[c] for c in [*LINE, "segment"]]
    for column in ("run_id", "restart_mean", "restart_sd", "n_restarts"):
        mine = frame[column].where(published)
        shifted = mine.groupby(keys, sort=False).shift()
        frame[f"previous_{column}"] = shifted.groupby(keys, sort=False).ffill()


def _control_bounds(frame: pd.DataFrame, controls: pd.DataFrame) -> None:
    """Per row: whether its run had an A/A control (`has_control`) and the largest A/A
    difference (|b - a| of the restart means) that its run's and the previous run's
    control pairs show for the same quantity (`control_difference`; NaN: not measured)."""
    frame["has_control"] = frame["run_id"].isin(controls["run_id"])
    published = frame[frame["publishable"].astype(bool) & frame["restart_mean"].notna()]
    means = published[["run_id", "arm", *QUANTITY, "restart_mean"]]
    pairs = controls.merge(means.rename(columns={"arm": "control_a", "restart_mean": "a"}),
                           on=["run_id", "control_a"])
    pairs = pairs.merge(means.rename(columns={"arm": "control_b", "restart_mean": "b"}),
                        on=["run_id", "control_b", *QUANTITY])
    pairs["aa"] = (pairs["b"] - pairs["a"]).abs()
    per_run = pairs.groupby(["run_id", *QUANTITY], as_index=False)["aa"].max()
    here = frame.merge(per_run, on=["run_id", *QUANTITY], how="left")["aa"]
    before = frame.merge(per_run.rename(columns={"run_id": "previous_run_id"}),
                         on=["previous_run_id", *QUANTITY], how="left")["aa"]
    frame["control_difference"] = np.fmax(here.to_numpy(), before.to_numpy())


def _verdicts(frame: pd.DataFrame, min_change: float) -> None:
    """difference (this run's restart mean minus the previous run's), its 95% interval,
    `change` (the verdict) and `reason`, all vectorised. A change smaller than
    `min_change` of the previous mean is `no change` however sure it is: runs on a real
    machine drift by a little between nights (load, temperature) beyond what one run's A/A
    pair shows, and a gate that fails on that is a gate users switch off."""
    frame["difference"] = frame["restart_mean"] - frame["previous_restart_mean"]
    low, high = welch_bounds(frame["previous_restart_mean"], frame["previous_restart_sd"],
                             frame["previous_n_restarts"], frame["restart_mean"],
                             frame["restart_sd"], frame["n_restarts"])
    frame["ci95_low"], frame["ci95_high"] = low, high
    published = frame["publishable"].astype(bool) & frame["restart_mean"].notna()
    has_previous = frame["previous_restart_mean"].notna()
    interval = ~np.isnan(low) & ~np.isnan(high)
    excludes_zero = interval & ((low > 0) | (high < 0))
    control = frame["control_difference"]
    beyond = excludes_zero & control.notna() & (frame["difference"].abs() > control)
    relative = (frame["difference"] / frame["previous_restart_mean"]).abs()
    small = relative < min_change
    lower_better = frame["unit"].isin(LOWER_IS_BETTER)
    worse = (frame["difference"] < 0) != lower_better
    new_segment = (frame["segment"] > 0) & ~has_previous
    conditions = [
        ~published, ~has_previous & new_segment, ~has_previous, ~frame["has_control"],
        ~interval, ~excludes_zero, control.isna(), ~beyond, small, worse]
    choices = [BLOCKED, CONFIG_CHANGED, FIRST_RUN, NO_CONTROL, NOT_DECIDABLE, NO_CHANGE,
               NOT_DECIDABLE, NO_CHANGE, NO_CHANGE, REGRESSION]
    frame["change"] = np.select(conditions, choices, IMPROVEMENT)
    reasons = [
        "blocked: " + frame["blocked_by"].fillna("no validated value"),
        "the arm's configuration changed (" + frame["config_change"] + "): a new line",
        pd.Series("no earlier published run of this line", index=frame.index),
        pd.Series("the sweep has no A/A control to hold a change to", index=frame.index),
        pd.Series("no interval: a run with fewer than 2 restarts", index=frame.index),
        pd.Series("the 95% interval of the run-to-run difference includes 0",
                  index=frame.index),
        pd.Series("the A/A control was not measured for this quantity (no publishable "
                  "entries of the control arms)", index=frame.index),
        "the difference (" + frame["difference"].map("{:.4g}".format)
        + ") is not larger than the A/A control's (" + control.map("{:.4g}".format) + ")",
        "the change (" + relative.map("{:.2%}".format) + ") is smaller than the smallest "
        f"change of interest ({min_change:.2%})",
    ]
    beyond_reason = ("the interval excludes 0 and the difference exceeds the A/A "
                     "control's (" + control.map("{:.4g}".format) + ")")
    frame["reason"] = np.select(conditions, [*reasons, beyond_reason], beyond_reason)


# --- the regression gate ------------------------------------------------------------------


def check_regressions(con: duckdb.DuckDBPyConnection, run_id: str, sweep: str,
                      metrics: Sequence[str] = (), min_change: float = 0.0) -> pd.DataFrame:
    """The gate's verdict on every headline entry of `run_id` (of `metrics`; none named:
    all) against the sweep's earlier runs, written to `regression_checks` (one row per
    entry; a re-check replaces the run's rows). Returns those rows; the caller fails on
    any `regression`."""
    history = sweep_history(con, sweep, metrics, min_change)
    mine = history[history["run_id"] == run_id]
    rows = mine[["run_id", "entry_id", *LINE, "unit", "previous_run_id", "restart_mean",
                 "previous_restart_mean", "difference", "ci95_low", "ci95_high",
                 "control_difference", "segment", "config_change", "change",
                 "reason"]].rename(columns={"change": "verdict"})
    rows = rows.assign(sweep_name=sweep, harness_version=__version__,
                       checked_at=datetime.now(UTC))
    con.execute("BEGIN")
    try:
        con.execute("DELETE FROM regression_checks WHERE run_id = ?", [run_id])
        insert_frame(con, "regression_checks", rows)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return rows
