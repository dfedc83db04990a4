"""Numbers, intervals and units as people read them: the one place that says how each
surface prints a number (registered as the Jinja filters of publishing/templating.py).

Each surface keeps its own style, as its readers and its files know it:
- the report's tables and cards (`cell`): 4 significant digits, an empty cell for NULL;
- the terminal (`text_number`): 4 significant digits below 1, one decimal above, `-`;
- entries.md (`md_number`): 4 significant digits below 10, one decimal above, `–`;
- the benchledger page (`ui_number`): counts grouped by thousands, `-`.

Latencies are stored and exported in seconds (SI, as the warehouse holds them); where a
person reads an entry with its unit (the report's tables, the page, entries.md) they are
shown in milliseconds (`person_unit`, `person_value`). The JSON, CSV and Parquet exports
never pass through this module: they keep what the warehouse holds."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

import pandas as pd

# A unit a person reads in another scale: (power of ten, unit shown). Latencies (TTFT,
# TPOT, end-to-end, session) are seconds in the warehouse and milliseconds to a reader.
PERSON_UNITS: dict[str, tuple[int, str]] = {"s": (3, "ms")}


def missing(value: Any) -> bool:
    """None, NaN, NaT or pd.NA; a list or an array is present (pd.isna would answer per
    element)."""
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def person_unit(unit: Any) -> Any:
    """The unit a person reads: `ms` for `s`; any other unit (or NULL) as it is."""
    return PERSON_UNITS[unit][1] if isinstance(unit, str) and unit in PERSON_UNITS else unit


def person_value(value: Any, unit: Any) -> Any:
    """`value` (in `unit`) in the unit a person reads (person_unit); NULL stays NULL."""
    if missing(value) or not (isinstance(unit, str) and unit in PERSON_UNITS):
        return value
    return float(value) * 10.0 ** PERSON_UNITS[unit][0]


def person_frame(frame: pd.DataFrame, columns: Iterable[str],
                 unit: str = "unit") -> pd.DataFrame:
    """`frame` with `columns` (numbers in the unit of each row's `unit` column) and the
    unit column itself in the units people read; the caller's frame is left as it was."""
    if frame.empty or unit not in frame.columns:
        return frame
    factor = frame[unit].map(lambda u: 10.0 ** PERSON_UNITS[u][0] if u in PERSON_UNITS
                             else 1.0)
    scaled = frame.copy()
    for column in columns:
        if column in scaled.columns:
            scaled[column] = scaled[column].astype(float) * factor.astype(float)
    scaled[unit] = frame[unit].map(person_unit)
    return scaled


# --- the report (HTML) -----------------------------------------------------------------


def cell(value: Any) -> str:
    """A value as the report's tables and cards show it: 4 significant digits, empty for
    NULL, text as it is."""
    if not isinstance(value, str) and missing(value):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def interval(low: Any, high: Any) -> str:
    """[low, high], or 'no interval' where there is none (one restart, one request)."""
    if missing(low) or missing(high):
        return "no interval"
    return f"[{cell(float(low))}, {cell(float(high))}]"


def signed(value: Any, unit: Any = None) -> str:
    """A difference with its sign and unit (`+1.25 tok/s`); 'not computed' for NULL."""
    if missing(value):
        return "not computed"
    unit_text = f" {unit}" if isinstance(unit, str) and unit else ""
    return f"{float(value):+.4g}{unit_text}"


def percent(value: Any, digits: int = 1) -> str:
    """A share as a percentage (`0.415` -> `41.5%`); `-` for NULL."""
    return "-" if missing(value) else f"{float(value):.{digits}%}"


def significant(value: Any, digits: int = 3) -> str:
    """`digits` significant digits (`df 7.41`, `ratio 1.23x`); `-` for NULL."""
    return "-" if missing(value) else f"{float(value):.{digits}g}"


# --- the terminal and entries.md --------------------------------------------------------


def _short(value: Any, below: float, none: str) -> str:
    """4 significant digits under `below`, one decimal from there up."""
    if missing(value):
        return none
    number = float(value)
    return f"{number:.4g}" if abs(number) < below else f"{number:.1f}"


def text_number(value: Any) -> str:
    """A number as the terminal tables print it (also `benchledger history`'s)."""
    return _short(value, 1, "-")


def text_interval(low: Any, high: Any) -> str:
    return "[-]" if missing(low) else f"[{text_number(low)}, {text_number(high)}]"


def count(value: Any, none: str = "-") -> str:
    """A count (restarts, bursts): an integer, `none` for NULL."""
    return none if missing(value) else str(int(value))


def shifted(text: str, unit: Any) -> str:
    """A number as printed in `unit`, read in the unit a person reads: the same digits,
    the decimal point moved (`0.01076` s reads `10.76` ms), so no digit is lost or made up
    by the change of unit; text that is not a number as it is."""
    if not (isinstance(unit, str) and unit in PERSON_UNITS):
        return text
    try:
        number = Decimal(text)
    except ArithmeticError:
        return text
    return f"{number.scaleb(PERSON_UNITS[unit][0]).normalize():f}"


def md_number(value: Any, unit: Any = None) -> str:
    """A number of entries.md: 4 significant digits under 10, one decimal from there up;
    with its `unit`, in the unit a person reads (shifted)."""
    return shifted(_short(value, 10, "–"), unit)


def md_interval(low: Any, high: Any, unit: Any = None) -> str:
    return "–" if missing(low) else f"[{md_number(low, unit)}, {md_number(high, unit)}]"


def md_count(value: Any) -> str:
    return count(value, "–")


# Markdown's own syntax in a table cell, and HTML, which Markdown renderers pass through:
# each character, and what stands for it (an entity or a backslash escape).
MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "\\\\", "|": "\\|", "`": "\\`",
              "[": "\\[", "]": "\\]", "\n": " ", "\r": " "}
MD_TABLE = str.maketrans(MD_ESCAPES)


def md_text(value: Any) -> str:
    """A text cell for a Markdown table: HTML and Markdown's table, code and link syntax
    escaped, one line. A renderer shows the text as it was, never as markup."""
    return str(value).translate(MD_TABLE)


def md_label(value: Any) -> str:
    """A text label of entries.md that may be NULL (older entries): escaped, empty then."""
    return md_text(value) if isinstance(value, str) else ""


def md_cell(value: Any) -> str:
    """A cell of an evidence section of entries.md: a number as md_number, text escaped."""
    return md_number(value) if isinstance(value, float) else md_text(value)


def md_code(value: Any) -> str:
    """Text for a Markdown code span, which shows it as it is (no HTML, no Markdown): only
    a backtick would end the span, so it becomes a quote."""
    return str(value).replace("`", "'")


# --- the benchledger page ---------------------------------------------------------------


def ui_number(value: Any) -> str:
    """A number of the page's tables: whole numbers grouped by thousands from 10,000,
    fractions to 4 significant digits (one decimal from 1,000); `-` for NULL."""
    if missing(value):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()
                                  and abs(value) >= 1):
        return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.0f}"
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    return str(value)


def ui_text(value: Any) -> str:
    """A label of the page: `-` for NULL, a time to the second with its zone."""
    if missing(value):
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    return str(value)


def thousands(value: int) -> str:
    """A count in a heading or a pager: `203,000`."""
    return f"{value:,}"


def ui_interval(low: Any, high: Any) -> str:
    return "-" if missing(low) or missing(high) else f"[{ui_number(low)}, {ui_number(high)}]"


# The Jinja filters (publishing/templating.py): `{{ value | cell }}`.
FILTERS: dict[str, Callable[..., Any]] = {
    "cell": cell, "interval": interval, "signed": signed, "percent": percent,
    "significant": significant, "md_number": md_number, "md_interval": md_interval,
    "md_count": md_count, "md_label": md_label, "md_cell": md_cell, "md_code": md_code,
    "md": md_text, "ui_number": ui_number, "ui_text": ui_text, "ui_interval": ui_interval,
    "thousands": thousands,
    "person_unit": person_unit,
}


def answers_said(row: Any) -> str:
    """A comparison's answers in words (issue #42), '' where it did not compare them:
    'answers: the same on 30 of 30 prompts (A/A control: 30 of 30)'. `row` is a pandas row
    or itertuples record of `comparisons`."""
    def get(name: str) -> Any:
        return row.get(name) if hasattr(row, "get") else getattr(row, name, None)

    prompts, same = get("equivalence_prompts"), get("equivalence_identical")
    if missing(prompts):
        return ""
    said = f"answers: the same on {int(same)} of {int(prompts)} prompts"
    control_prompts = get("control_equivalence_prompts")
    if not missing(control_prompts):
        said += (f" (A/A control: {int(get('control_equivalence_identical'))} of "
                 f"{int(control_prompts)})")
    return said
