"""What is measured (Target), and where its output token counts come from: the arm's
`token_count`, one strategy (TokenCounter) per kind, registered by name.

Output tokens are never chunks (docs/protocol.md, trap T1); they come from where the arm's
`token_count` says, each named in the row's token_source: the usage the server reports for
that request (`usage`), the tokens listed in its streamed logprobs, counted per event
(`logprobs`), or the received text counted by the server's own tokenizer endpoint after the
window, calibrated against non-streamed usage (`server_tokenizer`). A request whose count
cannot be had is recorded with token_source = 'missing' instead of being guessed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import httpx

from benchledger.client.endpoint import ENDPOINTS, Endpoint, EndpointName, ReadCounted
from benchledger.client.record import RequestRecord, WindowSpec
from benchledger.client.registry import Registry, Variant
from benchledger.client.tally import Tally

# The sweep's TokenCountName (benchledger.sweep.spec), spelled again for the reason EndpointName
# is (benchledger.client.endpoint).
TokenCountName = Literal["usage", "logprobs", "server_tokenizer"]


class WindowCount:
    """The part of a window's count made after its requests, once per part (the warm-up,
    then the measured requests). This one does nothing: a count read from usage or from
    the events is complete when its request ends."""

    async def count(self, records: list[RequestRecord]) -> None:
        """Count what the part's requests left to be counted."""
        return None

    async def accounting(self) -> dict[str, Any]:
        """What the window's accounting records of the counting, after its token_count."""
        return {}


class TokenCounter(Variant, ABC):
    """One kind of token count: what it asks the server for, reads of each event, keeps
    per request and counts after the window."""

    name: ClassVar[TokenCountName]
    # Whether a request's count is known when its stream ends (usage, logprobs), so that one
    # request can show whether the server gives it (benchledger.client.probe); a count made
    # after the window (the server's tokenizer) needs the window.
    counted_by_the_stream: ClassVar[bool] = True

    def request_fields(self, endpoint: Endpoint) -> dict[str, Any]:
        """What a request asks for besides the usage of a streamed request (always)."""
        return {}

    def event_reader(self, endpoint: Endpoint) -> ReadCounted | None:
        """What parse_event reads of each event's choices for this count (None: nothing)."""
        return None

    @abstractmethod
    def new_tally(self) -> Tally:
        """What one request keeps of its events for this count."""

    @abstractmethod
    def nothing_counted(self, completed: list[RequestRecord]) -> str:
        """Why this count gets no count from the server, when not one of the `completed`
        warm-up requests got one: the window stops with this text (TokenCountUnavailable)."""

    async def window_count(self, http: httpx.AsyncClient, target: Target,
                           spec: WindowSpec) -> WindowCount:
        """The window's count after its parts, made when the warm-up has run."""
        return WindowCount()


TOKEN_COUNTS: Registry[TokenCounter] = Registry("token count")


class ArmKeys(Protocol):
    """The keys of a sweep's arm a Target takes (benchledger.sweep.arms.ArmBase has them):
    said as a protocol, since the client imports nothing that reaches the simulator."""

    @property
    def model(self) -> str: ...
    @property
    def token_count(self) -> TokenCountName: ...
    @property
    def tokenize_path(self) -> str: ...
    @property
    def request_id_header(self) -> bool: ...


@dataclass(frozen=True, init=False)
class Target:
    """Where and what to measure. The arm's endpoint and token_count are given by name (the
    sweep's typed values) and chosen here, once: `endpoint` and `token_count` are then the
    strategies they name, and nothing downstream compares names."""

    base_url: str
    model: str
    endpoint: Endpoint  # chat -> /v1/chat/completions, completions -> /v1/completions
    # Sent as `Authorization: Bearer <api_key>`; kept out of repr, rows, errors and logs.
    api_key: str | None = field(repr=False)
    token_count: TokenCounter  # usage | logprobs | server_tokenizer (the arm's key)
    tokenize_path: str  # server_tokenizer: the tokenizer endpoint
    # Whether each request carries its request_id as X-Request-Id (the arm's
    # request_id_header; llama-cpp-python's server refuses any value that is not a UUID).
    request_id_header: bool

    def __init__(self, base_url: str, model: str, endpoint: EndpointName = "chat",
                 api_key: str | None = None, token_count: TokenCountName = "usage",
                 tokenize_path: str = "/tokenize", request_id_header: bool = True) -> None:
        chosen = {"base_url": base_url, "model": model, "endpoint": ENDPOINTS[endpoint],
                  "api_key": api_key, "token_count": TOKEN_COUNTS[token_count],
                  "tokenize_path": tokenize_path, "request_id_header": request_id_header}
        for name, value in chosen.items():
            object.__setattr__(self, name, value)  # frozen: dataclasses set fields this way

    @classmethod
    def for_arm(cls, arm: ArmKeys, base_url: str, endpoint: EndpointName,
                api_key: str | None) -> Target:
        """What the arm measures at `base_url` (its server's, which a server benchledger
        starts has only once started), with the arm's own keys for the rest."""
        return cls(base_url=base_url, model=arm.model, endpoint=endpoint, api_key=api_key,
                   token_count=arm.token_count, tokenize_path=arm.tokenize_path,
                   request_id_header=arm.request_id_header)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def without_request_id_header(self) -> Target:
        """The same target, its requests sent without X-Request-Id."""
        return Target(self.base_url, self.model, self.endpoint.name, self.api_key,
                      self.token_count.name, self.tokenize_path, request_id_header=False)
