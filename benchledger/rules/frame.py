"""What the column builders and found writers of the suites share.

Builders read whole columns (a run has 10^6 requests: no Python loop over rows); found
writers run once per subject and count the values they show per distinct value, never per
row. pandas and numpy are imported inside the functions that call them, so importing the
catalogue stays cheap; the frame's own column methods need no import.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

from benchledger.rules.core import Builder, Frame, Rows

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# GX map expectations skip nulls, so a NULL status/token_source/temperature would pass
# silently. Rules that must see every row check a copy where nulls become this marker.
# No angle brackets: Data Docs writes unexpected values into its HTML unescaped.
NULL = "[null]"
NOT_APPLICABLE = "rule not applicable"
MAX_LISTED = 3  # offending values or requests a found text names before ", ..."


# --- building columns --------------------------------------------------------------------


def or_null(column: pd.Series) -> pd.Series:
    """A copy of column where NULL becomes the NULL marker, so GX checks those rows too."""
    return column.astype(object).where(column.notna(), NULL)


def null_marked(name: str) -> Builder:
    """A builder of or_null(frame[name])."""

    def build(frame: Frame) -> pd.Series:
        return or_null(frame[name])

    return build


def equals(column: pd.Series, value: str) -> np.ndarray:
    """column == value as a plain mask (NULL is not equal), for any string dtype."""
    return column.eq(value).to_numpy(dtype=bool, na_value=False)


def numbers(column: pd.Series) -> pd.Series:
    """The column as numbers; NULL where a value is not one."""
    import pandas as pd

    return pd.to_numeric(column, errors="coerce")


def as_float(column: pd.Series) -> np.ndarray:
    """A count column as float64 (NULL -> NaN), as Arrow hands nullable integers over
    anyway. Exact below 2**53, and every verdict still holds above it: a plausible count is
    at most max_tokens (32-bit) or MAX_PROMPT_TOKENS, and rounding never carries a larger
    integer below either."""
    import numpy as np

    return numbers(column).to_numpy(dtype=float, na_value=np.nan)


def fractional(values: np.ndarray) -> np.ndarray:
    """Finite values that are not whole numbers (NaN, a NULL, is not fractional)."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (values != np.floor(values))


def first_verdict(frame: Frame, cases: Sequence[tuple[str, np.ndarray]], otherwise: str,
                  applies: np.ndarray) -> pd.Series:
    """Per row: the word of the first case whose mask holds, else `otherwise`; None where
    the rule does not apply (GX skips it). Integer codes, then one lookup: the words are
    shared objects, never 10^6 new strings."""
    import numpy as np
    import pandas as pd

    words = np.array([otherwise, *(word for word, _ in cases), None], dtype=object)
    codes = np.select([mask for _, mask in cases], np.arange(1, len(cases) + 1), default=0)
    codes[~applies] = len(words) - 1
    return pd.Series(words[codes], index=frame.index, dtype=object)


# --- writing what was found ----------------------------------------------------------------


def show(value: Any) -> str:
    import pandas as pd

    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "NULL"
    return repr(value) if isinstance(value, str) else str(value)


def show_count(value: Any) -> str:
    """A count: integer counts come as float64 when the column has NULLs (21.0 reads 21)."""
    import numpy as np

    if isinstance(value, float | np.floating) and float(value).is_integer() \
            and abs(float(value)) < 2**53:
        return str(int(value))
    return show(value)


def join(values: Iterable[Any]) -> str:
    # Subjects are normally one row; a duplicated id shows every row instead of hiding one.
    return "; ".join(show(v) for v in values)


def sentences(frame: Frame, column: str, rows: Rows) -> str:
    """The sentences the pipeline wrote in column (its detail texts), '' where none."""
    return "; ".join(str(d) for d in (frame.at[row, column] for row in rows)
                     if isinstance(d, str))


def detail(value: Any) -> str:
    """A sentence the pipeline wrote (shown as it is), or 'no detail'."""
    return value if isinstance(value, str) and value else "no detail"


def summarise(values: Iterable[Any]) -> str:
    """'missing' for one distinct value, else "'missing' (2), NULL (1)", most common first."""
    return listed(Counter(show(v) for v in values))


def listed(shown: Counter[str]) -> str:
    """A Counter of shown values (keys in order of first occurrence) as summarise says it;
    most_common() keeps that order among equal counts."""
    counts = shown.most_common()
    if len(counts) == 1:
        return counts[0][0]
    text = ", ".join(f"{value} ({n})" for value, n in counts[:MAX_LISTED])
    return text + (", ..." if len(counts) > MAX_LISTED else "")


def summarise_rows(column: pd.Series, rows: Rows) -> str:
    """summarise(column.iloc[rows]), counted per distinct value instead of per row."""
    values = column.iloc[rows]
    shown = shown_counts(values)
    return summarise(values) if shown is None else listed(shown)


def shown_counts(values: pd.Series) -> Counter[str] | None:
    """Counter(show(v) for v in values) from one factorize, or None for a column whose
    equal values might show differently (mixed objects, extension types): the caller then
    counts row by row.

    Exact where used: float64 values are told apart by their bits (0.0 and -0.0 show
    differently but compare equal; every NaN shows NULL), str values by equality.
    """
    import numpy as np
    import pandas as pd

    dtype = values.dtype
    if isinstance(dtype, np.dtype) and dtype == np.float64:
        data = values.to_numpy()
        missing = np.isnan(data)
        keys: Any = data.view(np.int64)
    elif isinstance(dtype, np.dtype) and dtype.kind in "iub":
        missing = np.zeros(len(values), dtype=bool)
        keys = values.to_numpy()
    elif isinstance(dtype, pd.StringDtype) or (
            dtype == np.dtype(object) and set(map(type, values.dropna())) <= {str}):
        missing = values.isna().to_numpy()
        keys = values
    else:
        return None
    codes = np.where(missing, -1, pd.factorize(keys)[0])
    _, first, counts = np.unique(codes, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")  # distinct values by first occurrence
    shown: Counter[str] = Counter()
    # .tolist() boxes values as iterating the Series does (the row-by-row reading).
    for value, n in zip(values.iloc[first[order]].tolist(), counts[order].tolist(),
                        strict=True):
        shown[show(value)] += n
    return shown


def share(frame: Frame, column: str, rows: Rows, bad: Rows) -> str:
    """Like "15 of 15 rows 'missing'": the offending values, or all values if none offend."""
    if not len(rows):
        return "0 of 0 rows (no measured requests)"
    shown = bad if len(bad) else rows
    return f"{len(shown)} of {len(rows)} rows {summarise_rows(frame[column], shown)}"


def present(frame: Frame, rows: Rows, *columns: str) -> int:
    """How many of rows hold a value in every one of columns (the rows a rule checked)."""
    held = reduce(operator.and_, (frame[c].iloc[rows].notna().to_numpy() for c in columns))
    return int(held.sum())


def first_requests(frame: Frame, bad: Rows, values: Callable[[int], str]) -> str:
    """The first offending requests with their values: 'q1 (...), q2 (...), ...'."""
    text = ", ".join(f"{frame.at[row, 'request_id']} ({values(row)})"
                     for row in bad[:MAX_LISTED])
    return text + (", ..." if len(bad) > MAX_LISTED else "")
