"""What publishing reads from the warehouse: one function per queries/*.sql file."""

from __future__ import annotations

import duckdb
import pandas as pd

from benchledger.raw.layout import folder_name
from benchledger.rules import BY_NAME, CATALOGUE, CLIENT_LAG_WITHIN_BOUND
from benchledger.warehouse.db import first_row, only_row, query_frame


def latest_run_id(con: duckdb.DuckDBPyConnection) -> str:
    row = first_row(con, "SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1")
    if row is None:
        raise LookupError("the warehouse holds no runs yet")
    return row[0]


def known_runs(con: duckdb.DuckDBPyConnection, limit: int = 10) -> tuple[list[str], int]:
    """The newest `limit` run ids (newest first) and how many runs there are in all."""
    rows = con.execute("SELECT run_id FROM runs ORDER BY started_at DESC").fetchall()
    return [r for r, in rows[:limit]], len(rows)


def unknown_run_message(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """`no run X in the warehouse`, naming the runs it does hold."""
    runs, total = known_runs(con)
    if not total:
        return f"no run {run_id!r} in the warehouse: it holds no runs yet"
    more = f" (newest first; {total - len(runs)} older not shown)" if total > len(runs) else ""
    return (f"no run {run_id!r} in the warehouse; known runs: {', '.join(runs)}{more}")


def run_to_publish(con: duckdb.DuckDBPyConnection, run: str | None,
                   sweep: str | None) -> str:
    """The run `benchledger publish` exports: `run` by its id or by its folder name (as the
    raw and published folders spell it: ':' and '+' become '_'), else the newest run of
    `sweep`, else the newest run where the warehouse holds one sweep. LookupError, naming
    what there is, for an unknown run or sweep, or several sweeps and none named."""
    runs = query_frame(con, "runs_to_publish")
    if run is not None:
        if run in set(runs["run_id"]):
            return run
        by_folder = runs.loc[runs["run_id"].map(folder_name) == run, "run_id"]
        if len(by_folder) == 1:
            return str(by_folder.iloc[0])
        raise LookupError(unknown_run_message(con, run))
    if runs.empty:
        raise LookupError("the warehouse holds no runs yet")
    sweeps = list(dict.fromkeys(runs["sweep_name"].fillna("(imported)")))  # newest first
    if sweep is not None:
        of_sweep = runs.loc[runs["sweep_name"] == sweep, "run_id"]
        if of_sweep.empty:
            raise LookupError(f"no run of sweep {sweep!r} in the warehouse; its sweeps: "
                              f"{', '.join(sweeps)}")
        return str(of_sweep.iloc[0])
    if len(sweeps) > 1:
        raise LookupError(f"the warehouse holds runs of {len(sweeps)} sweeps ("
                          f"{', '.join(sweeps)}, newest first): name one with --sweep NAME "
                          "(its newest run), or a run with --run RUN_ID")
    return str(runs["run_id"].iloc[0])


def run_entry_counts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, int] | None:
    """How many current entries a run has, published and blocked; None for a run the
    warehouse does not hold."""
    if first_row(con, "SELECT 1 FROM runs WHERE run_id = ?", [run_id]) is None:
        return None
    entries, published = only_row(
        con, "SELECT count(*), count(*) FILTER (WHERE publishable) FROM current_entries "
             "WHERE run_id = ?", [run_id])
    return {"entries": entries, "published": published, "blocked": entries - published}


def _frame(con: duckdb.DuckDBPyConnection, query: str, run_id: str) -> pd.DataFrame:
    return query_frame(con, query, run_id=run_id)


def published_entries(con: duckdb.DuckDBPyConnection, run_id: str, limit: int | None = None,
                      offset: int = 0) -> pd.DataFrame:
    """The run's published entries in a stable order: all of them, or `limit` from
    `offset` (a page of the benchledger page; the query itself is bounded)."""
    return query_frame(con, "published_for_run", run_id=run_id, limit=limit, offset=offset)


def blocked_entries(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "blocked_for_run", run_id)


def blocks(con: duckdb.DuckDBPyConnection, run_id: str, limit: int | None = None,
           offset: int = 0) -> pd.DataFrame:
    """One row per blocked entry, failed rule and subject (from entry_blocks): all, or
    `limit` from `offset`."""
    return query_frame(con, "blocks_for_run", run_id=run_id, limit=limit, offset=offset)


# The rules judged on restarts, windows and requests: what an entry rests on, not the entry.
_SUBJECT_RULES = [rule.name for rule in CATALOGUE
                  if rule.applies_to in ("restart", "window", "request")]


def rules_behind_blocked(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Per rule that failed on the run's restarts, windows or requests: its effect, how
    many subjects failed of those it judged, and one example (rules_behind_blocked.sql)."""
    found = query_frame(con, "rules_behind_blocked", run_id=run_id, rules=_SUBJECT_RULES)
    found.insert(1, "effect", [BY_NAME[rule].effect for rule in found["rule"]])
    return found


def comparisons(con: duckdb.DuckDBPyConnection, run_id: str, limit: int | None = None,
                offset: int = 0) -> pd.DataFrame:
    """The run's comparisons in a stable order: all, or `limit` from `offset`."""
    return query_frame(con, "comparisons_for_run", run_id=run_id, limit=limit,
                       offset=offset)


def run_page_counts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, int]:
    """How many rows each table of a run's page has in all: published and blocked
    entries, blocked-entry rows (entry, rule, subject) and comparisons."""
    row = query_frame(con, "ui_run_counts", run_id=run_id).iloc[0]
    return {name: int(row[name]) for name in ("published", "blocked", "block_rows",
                                              "comparisons")}


def delivered_vs_server(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "delivered_vs_server", run_id)


def variance(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "variance_for_run", run_id)


def ruler(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Per window: the client's lag, CPU share, bunched events and bursts (T17), with what
    the lag rule expected there."""
    return query_frame(con, "ruler_for_run", run_id=run_id, rule=CLIENT_LAG_WITHIN_BOUND.name)


def frontier(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's frontier points (table frontier; empty for a run without a ladder)."""
    return _frame(con, "frontier_for_run", run_id)


def frontier_findings(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "frontier_findings_for_run", run_id)


def workload_lengths(con: duckdb.DuckDBPyConnection, run_id: str,
                     bins: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The lengths asked for and delivered over the measured requests behind published
    entries, from one pass over them (workload_lengths_for_run.sql): per workload, length
    (input, output) and side (requested, delivered) its count, missing, min, p50, p90, max
    and mean; and the same lengths in `bins` equal bins per workload and length."""
    rows = query_frame(con, "workload_lengths_for_run", run_id=run_id, bins=bins)
    histogram = rows["bin"].notna()
    summary = rows.loc[~histogram, ["workload", "length", "side", "requests", "missing",
                                    "min", "p50", "p90", "max", "mean"]]
    binned = rows.loc[histogram, ["workload", "length", "side", "bin", "bin_low", "bin_high",
                                  "requests"]].astype({"bin": "int64"})
    return summary.reset_index(drop=True), binned.reset_index(drop=True)


def workload_samples(con: duckdb.DuckDBPyConnection, run_id: str,
                     per_workload: int) -> pd.DataFrame:
    """At most `per_workload` distinct prompts per workload, with one request's lengths."""
    return query_frame(con, "workload_samples_for_run", run_id=run_id,
                       per_workload=per_workload)


def run_provenance(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's sweep name and sha256, harness version, evidence kind, start, end and
    scheduled slot (one row; none for a run the warehouse lacks)."""
    return _frame(con, "run_provenance", run_id)


def arm_servers(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Per arm: nodes, server kind, versions and effective configuration sha256s."""
    return _frame(con, "arm_servers_for_run", run_id)


def raw_files(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Every raw file of the run: kind, sha256, rows and name within the run's folder."""
    return _frame(con, "raw_files_for_run", run_id)


def sweeps(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per sweep: its runs, and its newest run's published and blocked entries and
    verdicts (ui_runs.sql over every sweep, the newest row of each)."""
    newest = query_frame(con, "ui_runs", sweep_name=None, newest_only=True, limit=None,
                         offset=0).rename(columns={
        "sweep_runs": "runs", "run_id": "newest_run_id", "started_at": "newest_started_at"})
    return newest[["sweep_name", "runs", "newest_run_id", "newest_started_at", "published",
                   "blocked", "verdicts"]].reset_index(drop=True)


def runs_of_sweep(con: duckdb.DuckDBPyConnection, sweep_name: str, limit: int | None = None,
                  offset: int = 0) -> pd.DataFrame:
    """A sweep's runs, newest first, with their published and blocked entries and
    verdicts (ui_runs.sql): all, or `limit` from `offset`."""
    return query_frame(con, "ui_runs", sweep_name=sweep_name, newest_only=False,
                       limit=limit, offset=offset)


def sweep_run_count(con: duckdb.DuckDBPyConnection, sweep_name: str) -> int:
    """How many runs a sweep has (0: no such sweep)."""
    return int(query_frame(con, "ui_sweep_run_count", sweep_name=sweep_name)["runs"].iloc[0])


def run_summary(con: duckdb.DuckDBPyConnection, run_id: str) -> dict | None:
    """The run's sweep, times and evidence kind; None for a run the warehouse lacks."""
    found = run_provenance(con, run_id)
    return None if found.empty else found.iloc[0].to_dict()


def entry_summary(con: duckdb.DuckDBPyConnection, entry_id: str) -> dict | None:
    """One entry's labels, value and publishability; None for an unknown entry."""
    found = query_frame(con, "entry_summary", entry_id=entry_id)
    return None if found.empty else found.iloc[0].to_dict()


def entry_blocks(con: duckdb.DuckDBPyConnection, entry_id: str) -> pd.DataFrame:
    """Why one entry is blocked: each failed rule and its subject (empty: published)."""
    return query_frame(con, "entry_blocks_of_entry", entry_id=entry_id)


def entry_windows(con: duckdb.DuckDBPyConnection, entry_id: str) -> pd.DataFrame:
    """The windows an entry rests on, each with its restart (entry_windows.sql)."""
    return query_frame(con, "entry_windows", entry_id=entry_id)


def prepared_workloads(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's prepared workloads, with what their prompts are rendered from."""
    return query_frame(con, "prepared_workloads_for_run", run_id=run_id)
