"""JSON Lines read the fast way (pyarrow.json), and line by line only to say what is wrong.

A JSON Lines file (a dataset, a trace) is read whole by `pyarrow.json.read_json` into
columns, with an explicit schema for the keys benchledger reads: no Python object per line.
Only when pyarrow refuses the file, or a vectorized check (pyarrow.compute, numpy) finds a
bad row, is it scanned line by line in Python (`scan`), and that scan names the line and
what is wrong with it. The scan and the vectorized checks apply the same rules. When pyarrow
refuses a file in which the scan finds nothing wrong (a dataset whose ids are strings on some
lines and integers on others: one column, two JSON types), the scan's rows are the result:
slower, still correct.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from benchledger.sweep.values import MAX_TOKENS
from benchledger.workloads.errors import WorkloadError, at

MAX_LENGTH = MAX_TOKENS  # the largest token count a row may ask for (input or output)
# Whitespace as JSON and pyarrow see it: a line of only these is blank (skipped); a text of
# only these (and form feeds, vertical tabs) is empty.
_BLANK_BYTES = b" \t\r"
NOT_BLANK = r"[^ \t\n\r\f\x0b]"
_NOT_BLANK = re.compile(NOT_BLANK)
_WS = (32, 9, 13, 10)
_PIECE = 8 << 20
_BLOCK = 1 << 20  # pyarrow.json's block: a line longer than this gets longer blocks
# A chat request's messages, as a dataset's rows hold them.
MESSAGES_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


class Bad(Exception):
    """What is wrong with one line or item; the reader adds the file and the line."""


def read_bytes(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise WorkloadError(f"{what} not found: {path}") from None
    except OSError as e:
        raise WorkloadError(f"{what} {path} cannot be read: {e.strerror or e}") from None


def is_blank(text: str) -> bool:
    return _NOT_BLANK.search(text) is None


def kind(value: object) -> str:
    """A JSON value's type in words, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def unicode_ok(text: str) -> bool:
    """False for a string JSON allows but UTF-8 cannot carry (a lone surrogate, \\ud800)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def line_starts(data: bytes) -> np.ndarray:
    """Where each line of `data` starts (a final newline starts no line)."""
    arr = np.frombuffer(data, np.uint8)
    starts = np.flatnonzero(arr == 10) + 1
    if len(starts) and starts[-1] == len(arr):
        starts = starts[:-1]
    return np.concatenate(([0], starts)) if len(arr) else starts


def line_numbers(data: bytes, starts: np.ndarray, rows: int) -> np.ndarray | None:
    """The 1-based line of each of the `rows` rows pyarrow read from `data` (it skips blank
    lines: only spaces, tabs and CRs). None when the lines do not add up to `rows`."""
    arr = np.frombuffer(data, np.uint8)
    content = np.ones(len(arr), dtype=bool)
    for byte in _WS:
        content &= arr != byte
    lines = np.flatnonzero(np.logical_or.reduceat(content, starts)) + 1 if len(starts) else starts
    return lines.astype(np.int64) if len(lines) == rows else None


def utf8_ok(data: bytes) -> bool:
    """Whether the whole file is UTF-8 (pyarrow's JSON reader does not check), decoded in
    pieces of 8 MiB so that a big file is never a second time in memory as one str."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for start in range(0, len(data), _PIECE):
            decoder.decode(view[start:start + _PIECE])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def read_lines(data: bytes, schema: pa.Schema) -> tuple[pa.Table | str, np.ndarray | None]:
    """The file as a table of `schema`'s columns (other keys ignored) and each row's line,
    or the reason it cannot be read so (then `scan` says which line is wrong)."""
    if not utf8_ok(data):
        return "not UTF-8", None
    starts = None
    block = _BLOCK
    while True:
        try:
            table = pj.read_json(
                pa.py_buffer(data), read_options=pj.ReadOptions(block_size=block),
                parse_options=pj.ParseOptions(explicit_schema=schema,
                                              unexpected_field_behavior="ignore"))
            break
        except pa.ArrowException as e:
            if "straddl" not in str(e) or starts is not None:
                return str(e), None
            # A line longer than a block: blocks as long as the longest line.
            starts = line_starts(data)
            block = max(block, int(np.diff(starts, append=len(data)).max()) + 2)
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    numbers: np.ndarray | None
    if lines == table.num_rows:  # no blank line: row i is line i + 1
        numbers = np.arange(1, lines + 1, dtype=np.int64)
    else:
        numbers = line_numbers(data, line_starts(data) if starts is None else starts,
                               table.num_rows)
    return table.select(schema.names), numbers


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Bad(f"bad JSON: key {key!r} appears twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise Bad(f"bad JSON: {name} is not a JSON value")


DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)


def scan(path: Path, data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) of each non-blank line, in order; the first line that is not UTF-8,
    not JSON or not a JSON object raises WorkloadError naming it."""
    offset = 0
    for number, raw in enumerate(data.split(b"\n"), 1):
        if raw.strip(_BLANK_BYTES):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise at(path, number, f"not UTF-8: byte 0x{raw[e.start]:02x} at offset "
                                       f"{offset + e.start}") from None
            try:
                obj = DECODER.decode(text)
            except json.JSONDecodeError as e:
                raise at(path, number, f"bad JSON: {e.msg} (column {e.colno})") from None
            except Bad as e:
                raise at(path, number, str(e)) from None
            if not isinstance(obj, dict):
                raise at(path, number, f"not a JSON object but {kind(obj)}")
            yield number, obj
        offset += len(raw) + 1


def first_bad(flags: np.ndarray) -> int | None:
    hits = np.flatnonzero(flags)
    return int(hits[0]) if len(hits) else None


def out_of_range(column: pa.ChunkedArray | pa.Array, low: int, high: int) -> np.ndarray:
    """Rows whose value is set and outside [low, high]."""
    values = pc.fill_null(column, low)
    return np.asarray(pc.or_(pc.less(values, low), pc.greater(values, high)))


def positive_int(value: object, key: str) -> int | None:
    """A row's optional token count: absent, or an integer from 1 to MAX_LENGTH."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LENGTH:
        raise Bad(f"`{key}` must be a positive integer up to {MAX_LENGTH}, not {kind(value)}")
    return value


_SHORT_ESCAPES = {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}


def json_strings(arr: pa.Array) -> pa.Array:
    """Each string as a JSON string literal, exactly as json.dumps(ensure_ascii=False)
    writes it, whole column at once (nulls stay null)."""
    arr = pc.replace_substring(pc.replace_substring(arr, "\\", "\\\\"), '"', '\\"')
    values = arr.buffers()[2]
    if values is not None:  # which control characters occur: one pass over the bytes
        raw = np.frombuffer(values, np.uint8)
        for byte in np.flatnonzero(np.bincount(raw[raw < 32], minlength=32)):
            arr = pc.replace_substring(arr, chr(byte),
                                       _SHORT_ESCAPES.get(int(byte), f"\\u{byte:04x}"))
    return pc.binary_join_element_wise('"', arr, '"', "")


def messages_json(lists: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each list of {role, content} as JSON text, as json.dumps(ensure_ascii=False) writes
    it, whole column at once (a null list stays null)."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    flat = lists.flatten()
    elements = pc.binary_join_element_wise(
        '{"role": ', json_strings(pc.struct_field(flat, "role")), ', "content": ',
        json_strings(pc.struct_field(flat, "content")), "}", "")
    lengths = np.asarray(pc.fill_null(pc.list_value_length(lists), 0), dtype=np.int64)
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))), pa.int32())
    rebuilt = pa.ListArray.from_arrays(offsets, elements, mask=lists.is_null())
    return pc.binary_join_element_wise("[", pc.binary_join(rebuilt, ", "), "]", "")


def word_counts(arr: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Whitespace-separated words of each string (null stays null)."""
    return pc.count_substring_regex(arr, r"\S+")
