"""The text of a request, made when it is sent.

Synthetic and trace prompts are not stored (100,000 requests of 8K tokens would be GBs of
table): a prepared row holds its id, its lengths and its hash_ids, and `render_prompt` makes
its text, the same text from the same (seed, row) on every machine:

- a synthetic row: `[item <12 hex>]` (from seed and item id) and then words, `input_tokens`
  words in all; the tag comes first, so no two synthetic prompts share a first cache block
  by accident (a prefix-cache win taken for speed: trap T15 in docs/protocol.md);
- a trace row: one block per hash id, `[block <id in hex>]` and words chosen by (seed, id),
  512 words in all, so requests that share an id share that block's text and the prefix
  cache can serve it; the blocks stop at `input_tokens` words (the last may be cut short),
  and words left over after them are the row's own (`[item ...]`, as a synthetic row's);
- a row with a prefix group (shared_prefix): the group's prefix, `[group <12 hex>]` and
  words chosen by (seed, group), `tokens` words in all, then a blank line, then the row's
  text (a session's first turn only: later turns follow the conversation, which starts
  with it);
- a dataset row: its prompt (`render_messages`: its message list).

Words come from benchledger.prompts.FILLER_WORDS (about one token each): a fixed pool of
65,536 of them in a seeded order, and each text is a slice of it (wrapping around) at an
offset chosen by its seed and key: texts differ, and making one is a copy, not a loop over
words. Lengths count whitespace-separated words, a tag's own included; the server's usage
counts the real tokens.

The seed is the caller's: two windows (or workloads) that send the same items to one server
with the same seed send the same texts, which the prefix cache serves the second time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from benchledger.prompts import FILLER_WORDS

BLOCK_TOKENS = 512  # one Mooncake hash id
POOL_WORDS = 1 << 16
_picks = np.random.default_rng(20_261_201).integers(0, len(FILLER_WORDS), POOL_WORDS)
_POOL_LIST = [FILLER_WORDS[i] for i in _picks.tolist()]
_POOL = " ".join(_POOL_LIST) + " "
_STARTS = np.concatenate(([0], np.cumsum([len(w) + 1 for w in _POOL_LIST]))).tolist()
del _picks, _POOL_LIST


def _digest(seed: int, *key: object) -> bytes:
    text = "\x1f".join(str(part) for part in (seed, *key))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def words(start: int, count: int) -> str:
    """`count` words of the pool from word `start` on (wrapping around), space-separated."""
    if count <= 0:
        return ""
    start %= POOL_WORDS
    if start + count <= POOL_WORDS:
        return _POOL[_STARTS[start]:_STARTS[start + count] - 1]
    parts = [_POOL[_STARTS[start]:]]
    count -= POOL_WORDS - start
    whole, rest = divmod(count, POOL_WORDS)
    parts.extend([_POOL] * whole)
    parts.append(_POOL[:_STARTS[rest]])
    return "".join(parts)[:-1]


def _tagged(tag: str, digest: bytes, count: int) -> str:
    """The tag, then words from the offset the digest chooses: `count` words in all (the
    tag's own words counted)."""
    rest = count - tag.count(" ") - 1
    if rest <= 0:
        return tag
    return f"{tag} {words(int.from_bytes(digest[8:], 'little'), rest)}"


def item_text(seed: int, item_id: str, count: int) -> str:
    """A synthetic text of `count` words that starts with the item's own tag."""
    digest = _digest(seed, "item", item_id)
    return _tagged(f"[item {digest[:6].hex()}]", digest, count)


def block_text(seed: int, hash_id: int, count: int = BLOCK_TOKENS) -> str:
    """The text of one trace block (its first `count` words): the same for the same id."""
    return _tagged(f"[block {hash_id:x}]", _digest(seed, "block", hash_id), count)


def group_prefix(seed: int, group: int, tokens: int) -> str:
    """A shared_prefix group's prefix: `tokens` words, the same for every row of the group."""
    digest = _digest(seed, "group", group)
    return _tagged(f"[group {digest[:6].hex()}]", digest, tokens)


def trace_text(seed: int, item_id: str, hash_ids: list[int], input_tokens: int) -> str:
    parts, left = [], input_tokens
    for hash_id in hash_ids:
        if left <= 0:
            break
        parts.append(block_text(seed, hash_id, min(BLOCK_TOKENS, left)))
        left -= BLOCK_TOKENS
    if left > 0:
        parts.append(item_text(seed, item_id, left))
    return " ".join(parts)


def _prefix(row: Mapping[str, Any], seed: int | None, prefix_tokens: int | None) -> str | None:
    group = row.get("prefix_group")
    if group is None or row.get("turn"):  # no group, or a later turn of a session
        return None
    if seed is None or prefix_tokens is None:
        raise ValueError(f"item {row.get('item_id')!r} is in a shared_prefix group: its "
                         "text needs the seed and the prefix's tokens")
    return group_prefix(seed, group, prefix_tokens)


def render_prompt(row: Mapping[str, Any], seed: int, *,
                  prefix_tokens: int | None = None) -> str:
    """The user text of one prepared row (a dict of the table's columns): `seed` is the
    workload's (prepare_workload's), `prefix_tokens` its shared_prefix's tokens."""
    item_id = row["item_id"]
    if row.get("prompt") is not None:
        body = row["prompt"]
    elif row.get("hash_ids") is not None:
        body = trace_text(seed, item_id, row["hash_ids"], row["input_tokens"])
    elif row.get("input_tokens") is not None:
        body = item_text(seed, item_id, row["input_tokens"])
    elif row.get("messages") is not None:
        raise ValueError(f"item {item_id!r} is a list of messages: render_messages")
    else:
        raise ValueError(f"item {item_id!r} is a built-in item: its text is the prompt "
                         "set's")
    prefix = _prefix(row, seed, prefix_tokens)
    return body if prefix is None else f"{prefix}\n\n{body}"


def render_messages(row: Mapping[str, Any], seed: int | None = None, *,
                    prefix_tokens: int | None = None) -> list[dict[str, str]]:
    """The message list of a dataset row that has one (the group's prefix, if any, in front
    of the first message's content)."""
    if row.get("messages") is None:
        raise ValueError(f"item {row['item_id']!r} has no messages: render_prompt")
    messages: list[dict[str, str]] = json.loads(row["messages"])
    prefix = _prefix(row, seed, prefix_tokens)
    if prefix is not None:
        messages[0] = {**messages[0], "content": f"{prefix}\n\n{messages[0]['content']}"}
    return messages


def render_request(row: Mapping[str, Any], seed: int, *,
                   prefix_tokens: int | None = None) -> str | list[dict[str, str]]:
    """What one prepared row sends: its message list (a dataset row that has one), else
    its user text."""
    if row.get("messages") is not None:
        return render_messages(row, seed, prefix_tokens=prefix_tokens)
    return render_prompt(row, seed, prefix_tokens=prefix_tokens)
