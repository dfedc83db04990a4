"""A workload's requests, prepared before its first window: one Arrow table, one record.

`prepare_workload` reads the workload's dataset or trace (checked whole: a bad line is a
WorkloadError naming it, before any server starts), draws its lengths and prefix groups, and
returns a table of TABLE_SCHEMA, a row per request in the order they are to be sent, and its
provenance (JSON). Everything is done a column at a time (numpy, pyarrow): 100,000 requests
make no Python object each. Texts that are not stored (synthetic, trace) are made when a
request is sent (render.py).

Row ids (`item_id`): the dataset row's id; `syn-<n>`, `builtin-<n>` (the sweep's prompt set
gives the text: its prompt n modulo its size), `trace-<line>`; a session's turn is
`<session id>#t<turn>`. A dataset smaller than the items asked for is cycled (`ordered`) or
drawn from with replacement (`seeded`): its ids then repeat, and `dataset.rows_used` says how
many distinct rows were sent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.sweep.workload import WorkloadSource
from benchledger.workloads.datasets import Dataset
from benchledger.workloads.errors import WorkloadError
from benchledger.workloads.jsonio import messages_json
from benchledger.workloads.lengths import PREFIX_GROUP, SAMPLING, DatasetReader, draw, reader, rng
from benchledger.workloads.render import render_request
from benchledger.workloads.sessions import eligible, session_columns, user_turns
from benchledger.workloads.traces import HASH_IDS, read_trace

TABLE_SCHEMA = pa.schema([
    pa.field("item_id", pa.string(), nullable=False), ("prompt", pa.string()),
    ("messages", pa.string()), ("answer", pa.string()), ("max_tokens", pa.int64()),
    ("input_tokens", pa.int64()), ("prefix_group", pa.int64()), ("session", pa.int64()),
    ("turn", pa.int32()), ("arrival_s", pa.float64()), ("hash_ids", HASH_IDS)])


@dataclass(frozen=True)
class PreparedWorkload:
    table: pa.Table  # TABLE_SCHEMA
    provenance: dict[str, Any]  # JSON-serialisable
    # the files (and dataset folders) its rows were read from: a prepared copy of their
    # text is no more readable than they are (benchledger.restart.workload_files)
    sources: tuple[Path, ...] = ()

    def row(self, index: int) -> dict[str, Any]:
        return self.table.slice(index, 1).to_pylist()[0]

    def render(self, index: int) -> str | list[dict[str, str]]:
        """Request `index`'s user text, or its message list (a dataset row that has one)."""
        prefix = self.provenance.get("shared_prefix", {}).get("tokens")
        return render_request(self.row(index), self.provenance["seed"], prefix_tokens=prefix)


def prepare_workload(source: WorkloadSource, base_dir: Path, items: int, seed: int,
                     default_max_tokens: int) -> PreparedWorkload:
    """`items` requests of `source` (for a multi-turn workload, items // turns sessions of
    `turns` requests each); paths relative to `base_dir`; `seed` for every draw."""
    if items < 1:
        raise WorkloadError(f"items must be at least 1, not {items}")
    if default_max_tokens < 1:
        raise WorkloadError(f"default_max_tokens must be at least 1, not {default_max_tokens}")
    rng(seed, SAMPLING)  # a seed numpy takes, or a clear error
    turns = source.turns or 1
    if items % turns:
        raise WorkloadError(f"items ({items}) is not a multiple of turns ({turns}): a "
                            f"session is {turns} requests")
    sessions = items // turns
    read, sources = _recording(reader(base_dir))
    record: dict[str, Any] = {"kind": source.kind}
    if source.kind == "trace":
        assert source.trace is not None
        sources.append(base_dir / source.trace)
        columns = _trace(source, base_dir / source.trace, items, record)
    elif source.kind == "dataset":
        columns = _dataset(source, read, sessions, seed, record)
    else:
        prefix = "syn" if source.kind == "synthetic" else "builtin"
        columns = {"item_id": _ids(prefix, sessions, source.turns)}
        if source.input_length is not None:
            columns["input_tokens"], record["input_length"] = draw(
                source.input_length, items, seed, "input", read)
    record["seed"] = seed
    if source.output_length is not None:
        columns["max_tokens"], record["output_length"] = draw(
            source.output_length, items, seed, "output", read)
    if source.shared_prefix is not None:
        groups = rng(seed, PREFIX_GROUP).integers(0, source.shared_prefix.groups, sessions)
        columns["prefix_group"] = np.repeat(groups, turns)
        record["shared_prefix"] = source.shared_prefix.model_dump()
    if source.turns is not None:
        columns["session"] = np.repeat(np.arange(sessions, dtype=np.int64), turns)
        columns["turn"] = np.tile(np.arange(turns, dtype=np.int32), sessions)
        record.update(turns=source.turns, think_time_s=source.think_time_s,
                      history=source.history)
    table = pa.table({f.name: _column(columns.get(f.name), f.type, items)
                      for f in TABLE_SCHEMA}, schema=TABLE_SCHEMA)
    record["items"] = items
    record["ids_sha256"] = ids_sha256(table["item_id"])
    record["max_tokens"] = {"default": default_max_tokens,
                            "rows_default": table["max_tokens"].null_count}
    return PreparedWorkload(table, record, tuple(dict.fromkeys(sources)))


def _recording(read: DatasetReader) -> tuple[DatasetReader, list[Path]]:
    """`read`, noting every dataset it reads: its path (a file or a folder) and, for a
    folder, each of its files."""
    sources: list[Path] = []

    def noting(written: str, dataset_format: Any = "auto") -> tuple[Dataset, str]:
        dataset, written = read(written, dataset_format)
        sources.append(dataset.path)
        if dataset.is_dir:
            sources.extend(dataset.path / f.path for f in dataset.files)
        return dataset, written

    return noting, sources


def ids_sha256(ids: pa.ChunkedArray | pa.Array) -> str:
    """sha256 of the ids joined by newlines (joined by pyarrow, hashed at once)."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    one = pa.ListArray.from_arrays(pa.array([0, len(ids)], pa.int32()), ids)
    joined = pc.binary_join(one, "\n").cast(pa.binary())
    return hashlib.sha256(joined[0].as_buffer()).hexdigest()


def _column(values: Any, type_: pa.DataType, items: int) -> pa.Array | pa.ChunkedArray:
    if values is None:
        return pa.nulls(items, type_)
    if isinstance(values, pa.Array | pa.ChunkedArray):  # chunks stay chunks: no copy
        return values if values.type == type_ else values.cast(type_)
    return pa.array(values, type_)


def _ids(prefix: str, sessions: int, turns: int | None) -> pa.Array:
    numbers = pc.cast(pa.array(np.arange(sessions)), pa.string())
    if turns is None:
        return pc.binary_join_element_wise(prefix, numbers, "-")
    return _turn_ids(pc.binary_join_element_wise(prefix, numbers, "-"), turns)


def _turn_ids(session_ids: pa.Array, turns: int) -> pa.Array:
    """`<session id>#t<turn>` for each turn of each session, session by session."""
    repeated = session_ids.take(pa.array(np.repeat(np.arange(len(session_ids)), turns)))
    numbers = pc.cast(pa.array(np.tile(np.arange(turns), len(session_ids))), pa.string())
    return pc.binary_join_element_wise(repeated, numbers, "#t")


def _sample(rows: int, n: int, sampling: str, seed: int) -> np.ndarray:
    """Which of `rows` rows each of n items uses: in order, cycling; or a seeded
    permutation, drawn with replacement when n is more than rows."""
    if sampling == "ordered":
        return np.arange(n, dtype=np.int64) % rows
    draws = rng(seed, SAMPLING)
    return draws.permutation(rows)[:n] if n <= rows else draws.integers(0, rows, n)


def _dataset(source: WorkloadSource, read: DatasetReader, sessions: int, seed: int,
             record: dict[str, Any]) -> dict[str, Any]:
    assert source.dataset is not None
    dataset, written = read(source.dataset, source.dataset_format)
    record["dataset"] = dataset.provenance(written)
    record["sampling"] = source.sampling
    t = dataset.table
    if source.turns is None:
        chosen = _sample(dataset.rows, sessions, source.sampling, seed)
        picked = _pick(t, chosen, source.sampling == "ordered")
        columns = {"item_id": picked["id"], "prompt": picked["prompt"],
                   "messages": pa.chunked_array([_sent_messages(batch) for batch in
                                                 picked.select(["prompt", "messages"])
                                                 .to_batches()], pa.string()),
                   "answer": picked["answer"], "max_tokens": picked["max_tokens"]}
    else:
        turns = user_turns(dataset)
        usable = eligible(turns, source.turns, source.history == "dataset")
        if not len(usable):
            need = " with an answer to each of the first turns - 1" \
                if source.history == "dataset" else ""
            raise WorkloadError(
                f"{dataset.path}: no conversation has {source.turns} user turns{need} (a "
                "session is a ShareGPT object's `conversations` or a JSON Lines row's "
                "`messages`)")
        chosen = usable[_sample(len(usable), sessions, source.sampling, seed)]
        per_turn = pa.array(np.repeat(chosen, source.turns))
        columns = {"item_id": _turn_ids(t["id"].combine_chunks().take(pa.array(chosen)),
                                        source.turns),
                   **session_columns(turns, chosen, source.turns),
                   "max_tokens": t["max_tokens"].combine_chunks().take(per_turn)}
        record["dataset"]["sessions_usable"] = len(usable)
    record["dataset"]["rows_used"] = int(np.count_nonzero(np.bincount(chosen,
                                                                      minlength=dataset.rows)))
    return columns


def _pick(table: pa.Table, chosen: np.ndarray, ordered: bool) -> pa.Table:
    """The chosen rows; in order (cycling): slices of the table, no copy."""
    if not ordered:
        return table.take(pa.array(chosen))
    whole, rest = divmod(len(chosen), table.num_rows)
    return pa.concat_tables([table] * whole + [table.slice(0, rest)])


def _sent_messages(batch: pa.RecordBatch) -> pa.Array:
    """The JSON text of the messages a row sends: a row with a prompt sends that (a ShareGPT
    row's messages are its conversation, read for sessions only)."""
    prompt, lists = batch.column(0), batch.column(1)
    lists = pa.ListArray.from_arrays(lists.offsets, lists.values,
                                     mask=pc.or_(lists.is_null(), prompt.is_valid()))
    return messages_json(lists)


def _line(table: pa.Table, row: int) -> int:
    """The trace file's line number of one of its rows."""
    return int(table["line"][row].as_py())


def _trace(source: WorkloadSource, path: Path, items: int,
           record: dict[str, Any]) -> dict[str, Any]:
    trace = read_trace(path)
    if trace.rows < items:
        raise WorkloadError(f"{path}: the trace has {trace.rows} requests, fewer than the "
                            f"{items} items asked for")
    t = trace.table.slice(0, items)
    stamps = np.asarray(t["timestamp"].combine_chunks())
    arrival = (stamps - stamps[0]) / 1000.0 * source.time_scale
    if not arrival[-1] <= source.max_replay_s:  # NaN-proof: inf - inf is refused too
        last = int(np.argmax(np.diff(stamps))) + 1 if len(stamps) > 1 else 0
        raise WorkloadError(
            f"{path}: replaying its first {items} requests takes {arrival[-1]:.6g} s "
            f"(timestamps {stamps[0]:.6g} to {stamps[-1]:.6g} ms, time_scale "
            f"{source.time_scale:g}; the largest gap is before line {_line(t, last)}), above "
            f"max_replay_s = {source.max_replay_s:g} s: a window would wait that long for "
            "its last request. Check the trace's timestamps (milliseconds), lower "
            "time_scale, or raise max_replay_s in its [[workloads]] table")
    lines = pc.cast(t["line"].combine_chunks(), pa.string())
    record["trace"] = {"path": source.trace, "sha256": trace.sha256, "rows": trace.rows,
                       "time_scale": source.time_scale, "duration_s": float(arrival[-1]),
                       "max_replay_s": source.max_replay_s}
    return {"item_id": pc.binary_join_element_wise("trace", lines, "-"),
            "input_tokens": t["input_length"], "max_tokens": t["output_length"],
            "arrival_s": arrival, "hash_ids": t["hash_ids"]}
