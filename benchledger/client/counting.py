"""The token counts read while the streams arrive: the server's usage, and the tokens its
streamed logprobs list. (The count by the server's tokenizer, made after the window, is in
benchledger.client.tokenizer.)"""

from __future__ import annotations

from typing import Any

from benchledger.client.endpoint import Endpoint, ReadCounted
from benchledger.client.record import RequestRecord
from benchledger.client.tally import LogprobTally, Tally, UsageTally
from benchledger.client.target import TOKEN_COUNTS, TokenCounter
from benchledger.rules import TOKEN_SOURCE_IS_USAGE


@TOKEN_COUNTS.register
class UsageCounter(TokenCounter):
    """The usage the server reports for each request (stream_options.include_usage)."""

    name = "usage"

    def new_tally(self) -> Tally:
        return UsageTally()

    def nothing_counted(self, completed: list[RequestRecord]) -> str:
        n = len(completed)
        return (f"the server reported no usage for any of the {n} completed warm-up "
                "requests (it ignores stream_options.include_usage), so every entry would "
                f"be blocked by {TOKEN_SOURCE_IS_USAGE.name}. Set the arm's token_count = "
                '"logprobs" (the tokens listed in the streamed logprobs of each event) or '
                'token_count = "server_tokenizer" (the received text counted by the '
                "server's tokenizer endpoint, tokenize_path)")


@TOKEN_COUNTS.register
class LogprobsCounter(TokenCounter):
    """The tokens listed in each event's streamed logprobs: exact, and known per event."""

    name = "logprobs"

    def request_fields(self, endpoint: Endpoint) -> dict[str, Any]:
        return endpoint.logprobs_fields()

    def event_reader(self, endpoint: Endpoint) -> ReadCounted:
        return endpoint.logprob_tokens

    def new_tally(self) -> Tally:
        return LogprobTally()

    def nothing_counted(self, completed: list[RequestRecord]) -> str:
        n = len(completed)
        return (f"the server streamed no logprobs with the text of any of the {n} completed "
                'warm-up requests (asked for with "logprobs"), so token_count = "logprobs" '
                'counts nothing here; try token_count = "server_tokenizer" or "usage"')
