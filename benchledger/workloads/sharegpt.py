"""ShareGPT files: one JSON array of conversations.

    [{"id": "abc", "conversations": [{"from": "human", "value": "..."},
                                     {"from": "gpt", "value": "..."}, ...]}, ...]

A turn may also say `role`/`content` instead of `from`/`value`; `from` is `human` (or
`user`), `gpt` (or `assistant`) or `system`. The file is read with Python's json module, not
pyarrow: it is one JSON document, not lines, and its conversations are nested lists. The
array's objects are decoded one at a time (JSONDecoder.raw_decode) so that an error names
the line its object starts on. Each conversation becomes one dataset row: its first human
turn the prompt, the first gpt turn after it (before the next human turn) the answer, and the
whole conversation, roles as the chat API spells them, the row's `messages` (read for
multi-turn sessions; a single-turn request sends the prompt alone, so system turns are not
sent).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchledger.workloads.errors import WorkloadError, at
from benchledger.workloads.jsonio import (
    DECODER,
    MESSAGES_TYPE,
    Bad,
    is_blank,
    kind,
    unicode_ok,
)

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
         "system": "system"}
_WS = re.compile(r"[ \t\n\r]*")


def _objects(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """(line, object) of each element of the top-level array."""
    line, seen = 1, 0

    def line_of(pos: int) -> int:
        nonlocal line, seen
        line += text.count("\n", seen, pos)
        seen = pos
        return line

    i = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if i == len(text):
        raise at(path, None, "empty dataset: no requests")
    if text[i] != "[":
        raise at(path, line_of(i), "not a ShareGPT file: the top level is not a JSON array "
                                   "(a .json dataset is ShareGPT; JSON Lines files end in "
                                   ".jsonl)")
    i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    if i < len(text) and text[i] == "]":
        raise at(path, line_of(i), "empty dataset: the array has no conversations")
    while True:
        start = line_of(i)
        try:
            obj, end = DECODER.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise at(path, e.lineno, f"bad JSON: {e.msg} (column {e.colno})") from None
        except Bad as e:
            raise at(path, start, str(e)) from None
        yield start, obj
        i = _WS.match(text, end).end()  # type: ignore[union-attr]
        if i < len(text) and text[i] == ",":
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            continue
        if i < len(text) and text[i] == "]":
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            if i != len(text):
                raise at(path, line_of(i), "bad JSON: extra data after the array")
            return
        raise at(path, line_of(min(i, len(text))), "bad JSON: expected ',' or ']' after "
                                                   "an element of the array")


def _conversation(obj: Any) -> list[dict[str, str]]:
    if not isinstance(obj, dict):
        raise Bad(f"not a JSON object but {kind(obj)}")
    turns = obj.get("conversations")
    if turns is None:
        raise Bad("no `conversations`")
    if not isinstance(turns, list):
        raise Bad(f"`conversations` is not a list but {kind(turns)}")
    out = []
    for j, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise Bad(f"`conversations[{j}]` is not an object but {kind(turn)}")
        key = "from" if "from" in turn else "role"
        speaker = turn.get(key)
        if not isinstance(speaker, str) or speaker not in ROLES:
            raise Bad(f"`conversations[{j}].{key}` is {kind(speaker)}"
                      + (f" {speaker!r}" if isinstance(speaker, str) else "")
                      + ": expected human, gpt or system")
        vkey = "value" if "value" in turn else "content"
        value = turn.get(vkey)
        if not isinstance(value, str):
            raise Bad(f"`conversations[{j}].{vkey}` is not a string but {kind(value)}")
        if not unicode_ok(value):
            raise Bad(f"`conversations[{j}].{vkey}` is not valid Unicode (a lone surrogate)")
        out.append({"role": ROLES[speaker], "content": value})
    return out


def row_id(obj: dict[str, Any], default: str) -> str:
    """A row's id: its `id` (a string or an integer), else `default`."""
    value = obj.get("id")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Bad(f"`id` must be a string or an integer, not {kind(value)}")
    if isinstance(value, str) and (not value or not unicode_ok(value)):
        raise Bad("`id` is empty" if not value else "`id` is not valid Unicode")
    return str(value)


def read_sharegpt(path: Path, data: bytes, id_prefix: str) -> dict[str, pa.Array]:
    """The file's columns: id, prompt, answer, messages, line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise at(path, data.count(b"\n", 0, e.start) + 1,
                 f"not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start}") from None
    ids: list[str] = []
    prompts: list[str] = []
    answers: list[str | None] = []
    conversations: list[list[dict[str, str]]] = []
    lines: list[int] = []
    first_line: dict[str, int] = {}
    for line, obj in _objects(path, text):
        try:
            turns = _conversation(obj)
            item = row_id(obj, f"{id_prefix}:{line}")
            users = [k for k, t in enumerate(turns) if t["role"] == "user"]
            if not users:
                raise Bad("no human turn")
            first = users[0]
            if is_blank(turns[first]["content"]):
                raise Bad("empty prompt (the first human turn)")
            if item in first_line:
                raise Bad(f"duplicate id {item!r} (first on line {first_line[item]})")
        except Bad as e:
            raise at(path, line, str(e)) from None
        first_line[item] = line
        answer = None
        for t in turns[first + 1:]:
            if t["role"] == "user":
                break
            if t["role"] == "assistant":
                answer = t["content"]
                break
        ids.append(item)
        prompts.append(turns[first]["content"])
        answers.append(answer)
        conversations.append(turns)
        lines.append(line)
    if not ids:  # pragma: no cover - _objects refuses an empty array
        raise WorkloadError(f"{path}: empty dataset: no requests")
    return {"id": pa.array(ids, pa.string()), "prompt": pa.array(prompts, pa.string()),
            "answer": pa.array(answers, pa.string()),
            "messages": pa.array(conversations, MESSAGES_TYPE),
            "line": pa.array(lines, pa.int64())}
