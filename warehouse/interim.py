"""A sequential sweep's interim looks (issue #41, item 5; docs/protocol.md, "Sequential
verdicts").

After each block from the sweep's minimum `restarts` on (benchledger.sweep.order.looks_after),
the DAG's look task asks whether every A/B is decided. It answers with the warehouse's own
definitions, not a second copy of them: the run's raw files so far are loaded into a
scratch in-memory warehouse, held to the gate and derived exactly as the run's own load,
validate and derive will do it (windows_present counts the blocks run so far), and each
comparison's restart means go through the sequential design's looks
(warehouse/design.py, benchledger/design/sequential.py). The rows, and the sweep's
decision, are written as the run's raw file `_looks/after_block_NNNN.json`; the loader
puts them in `interim_looks`. Nothing here writes the real warehouse: the look may run
while another run loads.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import duckdb

from benchledger.raw import layout as raw
from benchledger.raw.layout import RunLayout
from benchledger.sweep.order import minimum_restarts
from benchledger.sweep.spec import Sweep
from benchledger.warehouse.compare import (
    DEFAULT_NUMERATOR,
    comparison_frames,
    expanded,
    point_of,
    side_of,
)
from benchledger.warehouse.db import connect
from benchledger.warehouse.design import finite, inputs, side_looks
from benchledger.warehouse.load import load_run_dir

STOP, CONTINUE = raw.LOOK_STOP, "continue"


def take_look(layout: RunLayout, sweep: Sweep, blocks: int, sweep_sha256: str) -> bool:
    """Judge every comparison after `blocks` blocks and record the look; True where the
    sweep stops (every A/B decided), False where it goes on."""
    from benchledger.warehouse.derive import derive_entries
    from benchledger.warehouse.validate import validate_run

    with connect(":memory:") as con:
        load_run_dir(con, layout.run_dir)
        validate_run(con, layout.run_id, blocks=blocks)
        derive_entries(con, layout.run_id, sweep=sweep)
        rows = judge(con, layout.run_id, sweep, blocks)
    stop = bool(rows) and all(row["decided"] for row in rows)
    looked_at = datetime.now(UTC).isoformat()
    for row in rows:
        row.update(decision=STOP if stop else CONTINUE, looked_at=looked_at)
    raw.write_json(layout.look_file(blocks),
                   {"run_id": layout.run_id, "sweep_sha256": sweep_sha256, "blocks": blocks,
                    "max_restarts": sweep.sweep.max_restarts,
                    "decision": STOP if stop else CONTINUE, "looked_at": looked_at,
                    "rows": rows},
                   sealed_in=layout.look_file(blocks).parent)
    return stop


def judge(con: duckdb.DuckDBPyConnection, run_id: str, sweep: Sweep,
          blocks: int) -> list[dict[str, Any]]:
    """One row per A/B (each workload, each compared load point): its look after `blocks`
    blocks and whether it is decided by then."""
    assert sweep.sweep.max_restarts is not None, "only a sequential sweep looks"
    maximum, minimum = sweep.sweep.max_restarts, minimum_restarts(sweep)
    entries, restart_means, restarts = comparison_frames(con, run_id)
    rows = []
    for comparison in expanded(sweep, entries):
        point = point_of(comparison, entries)
        numerator = comparison.numerator or DEFAULT_NUMERATOR.get(comparison.metric)
        for workload in sweep.workloads:
            row: dict[str, Any] = {
                "run_id": run_id, "blocks": blocks, "max_restarts": maximum,
                "a": comparison.a, "b": comparison.b,
                "control_a": comparison.control[0] if comparison.control else None,
                "control_b": comparison.control[1] if comparison.control else None,
                "workload": workload.name, "metric": comparison.metric,
                "numerator": numerator, "load_point": point.label if point else None,
                "decided": False, "decided_at_blocks": None, "why": None}
            rows.append(row)
            if point is None:
                row["why"] = "the arms share no load point"
                continue
            names = [comparison.a, comparison.b, *(comparison.control or [])]
            sides = [side_of(entries, restart_means, arm, workload.name, comparison.metric,
                             numerator, point) for arm in names]
            blocked = next((f"arm {arm!r}: {s.blocked}" for arm, s in zip(names, sides,
                                                                         strict=True)
                            if s.blocked), None)
            if blocked:
                row["why"] = blocked[:500]
                continue
            row.update(_judged(*(inputs(s.restarts, restarts) for s in sides),
                               minimum=minimum, maximum=maximum, blocks=blocks))
    return rows


def _judged(a: Any, b: Any, *control: Any, minimum: int, maximum: int,
            blocks: int) -> dict[str, Any]:
    from benchledger.design.sequential import first_decision

    ab = side_looks(a, b, minimum, maximum)
    controls = side_looks(control[0], control[1], minimum, maximum) if control else None
    decided = first_decision(ab, controls)
    out: dict[str, Any] = {"decided": decided is not None,
                           "decided_at_blocks": decided.blocks if decided else None}
    now = next((look for look in ab if look.blocks == blocks), None)
    if now is None:
        out["why"] = "fewer than two restart means on a side after these blocks"
        return out
    out.update(look=now.look, difference=now.difference, statistic=now.statistic, df=now.df,
               z_boundary=finite(now.z_boundary), boundary=finite(now.boundary),
               nominal_level=now.nominal_level, crossed=now.crossed)
    mine = next((look for look in controls or [] if look.blocks == blocks), None)
    if mine is not None:
        out.update(control_difference=mine.difference, control_statistic=mine.statistic,
                   control_boundary=finite(mine.boundary), control_crossed=mine.crossed)
    return out
