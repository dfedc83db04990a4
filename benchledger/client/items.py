"""A prepared workload's requests, as the client submits them (issue #26).

The run's plan prepares every workload that is not a built-in prompt set once
(benchledger.workloads: a dataset, synthetic lengths, shared prefixes, multi-turn sessions,
a trace) into an Arrow file of the run folder; each window's process opens that file
memory-mapped and reads the one row a request needs when it is submitted, so no process
holds per-request Python objects for more than the window it measures. Request number i of
a part uses row i (cycling when the part has more requests than rows): the warm-up and the
measured part draw the same rows, as the built-in prompt sets always did.

Synthetic and trace prompts are rendered from their row here (benchledger.workloads.render):
storing a 100,000-request workload's texts would cost gigabytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from benchledger.prompts import Prompt
from benchledger.workloads.render import render_request


@dataclass(frozen=True)
class Items:
    """Where a window's requests come from when its workload was prepared (picklable: a
    worker process opens the file itself)."""

    path: str  # the prepared file (<run folder>/<workload>.workload.arrow)
    sha256: str  # as the run manifest records it; checked before the window starts
    kind: str  # dataset | synthetic | trace
    seed: int
    turns: int = 1  # > 1: multi-turn sessions of this many requests
    think_time_s: float = 0.0  # between a turn's answer and the next turn
    history: str = "server"  # what a later turn sends back: the server's answers or the dataset's
    prefix_tokens: int | None = None  # shared_prefix: each group's prefix length

    @property
    def trace(self) -> bool:
        return self.kind == "trace"

    def row(self, i: int) -> dict[str, Any]:
        """Request number i's row (cycling over the file's rows)."""
        table = _table(self.path)
        return table.slice(i % table.num_rows, 1).to_pylist()[0]

    def arrivals(self, requests: int) -> list[float]:
        """A trace's due times (seconds from the first arrival) of its first `requests`
        rows: one float per measured request, the window's schedule."""
        column = _table(self.path).column("arrival_s")
        if requests > len(column):
            raise ValueError(f"{self.path}: the trace has {len(column)} rows, the window "
                             f"replays {requests}")
        return column.slice(0, requests).to_pylist()


@lru_cache(maxsize=8)
def _table(path: str) -> pa.Table:
    """The prepared file, memory-mapped (its pages are read as rows are used)."""
    return ipc.open_file(pa.memory_map(path, "r")).read_all()


@dataclass(frozen=True)
class ItemRequest:
    """What one request of a prepared workload sends and records."""

    prompt: Prompt  # id: the item's id; text: what was sent (messages as JSON)
    messages: list[dict[str, str]] | None  # chat messages to send instead of prompt.text
    max_tokens: int | None  # the row's requested output length (None: the sweep's)
    requested_input_tokens: int | None
    prefix_group: int | None
    session: int | None
    turn: int | None
    answer: str | None  # the dataset's reply of this turn (history = "dataset")


def item_request(items: Items, i: int, history: list[dict[str, str]] | None = None,
                 cold_prefix: str | None = None) -> ItemRequest:
    """Request number i of a part: its row rendered. `history`: a multi-turn session's
    earlier turns (user and assistant messages), sent before this turn's user message.
    `cold_prefix`: prompt_cache = "cold", a unique first block in front of everything."""
    row = items.row(i)
    rendered = render_request(row, items.seed, prefix_tokens=items.prefix_tokens)
    messages, text = (rendered, None) if isinstance(rendered, list) else (None, rendered)
    if cold_prefix is not None:
        if messages is not None:
            messages[0] = {**messages[0],
                           "content": f"{cold_prefix}\n\n{messages[0]['content']}"}
        else:
            text = f"{cold_prefix}\n\n{text}"
    if history is not None:
        messages = [*history, *(messages or [{"role": "user", "content": text or ""}])]
    if messages is not None:
        sent = json.dumps(messages, ensure_ascii=False, separators=(",", ":"))
    else:
        sent = text or ""
    return ItemRequest(
        prompt=Prompt(id=str(row["item_id"]), text=sent), messages=messages,
        max_tokens=row.get("max_tokens"), requested_input_tokens=row.get("input_tokens"),
        prefix_group=row.get("prefix_group"), session=row.get("session"),
        turn=row.get("turn"), answer=row.get("answer"))
