"""The restarts suite: one row per server restart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchledger.raw.layout import HEALTHY_STATUSES
from benchledger.rules.core import (
    BLOCK_ENTRIES,
    DEFAULT_MIN_CLOCK_RATIO,
    EXCLUDE_RESTART,
    Frame,
    Kw,
    Rows,
    Rule,
    SuiteFrame,
    gx,
)
from benchledger.rules.frame import join, null_marked, sentences

if TYPE_CHECKING:
    import pandas as pd

SUITE = SuiteFrame(
    "restarts", frame="restarts", subject="restart_id", required=("restart_id", "status"),
    # Evidence a caller may not have (no clock sampled): NULL = not checked.
    optional=("clock_detail", "require_clock_check"), numeric=("clock_ratio", "min_clock_ratio"))


def _observe_status(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    return f"status in {kw['value_set']}", join(frame.loc[rows, "status"])


RESTART_HEALTHY = Rule(
    name="restart_healthy", traps=("T5",), applies_to="restart", effect=BLOCK_ENTRIES,
    summary="the server restart ended ok (or is an external server that cannot restart)",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet",
             column="status_or_null", value_set=list(HEALTHY_STATUSES),
             columns={"status_or_null": null_marked("status")}, observe=_observe_status))


def _clock_ratio_checked(frame: Frame) -> pd.Series:
    """The ratio; -1 where it is unreadable but required; NULL where unreadable and
    allowed (require_clock_check = false) or where no floor applies."""
    import pandas as pd

    required = frame["require_clock_check"].fillna(True).astype(bool)
    unchecked = frame["clock_ratio"].isna() & frame["min_clock_ratio"].notna()
    return frame["clock_ratio"].where(
        ~unchecked, pd.Series(-1.0, index=frame.index).where(required))


def _observe_clock(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    return (f"SM clock under load >= {join(frame.loc[rows, 'min_clock_ratio'])} of max",
            sentences(frame, "clock_detail", rows) or "no clock samples")


CLOCK_UNDER_LOAD = Rule(
    name="clock_under_load", traps=("T10",), applies_to="restart", effect=EXCLUDE_RESTART,
    summary="the restart's GPUs ran at >= min_clock_ratio of their max SM clock under load "
            "(median per GPU, worst GPU); an unreadable clock fails unless "
            "require_clock_check = false",
    threshold=f"min_clock_ratio (default {DEFAULT_MIN_CLOCK_RATIO})",
    threshold_source="sweep key min_clock_ratio ([defaults] or the arm); "
                     "require_clock_check decides whether an unreadable clock fails",
    check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
             column_A="clock_ratio_checked", column_B="min_clock_ratio", or_equal=True,
             ignore_row_if="either_value_is_missing",
             columns={"clock_ratio_checked": _clock_ratio_checked}, observe=_observe_clock))
