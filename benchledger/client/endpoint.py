"""The endpoints a target is measured on, one strategy each: where a request goes, how it
carries the prompt and asks for logprobs, and where the server's events and answers carry
text and logprobs. The arm's `endpoint` picks one, once (Target); nothing else asks which."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from benchledger.client.registry import Registry, Variant
from benchledger.client.text import safe_text, show

# The sweep's EndpointName (benchledger.sweep.spec), spelled again: the client may not import the
# sweep module, which imports the simulator's options, and the client and the simulator share
# no code, not even through a third module (.importlinter). tests/unit/client/test_client.py checks
# that both name the same endpoints, and mypy that the sweep's value fits Target.
EndpointName = Literal["chat", "completions"]

# What a token count reads of an event's choices besides their text and finish reason:
# (tokens listed in their logprobs, their output text, why the event fails its request).
Counted = tuple[int | None, str | None, str | None]
ReadCounted = Callable[[list[Any]], Counted]
# What every event's choices say (Endpoint.read_choices): content-bearing and
# reasoning-bearing choices, the finish_reason, why the event fails its request, and the
# answer and reasoning texts as sent.
Choices = tuple[int, int, str | None, str | None, str | None, str | None]


# Where reasoning models stream their thinking in a chat delta (and put it in an answer's
# message), apart from the output content: `reasoning_content` (older vLLM, SGLang,
# DeepSeek's API) and `reasoning` (newer vLLM). Completions carry no reasoning.
REASONING_FIELDS = ("reasoning_content", "reasoning")


class MalformedChoice(Exception):
    """What holds a choice's text has the wrong shape: the event fails its request."""


def _reasoning_of(holder: dict[str, Any], where: str) -> str | None:
    """The reasoning text a delta (or message) carries: the first non-empty of
    REASONING_FIELDS (a server that sends both sends the same text twice), None when none
    does; MalformedChoice when one is neither a string nor null."""
    found = None
    for key in REASONING_FIELDS:
        value = holder.get(key)
        if value is None:
            continue
        if type(value) is not str:
            raise MalformedChoice(f"{where}.{key} is not a string: {show(value)}")
        if value and found is None:
            found = value
    return found


class Endpoint(Variant, ABC):
    """An OpenAI-compatible completion endpoint (vLLM, SGLang, llama.cpp's server, the
    built-in simulator: one code path for all)."""

    name: ClassVar[EndpointName]
    path: ClassVar[str]
    text_field: ClassVar[str]  # where a streamed choice carries its text, as errors name it
    logprobs_key: ClassVar[str]  # the list in a choice's logprobs with one entry per token

    @abstractmethod
    def prompt_fields(self, text: str) -> dict[str, Any]:
        """The request body's fields that carry the prompt."""

    @abstractmethod
    def logprobs_fields(self) -> dict[str, Any]:
        """The request body's fields that ask for the logprobs of every token."""

    @abstractmethod
    def choice_text(self, choice: dict[str, Any], index: int) -> object:
        """A streamed choice's text as sent (None: none), or MalformedChoice."""

    @abstractmethod
    def _answer_choice_text(self, choice: dict[str, Any]) -> object:
        """The text of a non-streamed answer's choice, as sent."""

    def choice_parts(self, choice: dict[str, Any], index: int) -> tuple[object, str | None]:
        """(a streamed choice's text as sent, its reasoning text or None), or
        MalformedChoice. Only chat carries reasoning."""
        return self.choice_text(choice, index), None

    def read_choices(self, choices: object) -> Choices:
        """(content-bearing choices, reasoning-bearing choices, finish_reason, problem,
        answer text, reasoning text) of an event's `choices`; the texts as sent, joined over
        the choices in order (None: none). A choice whose reasoning field holds text bears
        reasoning, not content (its content, if it also holds some, still counts as
        content)."""
        if choices is None:
            return 0, 0, None, None, None, None
        if not isinstance(choices, list):
            return 0, 0, None, f"choices is not a list: {show(choices)}", None, None
        content, reasoning, finish = 0, 0, None
        answer: str | None = None
        thinking: str | None = None
        parts_of = self.choice_parts
        for index, choice in enumerate(choices):
            if not isinstance(choice, dict):
                return _bad(f"choices[{index}] is not an object: {show(choice)}")
            try:
                text, thought = parts_of(choice, index)
            except MalformedChoice as exc:
                return _bad(str(exc))
            if text is not None and not isinstance(text, str):
                return _bad(f"choices[{index}].{self.text_field} is not a string: "
                            f"{show(text)}")
            if text:
                content += 1
                answer = text if answer is None else answer + text
            if thought:
                reasoning += 1
                thinking = thought if thinking is None else thinking + thought
            reason = choice.get("finish_reason")
            if reason is not None and not isinstance(reason, str):
                return _bad(f"choices[{index}].finish_reason is not a string: {show(reason)}")
            if reason:
                finish = safe_text(reason)
        return content, reasoning, finish, None, answer, thinking

    def logprob_tokens(self, choices: list[Any]) -> Counted:
        """(tokens in logprobs, None, problem) of choices read_choices accepted: what
        token_count = "logprobs" reads of an event."""
        total = None
        for index, choice in enumerate(choices):
            tokens, problem = self._logprobs_listed(choice, index)
            if problem:
                return None, None, problem
            if tokens is not None:
                total = (total or 0) + tokens
        return total, None, None

    def _logprobs_listed(self, choice: dict[str, Any], index: int
                         ) -> tuple[int | None, str | None]:
        """(tokens listed, problem) of one choice's logprobs: chat `logprobs.content`
        (OpenAI's list of {token, logprob, bytes, top_logprobs}), completions
        `logprobs.tokens`; one entry per token. None: the choice carried no logprobs."""
        logprobs = choice.get("logprobs")
        if logprobs is None:
            return None, None
        if not isinstance(logprobs, dict):
            return None, f"choices[{index}].logprobs is not an object: {show(logprobs)}"
        entries = logprobs.get(self.logprobs_key)
        if entries is None:
            return None, None
        if not isinstance(entries, list):
            return None, (f"choices[{index}].logprobs.{self.logprobs_key} is not a list: "
                          f"{show(entries)}")
        return len(entries), None

    def streamed_text(self, choices: list[Any]) -> Counted:
        """(None, generated text, None) of choices read_choices accepted: what
        token_count = "server_tokenizer" reads of an event. A reasoning model's reasoning
        text is part of it (before the choice's content): usage's completion_tokens counts
        the reasoning tokens too, and the count must be of the same tokens."""
        parts: list[str] = []
        for index, choice in enumerate(choices):
            text, thought = self.choice_parts(choice, index)
            if thought:
                parts.append(thought)
            if isinstance(text, str):
                parts.append(text)
        text = "".join(parts)
        return None, safe_text(text) if text else None, None

    def answer_text(self, payload: dict[str, Any]) -> str | None:
        """The text of a non-streamed answer's first choice, reasoning included (first),
        as streamed_text reads a stream."""
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None
        text = self._answer_choice_text(choices[0])
        thought = self._answer_choice_reasoning(choices[0])
        if thought is None:
            return text if isinstance(text, str) else None
        return thought + (text if isinstance(text, str) else "")

    def _answer_choice_reasoning(self, choice: dict[str, Any]) -> str | None:
        """The reasoning text of a non-streamed answer's choice (None: none, or not text)."""
        return None


def _bad(problem: str) -> Choices:
    return 0, 0, None, problem, None, None


ENDPOINTS: Registry[Endpoint] = Registry("endpoint")


@ENDPOINTS.register
class ChatEndpoint(Endpoint):
    """/v1/chat/completions: messages in, `delta.content` out."""

    name = "chat"
    path = "/v1/chat/completions"
    text_field = "delta.content"
    logprobs_key = "content"

    def prompt_fields(self, text: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": text}]}

    def logprobs_fields(self) -> dict[str, Any]:
        # A boolean, and no top alternatives asked for by name: llama-cpp-python's server
        # streams no chat logprobs at all unless top_logprobs is given (0 is valid in
        # OpenAI's API, vLLM and SGLang).
        return {"logprobs": True, "top_logprobs": 0}

    def choice_text(self, choice: dict[str, Any], index: int) -> object:
        delta = choice.get("delta")
        if type(delta) is dict:  # (this runs for every event of every stream)
            return delta.get("content")
        if delta is None:
            return None
        raise MalformedChoice(f"choices[{index}].delta is not an object: {show(delta)}")

    def choice_parts(self, choice: dict[str, Any], index: int) -> tuple[object, str | None]:
        delta = choice.get("delta")
        if type(delta) is dict:  # (this runs for every event of every stream)
            if "reasoning_content" in delta or "reasoning" in delta:
                return delta.get("content"), _reasoning_of(delta, f"choices[{index}].delta")
            return delta.get("content"), None
        if delta is None:
            return None, None
        raise MalformedChoice(f"choices[{index}].delta is not an object: {show(delta)}")

    def _answer_choice_text(self, choice: dict[str, Any]) -> object:
        message = choice.get("message")
        return message.get("content") if isinstance(message, dict) else None

    def _answer_choice_reasoning(self, choice: dict[str, Any]) -> str | None:
        message = choice.get("message")
        if not isinstance(message, dict):
            return None
        try:
            return _reasoning_of(message, "message")
        except MalformedChoice:
            return None  # an answer's text is read leniently (calibration compares it)


@ENDPOINTS.register
class CompletionsEndpoint(Endpoint):
    """/v1/completions: a prompt in, `text` out."""

    name = "completions"
    path = "/v1/completions"
    text_field = "text"
    logprobs_key = "tokens"

    def prompt_fields(self, text: str) -> dict[str, Any]:
        return {"prompt": text}

    def logprobs_fields(self) -> dict[str, Any]:
        return {"logprobs": 1}  # the alternatives per token

    def choice_text(self, choice: dict[str, Any], index: int) -> object:
        return choice.get("text")

    def _answer_choice_text(self, choice: dict[str, Any]) -> object:
        return choice.get("text")


CHAT = ENDPOINTS["chat"]
COMPLETIONS = ENDPOINTS["completions"]
