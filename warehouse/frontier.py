"""The throughput-interactivity frontier, the load an arm sustains under its SLOs, and
frontier comparisons (issue #27; docs/protocol.md: the frontier).

One frontier point per (arm, workload, load point), made of the run's current entries and
nothing else: x is the per-user decode rate (the request-level mean of decode_rate, per
user), y the deployment's output throughput (the window metric), each with its
restart-level 95% interval, and y per GPU where the arm's telemetry listed its GPUs the
same on every restart. Beside them the load's SLO attainment over all submitted requests
and whether the load is sustained (attainment at or above the sweep's target: the mean
over restarts, its interval stored beside it; every percentile SLO met; not saturated;
publishable) or saturated (its submissions fell behind their schedule, the wait for the
first token grew over the window, requests stayed unresolved, or the arrivals rule
blocked the point). The arm's sustained load is the last point of its
ladder, in load order, before the first that is not sustained.

A comparison of metric "frontier" is measured as two ordinary comparisons at every load
point both arms (and their A/A control) share: throughput and per-user decode rate, each
held to the control by warehouse/compare.py where the sweep names one. At each point the
two verdicts together say which arm dominates: b dominates where b is better on one axis
(beyond the control, where there is one) and not worse on the other; a trade-off where each
is better on one; no finding elsewhere. A finding names the control only where there is
one; without, its reason says it was not held to one (NO_CONTROL). The control pair's own
findings are never a dominance (control_finding).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import duckdb
import pandas as pd

from benchledger import __version__
from benchledger.rules import ARRIVALS_ON_SCHEDULE
from benchledger.sweep.slos import meets_target, queue_growth_sql, saturation_reasons
from benchledger.sweep.spec import Sweep
from benchledger.warehouse.compare import IMPROVEMENT, NO_FINDING, NOT_DECIDABLE, REGRESSION
from benchledger.warehouse.db import insert_frame, query_frame, recorded_sweep
from benchledger.warehouse.entries import as_float, over_slo_requests
from benchledger.warehouse.metrics import MEETING_ALL, MEETING_SLO

# What each axis reads: the metric, its scope, and the numerators in order of preference
# (a reasoning model's rates count answer tokens).
NUMERATORS = ("output_tokens", "answer_tokens")
ARRIVAL_RULE = ARRIVALS_ON_SCHEDULE.name
FRONTIER_AXES = (("throughput", "throughput"), ("decode_rate", "per_user"))


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]


def _pick(entries: pd.DataFrame, metric: str, aggregate: bool,
          population: str | None = None) -> pd.DataFrame:
    """One entry per (arm, workload, load_point) of the metric (mean, preferred numerator)."""
    rows = entries[(entries["metric"] == metric) & (entries["statistic"] == "mean")
                   & ((entries["scope"] == "aggregate") == aggregate)]
    if population is not None:
        rows = rows[rows["population"] == population]
    if metric in ("throughput", "decode_rate"):
        rows = rows[rows["numerator"].isin(NUMERATORS)]
        rank = rows["numerator"].map({n: i for i, n in enumerate(NUMERATORS)})
        rows = rows.assign(_rank=rank).sort_values("_rank")
    return rows.drop_duplicates(["arm", "workload", "load_point"])


def _axis(rows: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """An axis' value (restart mean where there is a restart level) and its interval."""
    value = rows["restart_mean"].fillna(rows["value"])
    return pd.DataFrame({
        "arm": rows["arm"], "workload": rows["workload"], "load_point": rows["load_point"],
        prefix: value, f"{prefix}_low": rows["restart_ci95_low"],
        f"{prefix}_high": rows["restart_ci95_high"],
        f"{prefix}_entry_id": rows["entry_id"], f"{prefix}_publishable": rows["publishable"],
        f"{prefix}_n_restarts": rows["n_restarts"],
        f"{prefix}_numerator": rows["numerator"]})


KEYS = ["arm", "workload", "load_point"]


def frontier_points(entries: pd.DataFrame, sweep: Sweep, gpus: dict[str, int],
                    load: pd.DataFrame) -> pd.DataFrame:
    """The frontier's points of one run's current entries (see the module's docstring)."""
    per_user = _axis(_pick(entries, "decode_rate", aggregate=False), "per_user")
    throughput = _axis(_pick(entries, "throughput", aggregate=True), "throughput")
    submitted = entries[entries["numerator"] == MEETING_ALL]
    attainment = _axis(_pick(submitted, "slo_attainment", True, "all_submitted"),
                       "attainment")
    goodput = _pick(entries, "goodput", True)
    goodput = goodput[goodput["unit"] == "tok/s"][[*KEYS, "value"]].rename(
        columns={"value": "goodput_tok_s"})
    labels = entries.drop_duplicates(KEYS)[
        [*KEYS, "concurrency", "requested_rate_rps", "achieved_rate_rps", "drain_status"]]
    points = (throughput.merge(per_user, on=KEYS, how="outer")
              .merge(labels, on=KEYS, how="left")
              .merge(attainment, on=KEYS, how="left").merge(goodput, on=KEYS, how="left")
              .merge(load, on=KEYS, how="left"))
    if points.empty:
        return points
    blocked_late = _late_points(entries)
    percentiles = _per_slo(entries)
    out = []
    for (arm, workload), mine in points.groupby(["arm", "workload"], sort=False):
        mine = mine.sort_values(["concurrency", "requested_rate_rps"], na_position="first")
        sustained_so_far, last_sustained = True, None
        records: list[dict] = []
        for p in mine.to_dict("records"):
            key = (arm, workload, p["load_point"])
            record = _point_record(p, sweep, gpus.get(arm), key in blocked_late,
                                   percentiles.get(key, {}))
            if sustained_so_far and record["meets_target"] and not record["saturated"] \
                    and record["publishable"]:
                last_sustained = len(records)
            else:
                sustained_so_far = False
            records.append(record)
        for i, record in enumerate(records):
            record["sustained"] = i == last_sustained
        out += records
    return pd.DataFrame(out)


def _late_points(entries: pd.DataFrame) -> set[tuple[str, str, str]]:
    """Load points whose entries the arrivals rule blocked: the client could not keep the
    schedule, or the server did not take the requests as fast as they came."""
    late = entries[entries["blocked_by"].fillna("").str.contains(ARRIVAL_RULE, regex=False)]
    return set(zip(late["arm"], late["workload"], late["load_point"], strict=True))


def _point_record(p: dict, sweep: Sweep, gpus: int | None, late: bool,
                  percentiles: dict[str, float | None]) -> dict:
    target = sweep.slo_target
    requested, achieved = as_float(p.get("requested_rate_rps")), as_float(
        p.get("achieved_rate_rps"))
    kept, growth = as_float(p.get("schedule_kept")), as_float(p.get("queue_growth"))
    unresolved = as_float(p.get("unresolved")) or (p.get("drain_status") == "incomplete")
    reasons = saturation_reasons(target, kept, growth, as_float(p.get("queue_growth_s")),
                                 unresolved, late)
    # the attainment's restart-level mean (its interval stored beside it)
    meets = meets_target(target, sweep.slos_of(p["workload"]), as_float(p.get("attainment")),
                         percentiles)
    y, y_low, y_high = (as_float(p.get(k)) for k in
                        ("throughput", "throughput_low", "throughput_high"))
    per_gpu = {f"throughput_per_gpu{suffix}": (None if v is None or not gpus else v / gpus)
               for suffix, v in (("_tok_s", y), ("_low", y_low), ("_high", y_high))}
    return {
        "arm": p["arm"], "workload": p["workload"], "load_point": p["load_point"],
        "concurrency": int(p["concurrency"]), "requested_rate_rps": requested,
        "achieved_rate_rps": achieved, "schedule_kept": kept, "queue_growth": growth,
        "numerator": p.get("throughput_numerator") or p.get("per_user_numerator"),
        "per_user_tok_s": as_float(p.get("per_user")),
        "per_user_low": as_float(p.get("per_user_low")),
        "per_user_high": as_float(p.get("per_user_high")),
        "throughput_tok_s": y, "throughput_low": y_low, "throughput_high": y_high,
        "gpus": gpus, **per_gpu,
        "attainment": as_float(p.get("attainment")),
        "attainment_low": as_float(p.get("attainment_low")),
        "attainment_high": as_float(p.get("attainment_high")),
        "goodput_tok_s": as_float(p.get("goodput_tok_s")),
        "publishable": bool(p.get("throughput_publishable") is True
                            and p.get("per_user_publishable") is True),
        "meets_target": meets, "saturated": bool(reasons),
        "saturation_reason": "; ".join(reasons) or None,
        "per_user_entry_id": p.get("per_user_entry_id"),
        "throughput_entry_id": p.get("throughput_entry_id"),
        "attainment_entry_id": p.get("attainment_entry_id"),
        "n_restarts": None if pd.isna(p.get("throughput_n_restarts")) else int(
            p["throughput_n_restarts"]),
    }


def _per_slo(entries: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, float | None]]:
    """Per (arm, workload, load point): each SLO's attainment (its restart-level mean)."""
    rows = entries[(entries["metric"] == "slo_attainment")
                   & entries["numerator"].fillna("").str.startswith(MEETING_SLO)]
    out: dict[tuple[str, str, str], dict[str, float | None]] = {}
    for r in rows.itertuples():
        value = as_float(r.restart_mean) if as_float(r.restart_mean) is not None \
            else as_float(r.value)
        out.setdefault((r.arm, r.workload, r.load_point), {})[
            r.numerator.removeprefix(MEETING_SLO)] = value
    return out


def _load(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Per (arm, workload, load point): the schedule its submissions kept (the worst of its
    windows), how its first-token wait grew (the window whose wait grew most) and its
    unresolved requests."""
    windows = query_frame(con, "frontier_load_for_run", run_id=run_id)
    growth = over_slo_requests(con, windows[["window_id"]].assign(restart_id=None, cell=0),
                               queue_growth_sql())
    windows = windows.merge(growth, on="window_id", how="left")
    worst = windows.sort_values("queue_growth", na_position="first").groupby(
        KEYS, sort=False).tail(1).set_index(KEYS)[["queue_growth", "queue_growth_s"]]
    totals = windows.groupby(KEYS).agg(schedule_kept=("schedule_kept", "min"),
                                       unresolved=("unresolved", "sum"))
    return totals.join(worst).reset_index()


def derive_frontier(con: duckdb.DuckDBPyConnection, run_id: str,
                    sweep: Sweep | None = None) -> int:
    """Write the run's frontier points and frontier findings (replacing the run's earlier
    ones: they are a view of its current entries and comparisons); returns the points."""
    sweep = sweep or recorded_sweep(con, run_id)
    entries = con.execute("SELECT * FROM current_entries WHERE run_id = ?", [run_id]).df()
    if entries.empty:
        return 0
    entries["load_point"] = entries["load_point"].fillna(
        "c" + entries["concurrency"].astype(str))
    gpus = {r.arm: int(r.gpus) for r in query_frame(
        con, "frontier_gpus_for_run", run_id=run_id).itertuples() if not pd.isna(r.gpus)}
    points = frontier_points(entries, sweep, gpus, _load(con, run_id))
    now = datetime.now(UTC)
    con.execute("DELETE FROM frontier WHERE run_id = ?", [run_id])
    if not points.empty:
        points.insert(0, "run_id", run_id)
        points.insert(0, "frontier_id", [_digest(run_id, a, w, lp) for a, w, lp in zip(
            points["arm"], points["workload"], points["load_point"], strict=True)])
        points["harness_version"], points["derived_at"] = __version__, now
        insert_frame(con, "frontier", points)
    _write_findings(con, run_id, sweep, now)
    return len(points)


# A frontier comparison without a control is judged on its intervals alone (as
# compare.decide judges its axes); its findings say so rather than claim a control.
NO_CONTROL = "no A/A control: not held to one"
# What a frontier comparison finds beyond a comparison's own verdicts (NO_FINDING,
# NOT_DECIDABLE): one side better on an axis and not worse on the other, or a trade.
B_DOMINATES, A_DOMINATES, TRADE_OFF = "b dominates", "a dominates", "trade-off"
FINDINGS = (B_DOMINATES, A_DOMINATES, TRADE_OFF)


def finding(throughput: str | None, per_user: str | None, *,
            has_control: bool) -> tuple[str, str]:
    """What two axes' verdicts (b against a) say together, and why; `has_control`: whether
    the comparison names an A/A control (the reason names it only then)."""
    verdicts = {"throughput": throughput, "per-user decode rate": per_user}
    better = [axis for axis, v in verdicts.items() if v == IMPROVEMENT]
    worse = [axis for axis, v in verdicts.items() if v == REGRESSION]
    unheld = "" if has_control else f" ({NO_CONTROL})"
    held = " beyond the A/A control" if has_control else unheld
    if better and worse:
        return TRADE_OFF, f"b is better on {better[0]} and worse on {worse[0]}{unheld}"
    if better:
        return B_DOMINATES, (f"b is better on {' and '.join(better)}{held}, and not worse "
                             "on the other axis")
    if worse:
        return A_DOMINATES, (f"a is better on {' and '.join(worse)}{held}, and not worse "
                             "on the other axis")
    if any(v in (None, NOT_DECIDABLE) for v in verdicts.values()):
        return NOT_DECIDABLE, "an axis could not be compared: " + "; ".join(
            f"{axis}: {v or 'no comparison'}" for axis, v in verdicts.items())
    return NO_FINDING, ("neither axis differs beyond what the A/A control shows"
                        if has_control else f"neither axis differs{unheld}")


def control_finding(throughput: str | None, per_user: str | None) -> tuple[str, str]:
    """What an A/A pair's two axes say: never a dominance (one configuration cannot beat
    itself); 'no finding', with a note where its own interval excluded 0 (its instances
    vary more than its restarts average out: the A/B's findings are held to that
    difference), or 'not decidable' where an axis could not be compared."""
    verdicts = {"throughput": throughput, "per-user decode rate": per_user}
    if any(v is None for v in verdicts.values()):
        return NOT_DECIDABLE, "an axis of the A/A control has no comparison: " + "; ".join(
            f"{axis}: {v or 'none'}" for axis, v in verdicts.items())
    noisy = [axis for axis, v in verdicts.items() if v == NOT_DECIDABLE]
    return NO_FINDING, ("same-vs-same" + (
        f"; its own interval excluded 0 on {' and '.join(noisy)} (instances vary more than "
        "the restarts average out: add restarts)" if noisy else
        ": neither axis differs"))


def _write_findings(con: duckdb.DuckDBPyConnection, run_id: str, sweep: Sweep,
                    now: datetime) -> None:
    con.execute("DELETE FROM frontier_findings WHERE run_id = ?", [run_id])
    frontier = [c for c in sweep.comparisons if c.metric == "frontier"]
    if not frontier:
        return
    rows = con.execute(
        "SELECT * FROM comparisons WHERE run_id = ? AND metric IN ('throughput', "
        "'decode_rate') QUALIFY row_number() OVER (PARTITION BY comparison_id "
        "ORDER BY derived_at DESC) = 1", [run_id]).df()
    rows["load_point"] = rows["load_point"].fillna("c" + rows["concurrency"].astype(str))
    out = []
    for comparison in frontier:
        pairs = [("ab", comparison.a, comparison.b)]
        if comparison.control:
            pairs.insert(0, ("control", comparison.control[0], comparison.control[1]))
        for role, a, b in pairs:
            mine = rows[(rows["role"] == role) & (rows["a"] == a) & (rows["b"] == b)]
            for (workload, point), both in mine.groupby(["workload", "load_point"]):
                axes = {m: both[both["metric"] == m].iloc[0] if (both["metric"] == m).any()
                        else None for m, _ in FRONTIER_AXES}
                t, u = axes["throughput"], axes["decode_rate"]
                verdicts = (None if t is None else t["verdict"],
                            None if u is None else u["verdict"])
                word, reason = (control_finding(*verdicts) if role == "control" else
                                finding(*verdicts, has_control=bool(comparison.control)))
                out.append({
                    "finding_id": _digest(run_id, role, a, b, workload, point),
                    "run_id": run_id, "role": role, "a": a, "b": b, "workload": workload,
                    "load_point": point, "finding": word, "reason": reason,
                    **_axis_values("throughput", t), **_axis_values("per_user", u),
                    "harness_version": __version__, "derived_at": now})
    if out:
        insert_frame(con, "frontier_findings", pd.DataFrame(out))


def _axis_values(prefix: str, row: pd.Series | None) -> dict:
    keys = ("verdict", "difference", "ci95_low", "ci95_high")
    values = {f"{prefix}_{k}": None if row is None else
              (row[k] if k == "verdict" else as_float(row[k])) for k in keys}
    values[f"{prefix}_comparison_id"] = None if row is None else row["comparison_id"]
    return values
