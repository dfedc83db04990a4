"""Datasets of requests: a JSON Lines file, a ShareGPT file, or a folder of them.

JSON Lines (`.jsonl`), one request a line; blank lines are skipped:

    {"id": "q1", "prompt": "Summarise ...", "max_tokens": 256}
    {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}]}

- `prompt` (a string) or `messages` (a list of {role, content}: role one of ROLES, content a
  string; other keys of a message are not read, so not sent), never both;
- `max_tokens` (optional): the request's output target, a positive integer;
- `id` (optional): a string or an integer; default `<file stem>:<line>` (in a folder, the
  file's relative path without its suffix: `chat/easy:12`); ids are unique in a dataset;
- `input_tokens`, `output_tokens` (optional positive integers): read only by an `empirical`
  length distribution (lengths.py);
- any other key is ignored.

ShareGPT (`.json`): see sharegpt.py. A folder: every `*.jsonl` and `*.json` file under it
(hidden files and folders left out), in the order of their relative paths, each read by its
own suffix (or all by `dataset_format`); its sha256 is that of the lines
`<relative path>\\t<file sha256>\\n`, sorted.

Each dataset becomes one table (DATASET_SCHEMA): a row per request, with the file and line it
came from. Its sha256 is of the very bytes that were read (a file changed while it is being
read cannot be recorded under the other version's hash; hashlib.file_digest would read it a
second time).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.workloads.errors import WorkloadError, at
from benchledger.workloads.jsonio import (
    MAX_LENGTH,
    MESSAGES_TYPE,
    NOT_BLANK,
    Bad,
    first_bad,
    is_blank,
    kind,
    out_of_range,
    positive_int,
    read_bytes,
    read_lines,
    scan,
    unicode_ok,
)
from benchledger.workloads.sharegpt import read_sharegpt, row_id

Format = Literal["auto", "jsonl", "sharegpt"]
ROLES = ("system", "developer", "user", "assistant", "tool")
SUFFIXES = {".jsonl": "jsonl", ".json": "sharegpt"}
DATASET_SCHEMA = pa.schema([
    ("id", pa.string()), ("prompt", pa.string()), ("messages", MESSAGES_TYPE),
    ("max_tokens", pa.int64()), ("answer", pa.string()), ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()), ("file", pa.int32()), ("line", pa.int64())])
_COUNTS = ("max_tokens", "input_tokens", "output_tokens")


@dataclass(frozen=True)
class DatasetFile:
    path: str  # relative to the dataset's folder; a single file: its name
    format: str  # "jsonl" or "sharegpt"
    sha256: str
    rows: int


@dataclass(frozen=True)
class Dataset:
    path: Path
    is_dir: bool
    sha256: str
    files: tuple[DatasetFile, ...]
    table: pa.Table  # DATASET_SCHEMA

    @property
    def rows(self) -> int:
        return self.table.num_rows

    @property
    def format(self) -> str:
        formats = {f.format for f in self.files}
        return formats.pop() if len(formats) == 1 else "mixed"

    def location(self, row: int) -> tuple[Path, int]:
        """The file and line one row came from."""
        file = self.table["file"][row].as_py()
        name = self.path / self.files[file].path if self.is_dir else self.path
        return name, self.table["line"][row].as_py()

    def where(self, row: int) -> str:
        """`<file>, line <n>` of one row, for error messages."""
        return "{}, line {}".format(*self.location(row))

    def provenance(self, written: str) -> dict[str, Any]:
        out: dict[str, Any] = {"path": written, "sha256": self.sha256, "rows": self.rows,
                               "format": self.format}
        if self.is_dir:
            out["files"] = [{"path": f.path, "format": f.format, "sha256": f.sha256,
                             "rows": f.rows} for f in self.files]
        return out


def read_dataset(path: Path, dataset_format: Format = "auto") -> Dataset:
    """A dataset file or folder, checked whole (WorkloadError names the file, line and what
    is wrong)."""
    if path.is_dir():
        found = sorted((p.relative_to(path).as_posix(), p) for p in path.rglob("*")
                       if p.suffix in SUFFIXES and p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not found:
            raise WorkloadError(f"dataset folder {path} has no .jsonl or .json file")
    elif path.is_file():
        found = [(path.name, path)]
    else:
        raise WorkloadError(f"dataset not found: {path}")
    files, parts = [], []
    for index, (relative, file) in enumerate(found):
        fmt = dataset_format if dataset_format != "auto" else SUFFIXES.get(file.suffix)
        if fmt is None:
            raise WorkloadError(f"cannot tell the format of {file}: name it .jsonl (JSON "
                                f"Lines) or .json (ShareGPT), or set dataset_format")
        data = read_bytes(file, "dataset")
        prefix = relative.rsplit(".", 1)[0] if path.is_dir() else file.stem
        columns = (_read_jsonl(file, data, prefix) if fmt == "jsonl"
                   else read_sharegpt(file, data, prefix))
        rows = len(columns["id"])
        columns["file"] = pa.array(np.full(rows, index, np.int32))
        parts.append(pa.table({f.name: columns.get(f.name, pa.nulls(rows, f.type))
                               for f in DATASET_SCHEMA}, schema=DATASET_SCHEMA))
        files.append(DatasetFile(relative, fmt, hashlib.sha256(data).hexdigest(), rows))
    if path.is_dir():
        listing = "".join(f"{f.path}\t{f.sha256}\n" for f in files)
        sha256 = hashlib.sha256(listing.encode()).hexdigest()
    else:
        sha256 = files[0].sha256
    dataset = Dataset(path, path.is_dir(), sha256, tuple(files),
                      pa.concat_tables(parts).combine_chunks())
    _unique_ids(dataset)
    return dataset


def _unique_ids(dataset: Dataset) -> None:
    ids = dataset.table["id"]
    if pc.count_distinct(ids).as_py() == len(ids):
        return
    seen: dict[str, int] = {}  # only on the way to the error: which id, where
    for row, item in enumerate(ids.to_pylist()):
        if item in seen:
            file, line = dataset.location(row)
            first_file, first_line = dataset.location(seen[item])
            first = f"line {first_line}" + (f" of {first_file}" if first_file != file else "")
            raise at(file, line, f"duplicate id {item!r} (first on {first})")
        seen[item] = row


def _id_type(data: bytes) -> pa.DataType:
    """The id column's type, from the first line (a file that mixes string and integer ids
    is read by the line scan)."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        line = data[start:end].strip()
        if line:
            try:
                value = json.loads(line).get("id")
            except (ValueError, AttributeError):
                return pa.string()
            is_int = isinstance(value, int) and not isinstance(value, bool)
            return pa.int64() if is_int else pa.string()
        start = end + 1
    return pa.string()


def _read_jsonl(path: Path, data: bytes, id_prefix: str) -> dict[str, Any]:
    schema = pa.schema([("id", _id_type(data)), ("prompt", pa.string()),
                        ("messages", MESSAGES_TYPE)] + [(k, pa.int64()) for k in _COUNTS])
    table, lines = read_lines(data, schema)
    if isinstance(table, pa.Table):
        if table.num_rows == 0:
            raise at(path, None, "empty dataset: no requests")
        row = first_bad(_bad_rows(table))
        if row is None and lines is not None:
            cols = {name: table[name].combine_chunks() for name in schema.names}
            line = pa.array(lines)
            default = pc.binary_join_element_wise(id_prefix, pc.cast(line, pa.string()), ":")
            cols["id"] = pc.coalesce(pc.cast(cols["id"], pa.string()), default)
            return {**cols, "line": line}
        problem = f"row {row} fails a check" if row is not None else "lines do not add up"
    else:
        problem = table
    rows = _scan_jsonl(path, data, id_prefix)  # raises the precise error, if there is one
    if not rows:
        raise at(path, None, "empty dataset: no requests")
    if isinstance(table, pa.Table):  # the columns found a fault the line scan did not
        raise at(path, None, f"cannot be read: {problem}")
    # pyarrow refused what the scan accepts (ids of both types): the scan's rows, slowly.
    return {key: pa.array([r[key] for r in rows], DATASET_SCHEMA.field(key).type)
            for key in ("id", "prompt", "messages", *_COUNTS, "line")}


def _bad_rows(t: pa.Table) -> np.ndarray:
    """Rows that break a rule of _jsonl_row, found column by column."""
    n = t.num_rows
    has_prompt = np.asarray(pc.is_valid(t["prompt"]))
    has_messages = np.asarray(pc.is_valid(t["messages"]))
    bad = has_prompt == has_messages  # neither, or both
    text = pc.fill_null(pc.match_substring_regex(t["prompt"], NOT_BLANK), True)
    bad |= ~np.asarray(text)
    lists = t["messages"].combine_chunks()
    bad |= np.asarray(pc.fill_null(pc.list_value_length(lists), 1)) == 0
    flat = lists.flatten()
    if len(flat):
        parent = np.asarray(pc.list_parent_indices(lists))
        role, content = pc.struct_field(flat, "role"), pc.struct_field(flat, "content")
        wrong = ~np.asarray(pc.fill_null(pc.is_in(role, value_set=pa.array(ROLES)), False))
        wrong |= np.asarray(pc.is_null(content))
        bad[parent[wrong]] = True
        words = np.asarray(pc.fill_null(pc.match_substring_regex(content, NOT_BLANK), False))
        bad |= has_messages & (np.bincount(parent, weights=words, minlength=n) == 0)
    for key in _COUNTS:
        bad |= out_of_range(t[key], 1, MAX_LENGTH)
    if t.schema.field("id").type == pa.string():
        bad |= np.asarray(pc.fill_null(pc.equal(t["id"], ""), False))
    return bad


def _scan_jsonl(path: Path, data: bytes, id_prefix: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    for line, obj in scan(path, data):
        try:
            row = _jsonl_row(obj, f"{id_prefix}:{line}")
            if row["id"] in first_line:
                raise Bad(f"duplicate id {row['id']!r} (first on line {first_line[row['id']]})")
        except Bad as e:
            raise at(path, line, str(e)) from None
        first_line[row["id"]] = line
        rows.append({**row, "line": line})
    return rows


def _jsonl_row(obj: dict[str, Any], default_id: str) -> dict[str, Any]:
    """One line's request, or Bad saying what is wrong with it."""
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if prompt is None and messages is None:
        raise Bad("no `prompt` or `messages`")
    if prompt is not None and messages is not None:
        raise Bad("both `prompt` and `messages`: give one")
    if prompt is not None:
        if not isinstance(prompt, str):
            raise Bad(f"`prompt` is not a string but {kind(prompt)}")
        if not unicode_ok(prompt):
            raise Bad("`prompt` is not valid Unicode (a lone surrogate)")
        if is_blank(prompt):
            raise Bad("empty prompt")
    else:
        messages = _messages(messages)
    return {"id": row_id(obj, default_id), "prompt": prompt, "messages": messages,
            **{k: positive_int(obj.get(k), k) for k in _COUNTS}}


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise Bad(f"`messages` is not a list but {kind(value)}")
    if not value:
        raise Bad("`messages` is empty")
    out = []
    for j, message in enumerate(value):
        if not isinstance(message, dict):
            raise Bad(f"`messages[{j}]` is not an object but {kind(message)}")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or role not in ROLES:
            raise Bad(f"`messages[{j}].role` is {kind(role)}"
                      + (f" {role!r}" if isinstance(role, str) else "")
                      + f": expected one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise Bad(f"`messages[{j}].content` is not a string but {kind(content)}")
        if not unicode_ok(content):
            raise Bad(f"`messages[{j}].content` is not valid Unicode (a lone surrogate)")
        out.append({"role": role, "content": content})
    if all(is_blank(m["content"]) for m in out):
        raise Bad("empty prompt: every message's content is empty")
    return out
