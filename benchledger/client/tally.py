"""What one request's token count keeps while its stream arrives, and the count it gives the
request's row. Each token count (benchledger.client.target) makes its kind of tally for every
request; a row never looks at chunks, characters or max_tokens to count tokens (trap T1)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from benchledger.client.events import Event
from benchledger.client.usage import Usage

# (output_tokens, token_source, notes): the count the arm's token_count names, or None with
# token_source 'missing' and why.
Count = tuple[int | None, str, tuple[str, ...]]


class Tally(ABC):
    """One request's count as its events arrive."""

    __slots__ = ()

    @abstractmethod
    def add(self, event: Event) -> None:
        """Keep what the token count read of one event."""

    @abstractmethod
    def counted(self, usage: Usage, chunks: int) -> Count:
        """The row's output tokens, given the request's usage and its text-bearing events."""

    def per_event_tokens(self, events: int) -> list[int] | None:
        """Tokens of each of the `events` text-bearing events, where the count knows them."""
        return None


class UsageTally(Tally):
    """token_count = "usage": the count is the usage the server reported, nothing to keep."""

    __slots__ = ()

    def add(self, event: Event) -> None:
        return None

    def counted(self, usage: Usage, chunks: int) -> Count:
        return usage.output_tokens, usage.token_source, ()


@dataclass(slots=True)
class LogprobTally(Tally):
    """token_count = "logprobs": the tokens listed per content-bearing event (parallel to
    content_event_ns), their sum, tokens listed by events without text (credited to the
    next text-bearing event) and text-bearing events that listed none."""

    event_tokens: list[int] = field(default_factory=list)
    logprob_tokens: int = 0
    pending_tokens: int = 0
    unlogged_events: int = 0

    def add(self, event: Event) -> None:
        if event.tokens is None:
            self.unlogged_events += event.content > 0
            return
        self.logprob_tokens += event.tokens
        if not event.content:
            self.pending_tokens += event.tokens
            return
        self.event_tokens.append(event.tokens + self.pending_tokens)
        self.event_tokens.extend([0] * (event.content - 1))  # n > 1 choices: on the first
        self.pending_tokens = 0

    def counted(self, usage: Usage, chunks: int) -> Count:
        if self.unlogged_events:
            return None, "missing", (f"{self.unlogged_events} of {chunks} "
                                     "text-bearing events listed no logprobs",)
        return self.logprob_tokens, "logprobs", ()

    def per_event_tokens(self, events: int) -> list[int] | None:
        """Where the logprobs gave all of them."""
        if self.unlogged_events or len(self.event_tokens) != events:
            return None
        tokens = list(self.event_tokens)
        if tokens and self.pending_tokens:  # listed after the last text: that event's
            tokens[-1] += self.pending_tokens
        return tokens


@dataclass(slots=True)
class TextTally(Tally):
    """token_count = "server_tokenizer": the received text (until counted), and the count
    the server's tokenizer gave it after the window (or why it gave none)."""

    text_parts: list[str] = field(default_factory=list)
    tokenizer_tokens: int | None = None
    tokenizer_error: str | None = None

    def add(self, event: Event) -> None:
        if event.text:
            self.text_parts.append(event.text)

    def counted(self, usage: Usage, chunks: int) -> Count:
        if self.tokenizer_tokens is None:
            return None, "missing", (f"not counted by the server's tokenizer: "
                                     f"{self.tokenizer_error or 'no count'}",)
        return self.tokenizer_tokens, "server_tokenizer", ()
