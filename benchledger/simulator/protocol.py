"""OpenAI/vLLM wire format: request validation and response/stream-event bodies.

Event shapes follow vLLM's OpenAI server: chat chunks are dumped with exclude_unset (no
"usage" key on content chunks, "stop_reason" only on the finishing chunk), completion
chunks with every field ("usage": null on content chunks); the final usage event has
"choices": [] and no null fields. Usage always carries
"prompt_tokens_details": {"cached_tokens": N} (N may be 0).

A reasoning model (--reasoning-tokens) streams its thinking in chat events of its own,
`delta.reasoning_content` or `delta.reasoning` (--reasoning-field) and no "content" key, as
vLLM's reasoning parsers do; a step that crosses from reasoning into content sends two
events, the reasoning one first, in one write. A non-streamed chat answer carries it in
`message.<field>`. Usage then counts the reasoning in "completion_tokens" and says how much
of it was reasoning in "completion_tokens_details": {"reasoning_tokens": N}. Completions
(/v1/completions) have no reasoning.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from benchledger.simulator.options import SimConfig
from benchledger.simulator.tokenizer import tokenize

# Chat prompts count as the message contents joined by newlines plus a fixed template cost,
# standing in for a chat template's role markers: a BOS token, per message a two-token
# header before the content and a two-token trailer after it, and a two-token generation
# prompt at the end (see render_chat).
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_FIXED = 3
CHAT_BOS = "<|bos|>"
CHAT_START = "<|im_start|>"
CHAT_END = "<|im_end|>"
CHAT_NEWLINE = "<|nl|>"
DEFAULT_MAX_TOKENS = 16
DEFAULT_TEMPERATURE = 1.0
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
VOCAB_SIZE = 151_936  # token ids are a hash of the token's text into this range


class ApiError(Exception):
    """An error answered with OpenAI's error JSON."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": None,
                          "code": self.status}}


@dataclass(frozen=True)
class ParsedRequest:
    chat: bool
    prompt: str
    tokens: tuple[str, ...]  # the prompt as the model sees it (rendered chat template)
    max_tokens: int
    temperature: float
    stream: bool
    include_usage: bool
    ignore_eos: bool
    # Streamed/returned logprobs: None when not asked for, else the number of top
    # alternatives per token (chat: top_logprobs; completions: the logprobs integer).
    logprobs: int | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.tokens)


def parse_chat(body: Any, config: SimConfig) -> ParsedRequest:
    body = _common_checks(body, config)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list")
    contents = [_message_text(m) for m in messages]
    tokens = render_chat([m["role"] for m in messages], contents)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return _finish_parse(body, config, True, "\n".join(contents), tokens, max_tokens,
                         _chat_logprobs(body))


def _chat_logprobs(body: dict[str, Any]) -> int | None:
    """Chat: `logprobs` (a boolean) asks for them, `top_logprobs` for alternatives."""
    wanted = _bool_field(body, "logprobs")
    top = body.get("top_logprobs")
    if top is not None and not wanted:
        raise ApiError(400, "when using `top_logprobs`, `logprobs` must be set to true")
    return _logprobs_count(top if top is not None else 0, "top_logprobs") if wanted else None


def _logprobs_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOGPROBS:
        raise ApiError(400, f"'{name}' must be an integer between 0 and {MAX_LOGPROBS}")
    return value


def render_chat(roles: list[str], contents: list[str]) -> list[str]:
    """Tokens of the rendered chat prompt, which the prefix cache keys on.

    The content tokens are those of the newline-joined contents, so the count is
    count_tokens(joined) + CHAT_TOKENS_PER_MESSAGE * messages + CHAT_TOKENS_FIXED. Each
    token goes to the message its text ends in, with that message's template tokens around
    it. Only 3 template tokens precede the first message's content, so text at the start of
    the first message (a cold-prompt prefix) falls into the first cache block and changes
    every block hash.
    """
    starts, offset = [], 0
    for content in contents:
        starts.append(offset)
        offset += len(content) + 1  # the joining newline
    per_message: list[list[str]] = [[] for _ in contents]
    index, end = 0, 0
    for token in tokenize("\n".join(contents)):
        end += len(token)
        while index + 1 < len(starts) and starts[index + 1] < end:
            index += 1
        per_message[index].append(token)
    rendered = [CHAT_BOS]
    for role, tokens in zip(roles, per_message, strict=True):
        rendered += [CHAT_START, role, *tokens, CHAT_END, CHAT_NEWLINE]
    return [*rendered, CHAT_START, "assistant"]


def parse_completion(body: Any, config: SimConfig) -> ParsedRequest:
    body = _common_checks(body, config)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(400, "'prompt' must be a string (a single prompt)")
    # Completions: `logprobs` is an integer (alternatives per token), null for none.
    logprobs = body.get("logprobs")
    return _finish_parse(body, config, False, prompt, tokenize(prompt),
                         body.get("max_tokens"),
                         None if logprobs is None else _logprobs_count(logprobs, "logprobs"))


def _common_checks(body: Any, config: SimConfig) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != config.model:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    if body.get("n") not in (None, 1):
        raise ApiError(400, "only n=1 is supported")
    return body


def _message_text(message: Any) -> str:
    """Content of one chat message: a string, a list of text parts, or null."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ApiError(400, "each message must be an object with a string 'role'")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise ApiError(400, "message 'content' must be a string or a list of text parts")


def _finish_parse(body: dict[str, Any], config: SimConfig, chat: bool, prompt: str,
                  tokens: list[str], max_tokens: Any, logprobs: int | None) -> ParsedRequest:
    prompt_tokens = len(tokens)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ApiError(400, "'max_tokens' must be a positive integer")
    if prompt_tokens + max_tokens > config.max_model_len:
        raise ApiError(400, (
            f"'max_tokens' is too large: {max_tokens}. This model's maximum context length "
            f"is {config.max_model_len} tokens and your request has {prompt_tokens} input "
            f"tokens ({max_tokens} > {config.max_model_len} - {prompt_tokens})."))
    temperature = body.get("temperature")
    if temperature is None:
        temperature = DEFAULT_TEMPERATURE
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) \
            or temperature < 0:
        raise ApiError(400, "'temperature' must be a number >= 0")
    stream = _bool_field(body, "stream")
    ignore_eos = _bool_field(body, "ignore_eos")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object")
    include_usage = _bool_field(options or {}, "include_usage")
    return ParsedRequest(chat, prompt, tuple(tokens), max_tokens, float(temperature), stream,
                         include_usage, ignore_eos, logprobs)


def _bool_field(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be a boolean")
    return value


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
               reasoning_tokens: int | None = None) -> dict[str, Any]:
    """vLLM's usage object; cached_tokens are the prompt tokens the prefix cache served.
    `reasoning_tokens` (a reasoning request; None: not one): how many of the
    completion_tokens were reasoning, in completion_tokens_details."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens}}
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


class ResponseBuilder:
    """Builds the bodies of one response (one id and creation time for all its events)."""

    def __init__(self, chat: bool, model: str, logprobs: int | None = None,
                 reasoning_field: str = "reasoning_content",
                 request_id: str | None = None) -> None:
        self.chat = chat
        self.reasoning_field = reasoning_field  # where chat reasoning text goes
        self.model = model
        # like vLLM: the client's X-Request-Id (`request_id`) when it sent one
        self.id = ("chatcmpl-" if chat else "cmpl-") + (request_id or uuid.uuid4().hex)
        self.created = int(time.time())
        self.logprobs = logprobs  # None: not asked for (every "logprobs" is null)
        self._text_offset = 0  # completions: where the next token starts in the output

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": choices}

    def role_event(self) -> dict[str, Any]:
        """vLLM's first chat event: the assistant role with empty content."""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return self._envelope("chat.completion.chunk", [choice])

    def content_event(self, text: str, finish_reason: str | None,
                      pieces: tuple[str, ...] = ()) -> dict[str, Any]:
        """One step's output; `pieces` are its tokens (listed in logprobs when asked for)."""
        logprobs = self.logprobs_of(pieces)
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": text},
                                      "logprobs": logprobs, "finish_reason": finish_reason}
            if finish_reason is not None:
                choice["stop_reason"] = None
            return self._envelope("chat.completion.chunk", [choice])
        choice = {"index": 0, "text": text, "logprobs": logprobs,
                  "finish_reason": finish_reason, "stop_reason": None}
        return {**self._envelope("text_completion", [choice]), "usage": None}

    def reasoning_event(self, text: str, finish_reason: str | None,
                        pieces: tuple[str, ...] = ()) -> dict[str, Any]:
        """One step's reasoning (chat only): the text in `delta.<reasoning_field>`, no
        "content" key (vLLM's DeltaMessage dumped with exclude_unset); logprobs as for
        content."""
        choice: dict[str, Any] = {"index": 0, "delta": {self.reasoning_field: text},
                                  "logprobs": self.logprobs_of(pieces),
                                  "finish_reason": finish_reason}
        if finish_reason is not None:
            choice["stop_reason"] = None
        return self._envelope("chat.completion.chunk", [choice])

    def logprobs_of(self, pieces: tuple[str, ...]) -> dict[str, Any] | None:
        """The logprobs of these tokens, one entry per token, as vLLM writes them: chat
        `{"content": [{token, logprob, bytes, top_logprobs}]}`, completions `{"tokens",
        "token_logprobs", "top_logprobs", "text_offset"}`; None when not asked for."""
        if self.logprobs is None:
            return None
        if self.chat:
            return {"content": [_chat_logprob(piece, self.logprobs) for piece in pieces]}
        offsets = []
        for piece in pieces:
            offsets.append(self._text_offset)
            self._text_offset += len(piece)
        return {"text_offset": offsets, "token_logprobs": [pretend_logprob(p) for p in pieces],
                "tokens": list(pieces),
                "top_logprobs": [{p: pretend_logprob(p)} for p in pieces]}

    def usage_event(self, prompt_tokens: int, completion_tokens: int,
                    cached_tokens: int = 0, reasoning_tokens: int | None = None
                    ) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        usage = usage_body(prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens)
        return {**self._envelope(obj, []), "usage": usage}

    def full_response(self, text: str, finish_reason: str | None,
                      usage: dict[str, Any] | None, pieces: tuple[str, ...] = (),
                      reasoning: str | None = None) -> dict[str, Any]:
        """Non-streaming body; `usage` None (server without usage reporting) omits it.
        `reasoning` (chat, a reasoning request): the thinking that came before `text`, in
        `message.<reasoning_field>` (the content is then null when the answer is all
        reasoning); `pieces` are all the tokens, reasoning first."""
        logprobs = self.logprobs_of(pieces)
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reasoning is not None:
                message[self.reasoning_field] = reasoning
                message["content"] = text or None
            choice = {"index": 0, "message": message,
                      "logprobs": logprobs, "finish_reason": finish_reason,
                      "stop_reason": None}
            body = self._envelope("chat.completion", [choice])
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs,
                      "finish_reason": finish_reason, "stop_reason": None}
            body = self._envelope("text_completion", [choice])
        if usage is not None:
            body["usage"] = usage
        return body


def pretend_logprob(token: str) -> float:
    """A made-up but stable log probability of a token (nothing here samples by it)."""
    return -round((zlib.crc32(token.encode()) % 2000) / 1000, 3)


def token_id(token: str) -> int:
    """A made-up but stable id of a token's text (the simulator has no vocabulary file)."""
    return zlib.crc32(token.encode()) % VOCAB_SIZE


def _chat_logprob(token: str, top: int) -> dict[str, Any]:
    """OpenAI's ChatCompletionTokenLogprob; the alternatives are the token itself (the
    simulator knows no others), as many as asked for, at most one."""
    entry = {"token": token, "logprob": pretend_logprob(token),
             "bytes": list(token.encode())}
    return {**entry, "top_logprobs": [entry] if top else []}


# --- tokenizer endpoints ----------------------------------------------------------------


def tokenize_request(body: Any, config: SimConfig, extras: bool) -> list[str]:
    """The tokens a tokenize request asks for, as each server reads its body:

    - vLLM `POST /tokenize`: `{"prompt": text}` or `{"messages": [...]}` (the rendered chat
      prompt), `add_special_tokens` (default true) puts the BOS token in front;
    - llama.cpp's server `POST /tokenize`: `{"content": text}`, `add_special` (default false);
    - llama-cpp-python `POST /extras/tokenize` (`extras`): `{"input": text}`, always with BOS
      (its Llama.tokenize adds it).
    """
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    _common_checks({"model": body.get("model")}, config)
    if extras:
        return [CHAT_BOS, *tokenize(_text_field(body, "input"))]
    if "messages" in body:
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty list")
        contents = [_message_text(m) for m in messages]
        return render_chat([m["role"] for m in messages], contents)
    if "prompt" in body:  # vLLM
        bos = _bool_field(body, "add_special_tokens") if "add_special_tokens" in body else True
        return [CHAT_BOS] * bos + tokenize(_text_field(body, "prompt"))
    bos = _bool_field(body, "add_special")  # llama.cpp's server
    return [CHAT_BOS] * bos + tokenize(_text_field(body, "content"))


def _text_field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise ApiError(400, f"'{name}' must be a string")
    return value


def tokenize_response(tokens: list[str], config: SimConfig, extras: bool) -> dict[str, Any]:
    """vLLM's answer (`count`, `max_model_len`, `tokens`, `token_strs`), or llama-cpp-python's
    (`tokens` only) for /extras/tokenize."""
    ids = [token_id(token) for token in tokens]
    if extras:
        return {"tokens": ids}
    return {"count": len(ids), "max_model_len": config.max_model_len, "tokens": ids,
            "token_strs": None}


def sse(event: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <compact json>\\n\\n`` (or a literal like [DONE])."""
    data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"),
                                                           ensure_ascii=False)
    return f"data: {data}\n\n".encode()
