"""What one server-sent event said: `parse_event`, a pure function that never raises.

Nothing a server sends can lose a window. An event of an unexpected shape (not UTF-8, not
JSON, not an object, `choices` that are not objects, ...) fails only its own request, with
an error naming the event and what was wrong.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from benchledger.client.endpoint import CHAT, Endpoint, ReadCounted
from benchledger.client.text import show


class Event(NamedTuple):
    """What one SSE event said, read without trusting its shape."""

    done: bool = False  # the [DONE] sentinel
    content: int = 0  # choices carrying output text: chunks, never tokens (trap T1)
    # choices carrying a reasoning model's thinking (chat delta.reasoning_content or
    # delta.reasoning): never output content, so never a TTFT or a content event
    reasoning: int = 0
    finish_reason: str | None = None
    usage: object = None  # the usage value as sent (read_usage judges it); None: none sent
    problem: str | None = None  # why this event fails its request (server error, bad shape)
    # Read only when the arm's token count asks (parse_event's `counted`): the tokens the
    # event's logprobs list (None: it carried no logprobs), and its output text (a reasoning
    # model's reasoning text included: usage counts those tokens too).
    tokens: int | None = None
    text: str | None = None
    # The event's answer text and reasoning text as sent (every event: the record digests
    # what came back, and keeps it where the sweep asks; None: none)
    answer: str | None = None
    thought: str | None = None


DONE = Event(done=True)


def parse_event(data: bytes, endpoint: Endpoint = CHAT,
                counted: ReadCounted | None = None) -> Event:
    """Read one SSE event's data, as `endpoint` shapes it. Total: any bytes give an Event,
    never an exception; an event that cannot be trusted has `problem` set, which fails
    (only) its request. `counted`: what the arm's token count reads of the event's choices
    too (the endpoint's logprob_tokens or streamed_text; None, the usage's path: nothing)."""
    if len(data) < 16 and data.strip() == b"[DONE]":
        return DONE
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Event(problem=f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})")
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return Event(problem=f"not JSON ({type(exc).__name__}: {str(exc)[:200]}): "
                             f"{show(text, 120)}")
    if not isinstance(payload, dict):
        return Event(problem=f"not a JSON object: {show(payload)}")
    if payload.get("error"):
        return Event(problem=f"error event: {show(payload['error'], 500)}")
    choices = payload.get("choices")
    content, reasoning, finish, problem, answer, thought = endpoint.read_choices(choices)
    if problem:
        return Event(problem=problem)
    usage = payload.get("usage")
    if usage == {}:  # an empty usage object reports nothing; it must not hide an earlier one
        usage = None
    if counted is None or not isinstance(choices, list):  # positional: cheaper
        return Event(False, content, reasoning, finish, usage, None, None, None, answer, thought)
    tokens, output, problem = counted(choices)
    if problem:
        return Event(problem=problem)
    return Event(False, content, reasoning, finish, usage, None, tokens, output, answer, thought)
