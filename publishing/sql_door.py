"""`benchledger sql`: the auditor's read-only door into the warehouse.

Exactly one read statement per call, the warehouse opened read-only; every other kind of
statement is refused, with its reason, before it reaches DuckDB. A query is bounded
(DoorLimits): in time (a timer interrupts it), in memory (DuckDB's memory_limit, no
spilling to disk) and in what is fetched (rows, and their Arrow bytes within the memory
limit, so the pandas copy stays bounded too). It also gives way to a writer waiting for
the warehouse (warehouse/writer_waiting.py): a reader never makes a load fail.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from benchledger.settings import (
    SMALLEST_SQL_MEMORY,
    SQL_MAX_ROWS_RANGE,
    SQL_TIMEOUT_RANGE_S,
    memory_bytes,
    settings,
    variable,
)
from benchledger.warehouse.db import connect
from benchledger.warehouse.writer_waiting import writer_is_waiting


class QueryRefused(Exception):
    """The statement is not one read, or DuckDB refused it: the message says why."""


# The statements the auditor's door runs: reads (SELECT covers DESCRIBE, SHOW, SUMMARIZE,
# FROM-first queries and VALUES). Anything else is refused before it reaches DuckDB, with
# the reason below; DuckDB's own lockdown (warehouse.db.READ_ONLY_CONFIG) stands behind
# this list for whatever a read could still try (read_csv of a file, a SET inside EXPLAIN).
READ_STATEMENTS = {"SELECT", "EXPLAIN"}
REFUSED_STATEMENTS = {
    "COPY": "COPY reads and writes files",
    "COPY_DATABASE": "COPY FROM DATABASE writes to a database",
    "EXPORT": "EXPORT DATABASE writes files",
    "LOAD": "INSTALL and LOAD add extensions",
    "EXTENSION": "extension statements change what the connection can do",
    "ATTACH": "ATTACH opens another database file",
    "DETACH": "DETACH changes the open databases",
    "SET": "SET, RESET and USE change the connection's settings",
    "VARIABLE_SET": "SET VARIABLE changes the connection's state",
    "PRAGMA": "PRAGMA changes settings (DESCRIBE, SHOW and duckdb_settings() read them)",
    "CALL": "CALL runs a procedure (write SELECT * FROM the_function() to read one)",
    "TRANSACTION": "transaction statements are for writers",
    "MULTI": "this statement expands into several statements",
    **{kind: f"{kind.replace('_', ' ')} writes, and benchledger sql opens the warehouse "
             "read-only" for kind in ("INSERT", "UPDATE", "DELETE", "CREATE", "DROP",
                                      "ALTER", "MERGE_INTO", "CREATE_FUNC", "VACUUM",
                                      "ANALYZE")},
}


def auditor_statement(text: str) -> str:
    """The one read statement of `text`, or QueryRefused naming what was refused."""
    try:
        statements = duckdb.extract_statements(text)
    except duckdb.Error as exc:
        raise QueryRefused(f"query failed: {_one_line(exc)}") from exc
    if len(statements) != 1:
        raise QueryRefused(f"refused: {len(statements)} statements; the auditor's door "
                           "runs exactly one statement per call")
    kind = statements[0].type.name
    if kind not in READ_STATEMENTS:
        reason = REFUSED_STATEMENTS.get(kind, f"{kind} statements are not reads")
        raise QueryRefused(f"refused: {reason}; the auditor's door only reads the warehouse")
    return statements[0].query


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


TIMEOUT_ENV = variable("sql_timeout_s")
MEMORY_ENV = variable("sql_memory_limit")
MAX_ROWS_ENV = variable("sql_max_rows")
_BATCH_ROWS = 256  # rows per Arrow batch fetched: the byte bound is checked this often
_POLL_S = 0.1  # how often the watcher looks at the clock and for a waiting writer


@dataclass(frozen=True)
class DoorLimits:
    """What one query may take. The defaults (benchledger.settings) suit a look at the
    warehouse; each can be raised (a flag of `benchledger sql`, or its environment
    variable)."""

    timeout_s: float
    memory_limit: str  # DuckDB's notation: 1GB, 512MB, 2GiB
    max_rows: int

    @property
    def memory_bytes(self) -> int:
        return memory_bytes(self.memory_limit)


def door_limits(timeout_s: float | None = None, memory_limit: str | None = None,
                max_rows: int | None = None) -> DoorLimits:
    """The limits of one call: a flag given, else its environment variable, else the
    default. ValueError naming the flag, or the variable (benchledger.settings checks
    those), for a value out of range."""
    current = settings()
    if timeout_s is None:
        timeout_s = current.sql_timeout_s
    elif not SQL_TIMEOUT_RANGE_S[0] <= timeout_s <= SQL_TIMEOUT_RANGE_S[1]:  # nan: false
        raise ValueError(f"--timeout-s {timeout_s!r}: expected seconds from "
                         f"{SQL_TIMEOUT_RANGE_S[0]:g} to {SQL_TIMEOUT_RANGE_S[1]:g}")
    if not memory_limit:
        memory_limit = current.sql_memory_limit
    else:
        try:
            size = memory_bytes(memory_limit)
        except ValueError as exc:
            raise ValueError(f"--memory-limit {exc}") from None
        if size < SMALLEST_SQL_MEMORY:
            raise ValueError(f"--memory-limit {memory_limit!r}: at least 16MB")
    if max_rows is None:
        max_rows = current.sql_max_rows
    elif not SQL_MAX_ROWS_RANGE[0] <= max_rows <= SQL_MAX_ROWS_RANGE[1]:
        raise ValueError(f"--max-rows {max_rows!r}: expected 1 to 10^9")
    return DoorLimits(timeout_s, memory_limit.strip(), max_rows)


@dataclass(frozen=True)
class DoorRows:
    frame: pd.DataFrame
    cut: str | None = None  # why rows beyond the frame were not fetched (None: all were)

    def text(self, max_width: int | None = None) -> str:
        """The rows as the terminal shows them: every value whole (unless `max_width`
        cuts a column), NULL as NULL and a float NaN as NaN (pandas would print both as
        NaN), the column names over an empty result."""
        if self.frame.empty:
            return f"{' | '.join(map(str, self.frame.columns))}\n(0 rows)"
        return shown(self.frame).to_string(index=False, max_colwidth=max_width)


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (as to_pandas(types_mapper=pd.ArrowDtype) keeps it: NULL apart from NaN)
    with each NULL written NULL; the numbers keep pandas' own formatting."""
    out = {}
    for name in frame.columns:
        column = frame[name]
        if column.isna().any():
            column = column.astype(object).where(column.notna(), "NULL")
        out[name] = column
    return pd.DataFrame(out, columns=frame.columns)


def read_query(warehouse: Path, text: str, limits: DoorLimits | None = None) -> DoorRows:
    """The rows of the one read statement `text`, from the warehouse opened read-only,
    within `limits` (default: door_limits()). QueryRefused when it is not a read, fails,
    runs out of time or memory, or gives way to a waiting writer."""
    query = auditor_statement(text)
    limits = limits or door_limits()
    with _open_behind_writers(Path(warehouse), limits) as con:
        watcher = _Watcher(con, Path(warehouse), limits.timeout_s)
        try:
            with watcher:
                table, cut = _fetch(con, query, limits)
            # ArrowDtype: a NULL stays a NULL (pd.NA), apart from a float NaN
            return DoorRows(table.to_pandas(types_mapper=pd.ArrowDtype), cut)
        except duckdb.InterruptException as exc:
            raise QueryRefused(watcher.why_stopped()) from exc
        except duckdb.OutOfMemoryException as exc:
            raise QueryRefused(f"query refused: it needs more memory than the limit of "
                               f"{limits.memory_limit} (benchledger sql --memory-limit "
                               f"raises the bound): {_first_line(exc)}") from exc
        except duckdb.PermissionException as exc:
            # DuckDB's lockdown refused a file, a network address or an extension.
            raise QueryRefused(f"refused: {_one_line(exc)}; the auditor's door only reads "
                               "the warehouse") from exc
        except duckdb.Error as exc:
            # DuckDB refuses any write on a read-only connection with InvalidInputException.
            if isinstance(exc, duckdb.InvalidInputException) and "read-only" in str(exc):
                raise QueryRefused("refused: benchledger sql is read-only: the warehouse "
                                   f"was opened with read_only=True ({_one_line(exc)})"
                                   ) from exc
            raise QueryRefused(f"query failed: {_one_line(exc)}") from exc


def _open_behind_writers(warehouse: Path, limits: DoorLimits) -> duckdb.DuckDBPyConnection:
    """The warehouse, read-only, once no writer waits for it. A query that arrives while a
    run's load waits lets the load in first and then runs (the open waits for the load's
    lock to go), rather than taking the file from under it or refusing the auditor; it
    waits at most its own timeout_s for that, then gives way saying so."""
    deadline = time.monotonic() + limits.timeout_s
    while True:
        while writer_is_waiting(warehouse):
            if time.monotonic() >= deadline:
                raise QueryRefused(
                    f"query not started: writers (a run's load) kept waiting for the "
                    f"warehouse for {limits.timeout_s:g} s, and the auditor's door gives way "
                    "to them; run the query again once they are done")
            time.sleep(_POLL_S)
        con = connect(warehouse, read_only=True,
                      limits={"memory_limit": limits.memory_limit, "temp_directory": ""})
        if not writer_is_waiting(warehouse):
            return con
        con.close()  # a writer came while this opened: let it in first


def _fetch(con: duckdb.DuckDBPyConnection, query: str,
           limits: DoorLimits) -> tuple[pa.Table, str | None]:
    """The result's first rows as Arrow, streamed batch by batch: at most max_rows rows and
    about memory_limit bytes, so neither the fetched rows nor their pandas copy can grow
    without bound. Says why it stopped early, if it did."""
    reader = con.sql(query).to_arrow_reader(_BATCH_ROWS)
    batches: list[pa.RecordBatch] = []
    rows = size = 0
    cut = None
    for batch in reader:
        if rows + batch.num_rows > limits.max_rows:
            batch = batch.slice(0, limits.max_rows - rows)
            cut = (f"the first {limits.max_rows} rows of a longer result (benchledger sql "
                   "--max-rows raises the bound)")
        if size + batch.nbytes > limits.memory_bytes:
            # as many of this batch's rows as fit, by their mean size
            fit = (limits.memory_bytes - size) * batch.num_rows // max(1, batch.nbytes)
            batch = batch.slice(0, fit)
            cut = (f"the first {rows + fit} rows: the next ones would take more than the "
                   f"memory limit of {limits.memory_limit} (benchledger sql --memory-limit "
                   "raises the bound)")
        batches.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if cut:
            break
    reader.close()
    return pa.Table.from_batches(batches, schema=reader.schema), cut


class _Watcher:
    """While a query runs: interrupts it when its time is up, or when a writer waits for
    the warehouse (a reader never makes a load fail), and remembers which."""

    def __init__(self, con: duckdb.DuckDBPyConnection, warehouse: Path,
                 timeout_s: float) -> None:
        self.con, self.warehouse, self.timeout_s = con, warehouse, timeout_s
        self.started = time.monotonic()
        self.reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="benchledger-sql-bound",
                                        daemon=True)

    def __enter__(self) -> _Watcher:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        deadline = self.started + self.timeout_s
        while not self._done.wait(min(_POLL_S, max(0.0, deadline - time.monotonic()))):
            if self.reason is not None:
                pass
            elif time.monotonic() >= deadline:
                self.reason = (f"query stopped after {self.timeout_s:g} s (benchledger sql "
                               "--timeout-s raises the bound)")
            elif writer_is_waiting(self.warehouse):
                self.reason = _gave_way(time.monotonic() - self.started)
            else:
                continue
            # Again at every poll until the query ends: DuckDB drops an interrupt that
            # comes before the statement starts executing (still being bound), and a query
            # that missed it would hold the warehouse from the writer for its whole bound.
            self.con.interrupt()

    def why_stopped(self) -> str:
        return self.reason or "query interrupted"


def _gave_way(after_s: float) -> str:
    return (f"query stopped after {after_s:.1f} s: a writer (a run's load) is waiting for "
            "the warehouse, and the auditor's door gives way to it; run the query again "
            "once it is done")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]
