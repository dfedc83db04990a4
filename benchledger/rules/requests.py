"""The measured requests suite: one row per measured request, its subject the window.

A failed or unresolved request has no usage and no meaningful times by nature, so most
rules here judge completed requests only: their columns hold NULL elsewhere (GX skips it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from benchledger.rules.core import (
    AGREE,
    BLOCK_ENTRIES,
    COUNTED_TOKEN_SOURCES,
    DISAGREE,
    LOGPROBS,
    MAX_PROMPT_TOKENS,
    PLAUSIBLE,
    USAGE,
    Builder,
    Frame,
    Kw,
    Rows,
    Rule,
    SuiteFrame,
    gx,
)
from benchledger.rules.frame import (
    as_float,
    equals,
    first_requests,
    first_verdict,
    fractional,
    null_marked,
    or_null,
    present,
    share,
    show,
    show_count,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

IS_COMPLETED = "is_completed"  # status == 'completed', as a plain mask


def _is_completed(frame: Frame) -> np.ndarray:
    return equals(frame["status"], "completed")


SUITE = SuiteFrame(
    "measured_requests", frame="requests", subject="window_id",
    required=("request_id", "window_id", "status", "token_source", "temperature", "ttft_s",
              "e2e_s", "max_tokens", "prompt_tokens", "output_tokens", "cached_tokens"),
    # usage_output_tokens: only where the tokens were counted otherwise; chunks (the
    # text-bearing events): NULL in frames from before it was handed over, not checked
    optional=("usage_output_tokens", "chunks"),
    columns={IS_COMPLETED: _is_completed})


def _completed(column: str, *, marked: bool = False) -> Builder:
    """A builder of column on completed requests (marked: NULL there made visible to GX),
    NULL on the others."""

    def build(frame: Frame) -> pd.Series:
        values = or_null(frame[column]) if marked else frame[column]
        return values.where(frame[IS_COMPLETED])

    return build


def _observe_token_source(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    completed = rows[frame[IS_COMPLETED].to_numpy()[rows]]
    found = share(frame, "token_source", completed, bad).replace(" rows ", " completed rows ")
    return f"token_source in {kw['value_set']} on completed requests", found


TOKEN_SOURCE_IS_USAGE = Rule(
    name="token_source_is_usage", traps=("T1", "T13"), applies_to="request",
    effect=BLOCK_ENTRIES,
    summary="every completed measured request's output tokens come from the usage the "
            "server reported for it, or from the source its arm's token_count names and "
            "its own rule checks (logprobs, server_tokenizer); never from chunks, "
            "characters or max_tokens",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet",
             column="completed_token_source", value_set=list(COUNTED_TOKEN_SOURCES),
             columns={"completed_token_source": _completed("token_source", marked=True)},
             observe=_observe_token_source))


def _logprobs_verdicts(frame: Frame) -> pd.Series:
    """Per completed row counted from logprobs whose server also reported usage: AGREE
    when both counts are equal, else DISAGREE; None elsewhere (GX skips it)."""
    import numpy as np

    output, usage = as_float(frame["output_tokens"]), as_float(frame["usage_output_tokens"])
    checked = (frame[IS_COMPLETED].to_numpy() & equals(frame["token_source"], LOGPROBS)
               & ~np.isnan(usage))
    return first_verdict(frame, [(AGREE, output == usage)], DISAGREE, checked)


def _observe_logprobs(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    """How many logprob counts could be held against usage, and the first that disagree."""
    found = (f"{len(bad)} of {present(frame, rows, kw['column'])} completed rows counted "
             "from logprobs with usage disagree")
    if len(bad):
        found += ": " + first_requests(
            frame, bad, lambda row: f"logprobs {show_count(frame.at[row, 'output_tokens'])}, "
                                    f"usage {show_count(frame.at[row, 'usage_output_tokens'])}")
    return ("output_tokens (logprobs) == usage.completion_tokens on completed requests that "
            "have both"), found


LOGPROBS_MATCH_USAGE = Rule(
    name="logprobs_match_usage", traps=("T1", "T3"), applies_to="request",
    effect=BLOCK_ENTRIES,
    summary="every completed measured request counted from its streamed logprobs, whose "
            "server also reported usage, lists exactly as many tokens as "
            "usage.completion_tokens says",
    threshold="output_tokens == usage_output_tokens", threshold_source="exact counts",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet",
             column="logprobs_usage_check", value_set=[AGREE],
             columns={"logprobs_usage_check": _logprobs_verdicts}, observe=_observe_logprobs))


def _observe_temperature(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    expected = " or ".join(f"temperature == {v}" for v in kw["value_set"])
    return expected, share(frame, "temperature", rows, bad)


TEMPERATURE_IS_ZERO = Rule(
    name="temperature_is_zero", traps=("T9",), applies_to="request", effect=BLOCK_ENTRIES,
    summary="every measured request ran at temperature 0",
    threshold="temperature == 0.0", threshold_source="the protocol (T9)",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet",
             column="temperature_or_null", value_set=[0.0],
             columns={"temperature_or_null": null_marked("temperature")},
             observe=_observe_temperature))


def _observe_ttft(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    # The denominator is the rows the rule could check, not every measured request.
    checked = present(frame, rows, kw["column_A"], kw["column_B"])
    found = f"{len(bad)} of {checked} completed rows with ttft_s > e2e_s"
    if len(bad):
        found += ": " + first_requests(
            frame, bad, lambda row: f"ttft_s {show(frame.at[row, 'ttft_s'])}, "
                                    f"e2e_s {show(frame.at[row, 'e2e_s'])}")
    return "ttft_s <= e2e_s on completed requests", found


TTFT_NOT_ABOVE_E2E = Rule(
    name="ttft_not_above_e2e", traps=(), applies_to="request", effect=BLOCK_ENTRIES,
    summary="for completed requests with both times, TTFT <= E2E latency (the timestamps "
            "are consistent)",
    # Blanking the other requests' times lets ignore_row_if="either_value_is_missing"
    # skip them together with rows lacking a time.
    check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
             column_A="completed_e2e_s", column_B="completed_ttft_s", or_equal=True,
             ignore_row_if="either_value_is_missing",
             columns={"completed_ttft_s": _completed("ttft_s"),
                      "completed_e2e_s": _completed("e2e_s")},
             observe=_observe_ttft))

# Why a usage report cannot be true, in the order they are checked; a row's verdict is the
# first that applies, or PLAUSIBLE. `chunks` is the request's text-bearing stream events
# (choices that carried output text): each carries at least one token, so fewer tokens
# than those events cannot be true (1 token for 8 text events, 8 for 170,400).
_USAGE_COUNTS = ("output_tokens", "max_tokens", "prompt_tokens", "cached_tokens", "chunks")
_COUNT_NAME = re.compile(r"\b(?:(?:output|max|prompt|cached)_tokens|chunks)\b(?! NULL)")


def _usage_verdicts(frame: Frame) -> pd.Series:
    """Per row: PLAUSIBLE, the first reason its usage cannot be true, or None where the
    rule does not apply (GX skips it). Usage is judged only where it is the token source:
    a request without usage is token_source_is_usage's business, and a count it never had
    is not implausible."""
    import numpy as np

    checked = frame[IS_COMPLETED].to_numpy() & equals(frame["token_source"], USAGE)
    # cached_tokens is optional in the OpenAI usage object: NULL there breaks no check.
    # chunks NULL (a frame or an import without it) breaks no check either.
    output, limit, prompt, cached, events = (as_float(frame[c]) for c in _USAGE_COUNTS)
    return first_verdict(frame, [
        ("output_tokens NULL", np.isnan(output)),
        ("output_tokens not an integer", fractional(output)),
        ("output_tokens below 0", output < 0),
        ("max_tokens NULL", np.isnan(limit)),
        ("output_tokens above max_tokens", output > limit),
        ("output_tokens below chunks", output < events),
        ("prompt_tokens NULL", np.isnan(prompt)),
        ("prompt_tokens not an integer", fractional(prompt)),
        ("prompt_tokens below 0", prompt < 0),
        (f"prompt_tokens above {MAX_PROMPT_TOKENS}", prompt > MAX_PROMPT_TOKENS),
        ("cached_tokens not an integer", fractional(cached)),
        ("cached_tokens below 0", cached < 0),
        ("cached_tokens above prompt_tokens", cached > prompt),
    ], PLAUSIBLE, checked)


def _observe_usage(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    """How many usage reports were judged, why the bad ones cannot be true (per reason),
    and the first few offending requests with their values."""
    verdicts = frame[kw["column"]]
    found = f"{len(bad)} of {present(frame, rows, kw['column'])} completed rows with usage " \
            "implausible"
    if len(bad):
        reasons = verdicts.iloc[bad].value_counts(sort=False)
        found += ": " + ", ".join(f"{reason} ({n})" for reason, n in reasons.items())
        # A row's verdict with its values: 'output_tokens 1000000000 above max_tokens 8'.
        found += "; " + first_requests(frame, bad, lambda row: _COUNT_NAME.sub(
            lambda m: f"{m[0]} {show_count(frame.at[row, m[0]])}", verdicts.iat[row]))
    return ("0 <= output_tokens <= max_tokens, output_tokens >= chunks (its text-bearing "
            f"events), 0 <= prompt_tokens <= {MAX_PROMPT_TOKENS} and 0 <= cached_tokens <= "
            "prompt_tokens on completed requests with usage", found)


# A server's usage is taken as reported (the client never corrects it), so a count that
# cannot be true (10**9 tokens for max_tokens = 8, a negative count, 1 token for 8 text
# events, no prompt count) is recorded as it came and stopped here, before any rate is
# computed from it.
USAGE_PLAUSIBLE = Rule(
    name="usage_plausible", traps=("T1", "T13"), applies_to="request", effect=BLOCK_ENTRIES,
    summary="every completed measured request with token_source 'usage' reports integer "
            "counts that can be true: 0 <= output_tokens <= max_tokens, at least one token "
            "per text-bearing event (output_tokens >= chunks), prompt_tokens present and "
            "between 0 and the longest possible prompt, cached_tokens (when reported) "
            "between 0 and prompt_tokens",
    threshold=f"0 <= output_tokens <= max_tokens; output_tokens >= chunks; "
              f"0 <= prompt_tokens <= {MAX_PROMPT_TOKENS}; 0 <= cached_tokens <= "
              "prompt_tokens",
    threshold_source="each request's own max_tokens (the sweep's output target) and "
                     "text-bearing events (each carries a token at least); the "
                     f"protocol's prompt ceiling ({MAX_PROMPT_TOKENS} = 2**24, longer than "
                     "any model's context window)",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet",
             column="completed_usage_check", value_set=[PLAUSIBLE],
             columns={"completed_usage_check": _usage_verdicts}, observe=_observe_usage))
