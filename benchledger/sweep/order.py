"""The order a sweep's restarts run in (issue #41; docs/protocol.md, "The design").

Anything that changes while a sweep runs (a node warming up, a noisy neighbour, a cache
filling, throttling too mild for the clock rule) lands on one arm only when the restarts
run arm by arm: every restart of the first arm, then every restart of the second. By
default the restarts run in blocks instead: block k holds restart k of every arm, so a
drift slower than a block touches every arm alike, and the order inside a block rotates
so that no arm is always first (a slow first restart after a cold node, or the one after
a neighbour's, is not always the same arm's).

The rotation is a Williams design (Williams 1949, "Experimental designs balanced for the
estimation of residual effects of treatments"): over its rows every arm takes every
position once and follows every other arm once; for two arms it is AB, BA, AB, ... (the
ABBA of a counterbalanced pair). Which arm is which letter is drawn from the sweep's seed,
so the order is random and reproducible; the run records it (restarts.block,
restarts.block_position, restarts.restart_order).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from benchledger.sweep.values import ARM_BY_ARM, BLOCKED, RestartOrder

if TYPE_CHECKING:
    from benchledger.sweep.spec import Sweep

__all__ = ["ARM_BY_ARM", "BLOCKED", "RestartOrder", "Slot", "order_seed", "restart_slots",
           "slot_of", "williams_rows"]


@dataclass(frozen=True)
class Slot:
    """One restart of one arm, in the order the sweep runs them. block is the restart's
    index (restart k of every arm is block k); position its place inside the block (arm
    by arm: the arm's place in the file); sequence its place in the whole sweep."""

    arm: str
    k: int
    block: int
    position: int
    sequence: int


def williams_rows(m: int) -> list[list[int]]:
    """The rows of a Williams design for m treatments: m rows for even m, 2m for odd m
    (the rows and their reverses). Row 0 is 0, 1, m-1, 2, m-2, ...; row i adds i mod m."""
    if m < 1:
        raise ValueError("a design needs at least one treatment")
    first, low, high = [0], 1, m - 1
    while len(first) < m:
        first.append(low)
        low += 1
        if len(first) < m:
            first.append(high)
            high -= 1
    rows = [[(x + i) % m for x in first] for i in range(m)]
    return rows if m % 2 == 0 else rows + [row[::-1] for row in rows]


def order_seed(sweep: Sweep) -> str:
    """What the draw of the arms' letters starts from: the sweep's name and seed (a string
    seed: Python's random hashes it with SHA-512, the same on every machine and version)."""
    return f"{sweep.sweep.name}:{sweep.defaults.seed}"


def restart_slots(sweep: Sweep) -> list[Slot]:
    """Every restart of the sweep, in the order it runs (per node where nodes run in
    parallel: each node keeps this order among its own restarts)."""
    restarts = {arm.name: planned_restarts(sweep, arm.name) for arm in sweep.arms}
    names = list(restarts)
    if sweep.sweep.restart_order == ARM_BY_ARM:
        pairs = [(name, k, k, position) for position, name in enumerate(names)
                 for k in range(restarts[name])]
    else:
        letters = names[:]
        random.Random(order_seed(sweep)).shuffle(letters)
        rows = williams_rows(len(letters))
        pairs = []
        for block in range(max(restarts.values())):
            row = [letters[i] for i in rows[block % len(rows)] if block < restarts[letters[i]]]
            pairs += [(name, block, block, position) for position, name in enumerate(row)]
    return [Slot(arm, k, block, position, sequence)
            for sequence, (arm, k, block, position) in enumerate(pairs)]


def planned_restarts(sweep: Sweep, arm: str) -> int:
    """The most restarts the arm may run: the sweep's max_restarts where it has one (a
    sequential sweep: its interim looks may skip the later blocks), else its restarts."""
    return sweep.sweep.max_restarts or sweep.arm(arm).restarts


def looks_after(sweep: Sweep) -> list[int]:
    """The blocks (0-based) after which a sequential sweep's interim look runs: every block
    that completes the minimum restarts or more, but the last (the warehouse judges that
    one when the run is derived)."""
    maximum = sweep.sweep.max_restarts
    if maximum is None:
        return []
    return [block for block in range(maximum - 1) if block + 1 >= minimum_restarts(sweep)]


def minimum_restarts(sweep: Sweep) -> int:
    """The restarts every arm runs before a sequential sweep's first look (a sequential
    sweep's arms share one `restarts`: benchledger.sweep.values.sequential_problem)."""
    return min(sweep.plan(arm).restarts for arm in sweep.arms)


def slot_of(sweep: Sweep, arm: str, k: int) -> Slot:
    """The slot of restart k of the arm."""
    for slot in restart_slots(sweep):
        if slot.arm == arm and slot.k == k:
            return slot
    raise KeyError(f"sweep {sweep.sweep.name!r} has no restart {k} of arm {arm!r}")
