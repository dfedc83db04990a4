"""Multi-turn sessions from a dataset's conversations, a whole column at a time.

A conversation is a row's message list: a ShareGPT object's `conversations`, or a JSON Lines
row's `messages` (a `prompt` row is one user turn, so never a session). Its user messages in
order are a session's turns (the first `turns` of them); the dataset's answer of a turn is
the first assistant message after it, before the next user message. System messages are not
sent as turns. A conversation with fewer user turns than the workload's `turns` is not used;
with `history = "dataset"` neither is one whose first `turns - 1` turns lack an answer (the
client replays those answers as the conversation so far).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.workloads.datasets import Dataset


@dataclass(frozen=True)
class Turns:
    """Every user message of a dataset, in order, with where its answer is."""

    conversation: np.ndarray  # the dataset row of each user message
    first: np.ndarray  # per dataset row: the index (into these arrays) of its first turn
    count: np.ndarray  # per dataset row: its user messages
    content: pa.Array  # the text of every message (user or not) of every conversation
    position: np.ndarray  # each user message's index into `content`
    answer: np.ndarray  # each user message's answer's index into `content`, or -1


def user_turns(dataset: Dataset) -> Turns:
    lists = dataset.table["messages"].combine_chunks()
    flat = lists.flatten()
    rows = dataset.rows
    parent = np.asarray(pc.list_parent_indices(lists), dtype=np.int64)
    role = pc.struct_field(flat, "role")
    is_user = np.asarray(pc.fill_null(pc.equal(role, "user"), False))
    is_answer = np.asarray(pc.fill_null(pc.equal(role, "assistant"), False))
    position = np.flatnonzero(is_user)
    conversation = parent[position]
    count = np.bincount(conversation, minlength=rows)
    first = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    # Each assistant message belongs to the latest user message before it, if that one is
    # of the same conversation; a user message's answer is the first that belongs to it.
    latest = np.cumsum(is_user) - 1
    replies = np.flatnonzero(is_answer)
    owner = latest[replies]
    keep = owner >= 0
    keep[keep] = conversation[owner[keep]] == parent[replies[keep]]
    owner, replies = owner[keep], replies[keep]
    answer = np.full(len(position), -1, dtype=np.int64)
    owners, at_first = np.unique(owner, return_index=True)
    answer[owners] = replies[at_first]
    return Turns(conversation, first, count, pc.struct_field(flat, "content"), position,
                 answer)


def eligible(turns: Turns, per_session: int, need_answers: bool) -> np.ndarray:
    """The dataset rows that can be a session of `per_session` turns."""
    ok = turns.count >= per_session
    if need_answers and per_session > 1:
        rank = np.arange(len(turns.position)) - turns.first[turns.conversation]
        answered = (rank < per_session - 1) & (turns.answer >= 0)
        ok &= np.bincount(turns.conversation[answered],
                          minlength=len(turns.count)) >= per_session - 1
    return np.flatnonzero(ok)


def session_columns(turns: Turns, chosen: np.ndarray, per_session: int) -> dict[str, pa.Array]:
    """prompt and answer of each turn of each chosen conversation, session by session."""
    index = (turns.first[chosen][:, None] + np.arange(per_session)[None, :]).ravel()
    answer_at = turns.answer[index]
    answer = turns.content.take(pa.array(np.maximum(answer_at, 0)))
    answer = pc.if_else(pa.array(answer_at >= 0), answer, pa.scalar(None, pa.string()))
    return {"prompt": turns.content.take(pa.array(turns.position[index])), "answer": answer}
