"""Reading the usage a server reported for a request.

Usage is read by `read_usage` when the row is built: integer counts are recorded exactly as
reported (a gate rule, not the client, judges negative or absurd counts); a count that is not
an integer in int64 range is NULL and the row's error names the field and its raw value.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from benchledger.client.text import show

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Usage(NamedTuple):
    prompt_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    token_source: str  # usage | missing (docs/protocol.md)
    notes: tuple[str, ...]  # what could not be used, naming the field and the raw value
    # usage.completion_tokens_details.reasoning_tokens: the reasoning model's thinking among
    # the completion_tokens (which include it); None when not reported
    reasoning_tokens: int | None = None


def _count(container: dict[str, Any], key: str, where: str, notes: list[str]) -> int | None:
    """A token count as reported, or None (with a note) when it is not an int64 integer.
    Negative or absurd integers are recorded as they are: a gate rule blocks them."""
    if key not in container:
        return None
    value = container[key]
    if type(value) is not int:  # bool is an int subclass, and `true` is not a count
        notes.append(f"{where}.{key} is not an integer: {show(value)}")
        return None
    if not INT64_MIN <= value <= INT64_MAX:
        notes.append(f"{where}.{key} does not fit in int64: {show(value)}")
        return None
    return value


def read_usage(usage: object) -> Usage:
    """The row's token counts from the usage a request's stream reported (None: none)."""
    if usage is None:
        return Usage(None, None, None, "missing", ())
    if not isinstance(usage, dict):
        return Usage(None, None, None, "missing", (f"usage is not an object: {show(usage)}",))
    notes: list[str] = []
    output = _count(usage, "completion_tokens", "usage", notes)
    if "completion_tokens" not in usage:
        notes.append("usage has no completion_tokens")
    prompt = _count(usage, "prompt_tokens", "usage", notes)
    if "prompt_tokens" not in usage:
        notes.append("usage has no prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = None
    if isinstance(details, dict):
        cached = _count(details, "cached_tokens", "usage.prompt_tokens_details", notes)
    elif details is not None:
        notes.append(f"usage.prompt_tokens_details is not an object: {show(details)}")
    completion_details = usage.get("completion_tokens_details")
    reasoning = None
    if isinstance(completion_details, dict):
        reasoning = _count(completion_details, "reasoning_tokens",
                           "usage.completion_tokens_details", notes)
    elif completion_details is not None:
        notes.append("usage.completion_tokens_details is not an object: "
                     f"{show(completion_details)}")
    return Usage(prompt, output, cached, "usage" if output is not None else "missing",
                 tuple(notes), reasoning)
