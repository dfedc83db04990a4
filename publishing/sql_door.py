"""`benchledger sql`: the auditor's read-only door into the warehouse.

Exactly one read statement per call, the warehouse opened read-only; every other kind of
statement is refused, with its reason, before it reaches DuckDB.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from benchledger.warehouse.db import connect


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


def read_query(warehouse: Path, text: str) -> pd.DataFrame:
    """The rows of the one read statement `text`, from the warehouse opened read-only."""
    query = auditor_statement(text)
    with connect(Path(warehouse), read_only=True) as con:
        try:
            return con.sql(query).df()
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
