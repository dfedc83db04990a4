"""Range checks on an imported file's values, before anything is loaded.

A foreign file can hold anything JSON can: NaN and Infinity (Python's json reads both),
30.5 tokens, 10**30 tokens, a negative duration, the same record twice. Each value an
import loads passes through one of these checks, which turn a column of the file's values
into an Arrow array or refuse the file with one line naming the record, the field, the
value found and what was expected (docs/imports.md, "Hostile files"). The checks work on
whole columns (Arrow and numpy): a file of 10**6 requests costs a few array passes, and
only a refusal looks for the first bad record one by one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchledger.imports.evidence import EvidenceFileError

# A request's token count above this is refused: no model's context comes near it, and it
# fits every integer column of request_records (max_tokens and chunks are 32-bit).
MAX_COUNT = 2**31 - 1
# Times and durations in seconds become int64 nanoseconds: beyond this they cannot (about
# the year 2261 as an epoch time; 292 years as a duration).
MAX_SECONDS = 9.2e9
MAX_NS = 2**63 - 1

Where = Callable[[int], str]  # names the record at a position of a column
Field = str | Callable[[int], str]  # the field's name (for some tools, per position)

COUNT = f"a non-negative integer (at most {MAX_COUNT})"
SECONDS = f"a finite number of seconds between 0 and {MAX_SECONDS:.2g}"
EPOCH = f"a finite time in seconds since the epoch, between 0 and {MAX_SECONDS:.2g}"
NANOSECONDS = f"an integer number of nanoseconds between 0 and {MAX_NS}"
RATE = "a finite number >= 0"

_NUMERIC = frozenset({int, float, type(None)})


def shown(value: Any) -> str:
    """A value as the file spells it (NaN, Infinity, 30.5, "30", true), cut short."""
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse(path: Path, where: str, field: str, value: Any, expected: str) -> EvidenceFileError:
    return EvidenceFileError(path, f"{where}: {field} {shown(value)}, expected {expected}")


def _name(field: Field, index: int) -> str:
    return field(index) if callable(field) else field


def _first(values: Sequence, wrong: Callable[[Any], bool]) -> int:
    """The first position whose value is wrong (only on the way to a refusal)."""
    return next(i for i, v in enumerate(values) if wrong(v))


def _refuse_kinds(path: Path, values: Sequence, field: Field, where: Where,
                  expected: str) -> set[type]:
    """The Python types in a column (one C-level pass), refusing any that is no number."""
    kinds = set(map(type, values))
    if not kinds <= _NUMERIC:
        i = _first(values, lambda v: type(v) not in _NUMERIC)
        raise refuse(path, where(i), _name(field, i), values[i], expected)
    return kinds


def _floats(path: Path, values: Sequence, field: Field, where: Where,
            expected: str) -> pa.Array:
    """The values as float64 (None stays null), refusing anything that is not a number."""
    _refuse_kinds(path, values, field, where, expected)
    try:
        return pa.array(values, pa.float64())
    except (pa.ArrowInvalid, OverflowError):
        # an integer beyond int64 (refused), or one a double holds only approximately,
        # which Arrow will not convert: Python's float() rounds it
        huge = [i for i, v in enumerate(values) if type(v) is int and abs(v) > MAX_NS]
        if huge:
            raise refuse(path, where(huge[0]), _name(field, huge[0]), values[huge[0]],
                         expected) from None
        return pa.array([float(v) if type(v) is int else v for v in values], pa.float64())


def _check(path: Path, values: Sequence, field: Field, where: Where, expected: str,
           bad: np.ndarray) -> None:
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise refuse(path, where(i), _name(field, i), values[i], expected)


def _valid(array: pa.Array, values: Sequence, field: Field, where: Where, path: Path,
           expected: str, nullable: bool) -> np.ndarray:
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    if not nullable:
        _check(path, values, field, where, expected, ~valid)
    return valid


def numbers(path: Path, values: Sequence, field: Field, where: Where, *,
            expected: str = SECONDS, minimum: float = 0.0, maximum: float = MAX_SECONDS,
            nullable: bool = True) -> pa.Array:
    """Finite numbers between minimum and maximum, as float64 (None: null)."""
    array = _floats(path, values, field, where, expected)
    valid = _valid(array, values, field, where, path, expected, nullable)
    x = array.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        good = np.isfinite(x) & (x >= minimum) & (x <= maximum)
    _check(path, values, field, where, expected, valid & ~good)
    return array


def counts(path: Path, values: Sequence, field: Field, where: Where, *,
           maximum: int = MAX_COUNT, expected: str = COUNT,
           nullable: bool = True) -> pa.Array:
    """Non-negative integers up to maximum, as int64; 30.0 is 30, 30.5 is refused."""
    kinds = _refuse_kinds(path, values, field, where, expected)
    if float in kinds and int not in kinds:  # every count written as a float
        array = _floats(path, values, field, where, expected)
        valid = _valid(array, values, field, where, path, expected, nullable)
        x = array.to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            # (below 2**63 too: float(MAX_NS) rounds up to 2**63, which no int64 holds)
            good = (np.isfinite(x) & (x >= 0) & (x <= maximum) & (x < 2.0**63)
                    & (np.floor(x) == x))
        _check(path, values, field, where, expected, valid & ~good)
        return array.cast(pa.int64())
    if float in kinds:  # ints and floats mixed (rare): a float must be a whole number
        bad = [i for i, v in enumerate(values)
               if type(v) is float and not (math.isfinite(v) and v.is_integer())]
        if bad:
            raise refuse(path, where(bad[0]), _name(field, bad[0]), values[bad[0]], expected)
        values = [int(v) if type(v) is float else v for v in values]
    try:
        array = pa.array(values, pa.int64())
    except (pa.ArrowInvalid, OverflowError):  # beyond int64
        i = _first(values, lambda v: type(v) is int and not 0 <= v <= maximum)
        raise refuse(path, where(i), _name(field, i), values[i], expected) from None
    valid = _valid(array, values, field, where, path, expected, nullable)
    x = array.fill_null(0).to_numpy(zero_copy_only=False)
    _check(path, values, field, where, expected, valid & ((x < 0) | (x > maximum)))
    return array


def number_lists(path: Path, lists: Sequence, field: Field, where: Where, *,
                 expected: str = SECONDS, maximum: float = MAX_SECONDS) -> pa.ListArray:
    """Lists of finite numbers between 0 and maximum (a None list stays null)."""
    if not set(map(type, lists)) <= {list, type(None)}:
        i = _first(lists, lambda v: type(v) not in (list, type(None)))
        raise refuse(path, where(i), _name(field, i), lists[i], f"a list of {expected}")
    present = [v for v in lists if v is not None]
    try:
        # the elements' types in one C-level pass (a bool or a string is no time)
        plain = set(map(type, chain.from_iterable(present))) <= {int, float}
        array = pa.array(lists, pa.list_(pa.float64())) if plain else None
    except (pa.ArrowInvalid, OverflowError):  # an integer beyond int64
        array = None
    if array is None:
        i, k = next((i, k) for i, v in enumerate(lists) for k, x in enumerate(v or ())
                    if type(x) not in (int, float) or type(x) is int and abs(x) > MAX_NS)
        raise refuse(path, where(i), f"{_name(field, i)}[{k}]", lists[i][k], expected)
    x = array.flatten().to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(x) & (x >= 0) & (x <= maximum))
    if bad.any():
        flat = int(np.flatnonzero(bad)[0])
        offsets = array.offsets.to_numpy(zero_copy_only=False)
        i = int(np.searchsorted(offsets, flat, side="right")) - 1
        k = flat - int(offsets[i])
        raise refuse(path, where(i), f"{_name(field, i)}[{k}]", lists[i][k], expected)
    return array


def number(path: Path, value: Any, where: str, field: str, *, minimum: float = 0.0,
           above: float | None = None, maximum: float = math.inf, infinite: bool = False,
           expected: str = RATE) -> float | None:
    """One number of a window or a summary (None stays None): finite (or infinite where the
    tool writes infinity for a meaning, as vLLM's request_rate), within its bounds."""
    if value is None:
        return None
    good = type(value) in (int, float) and (
        (infinite and value == math.inf)
        or (math.isfinite(value) and value >= minimum and value <= maximum
            and (above is None or value > above)))
    if not good:
        raise refuse(path, where, field, value, expected)
    return float(value)


def count(path: Path, value: Any, where: str, field: str, *, minimum: int = 0,
          expected: str = COUNT) -> int | None:
    """One integer of a window or a summary (None stays None)."""
    if value is None:
        return None
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or not minimum <= value <= MAX_COUNT:
        raise refuse(path, where, field, value, expected)
    return value


def in_order(path: Path, earlier: tuple[str, pa.Array], later: tuple[str, pa.Array],
             where: Where) -> None:
    """Each record's later reading is not before its earlier one (where both are known)."""
    (first_name, first), (then_name, then) = earlier, later
    a = first.to_numpy(zero_copy_only=False)
    b = then.to_numpy(zero_copy_only=False)
    both = (first.is_valid().to_numpy(zero_copy_only=False)
            & then.is_valid().to_numpy(zero_copy_only=False))
    bad = both & (b < a)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EvidenceFileError(path, f"{where(i)}: {then_name} {shown(b[i].item())}, "
                                      f"expected no earlier than {first_name} "
                                      f"{shown(a[i].item())}")


def first_duplicate(keys: pd.DataFrame, nulls_equal: bool = False) -> tuple[int, int] | None:
    """(first, repeat): the positions of the first row that repeats an earlier one (every
    key equal; unless nulls_equal, a row with a null key never repeats), or None.
    Hash-based, one pass."""
    if nulls_equal:
        keys = keys.astype(object).where(keys.notna(), "\0null")
    keyed = keys.notna().all(axis=1).to_numpy()
    repeated = keys.duplicated(keep="first").to_numpy() & keyed
    if not repeated.any():
        return None
    repeat = int(np.flatnonzero(repeated)[0])
    same = (keys == keys.iloc[repeat]).all(axis=1).to_numpy() & keyed
    return int(np.flatnonzero(same)[0]), repeat


DUPLICATE = ("appears twice (a concatenated or edited file): refused rather than one copy "
             "guessed to be what the tool wrote")
