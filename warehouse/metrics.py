"""The metrics entries are made of, defined once for measured and imported evidence
(docs/protocol.md: definitions).

A request metric is a column of the `requests` view, summarised over requests by DuckDB
(queries/derive_request_stats.sql); a window metric is one value per window, computed here
from the window's totals (queries/derive_window_sums.sql); a log metric is a field of the
server's own log lines. warehouse/entries.py makes the entries of request and window
metrics for both kinds of evidence; log metrics are measured only (warehouse/derive.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from benchledger.rules.core import SLO_MET  # goodput's population

PERCENTILES = (50, 90, 99)
LATENCY_STATS = tuple(f"p{q}" for q in PERCENTILES)


@dataclass(frozen=True)
class RequestMetric:
    """A per-request number (a column of the `requests` view), summarised over requests.

    The column list of queries/derive_request_stats.sql and views/entry_requests.sql must
    name exactly these columns (a unit test holds them together)."""

    metric: str
    column: str
    unit: str
    phase: str  # prefill | decode | end_to_end (T7)
    numerator: str | None  # rates: output_tokens | prompt_tokens (T12); None for latencies
    denominator: str | None
    extra: tuple[str, ...] = ()  # statistics besides the mean: p50/p90/p99, min/max
    optional: bool = False  # no entry at all where no request has it (not applicable)
    # Its value is an interval of one request that the client stamped (or a count over
    # one): a client too late to stamp events (T17, rule client_lag_within_bound) gets each
    # of them wrong, so a failure of a block_timing_entries rule blocks its entries.
    timing: bool = False


REQUEST_METRICS = (
    RequestMetric("decode_rate", "decode_tok_s", "tok/s", "decode", "output_tokens",
                  "t_last - t_first of each request (its tokens after the first)",
                  timing=True),
    RequestMetric("e2e_rate", "e2e_tok_s", "tok/s", "end_to_end", "output_tokens",
                  "t_done - t_submit of each request", timing=True),
    RequestMetric("prefill_rate", "prefill_tok_s", "tok/s", "prefill", "prompt_tokens",
                  "t_first - t_submit of each request (TTFT)", timing=True),
    RequestMetric("ttft", "ttft_s", "s", "prefill", None, None, LATENCY_STATS, timing=True),
    RequestMetric("tpot", "tpot_s", "s", "decode", None, None, LATENCY_STATS, timing=True),
    RequestMetric("e2e_latency", "e2e_s", "s", "end_to_end", None, None, LATENCY_STATS,
                  timing=True),
    # > 1 means each streamed event carried several tokens (speculative decoding): a
    # harness counting chunks would under-report by this factor (T1). A count, not an
    # interval: each event is counted whether or not it shared a read with another, so a
    # late client does not change it.
    RequestMetric("tokens_per_chunk", "tokens_per_chunk", "tokens/chunk", "decode", None,
                  "output_tokens / content-bearing stream events, per request",
                  ("min", "max"), timing=False),
    # Only where each event's tokens are known (token_source 'logprobs'): a gap between
    # events spread over the later event's tokens, never a gap taken as one token's.
    RequestMetric("itl_per_token", "itl_per_token_s", "s", "decode", None,
                  "each event's gap divided over its tokens; per request the mean over its "
                  "tokens after the first event: (t_last - t_first) / those tokens",
                  optional=True, timing=True),
    # Reasoning models (issue #26): the answer's first token is ttft; the first reasoning
    # token is its own metric. A request that streamed reasoning has no decode_rate,
    # e2e_rate or tpot of numerator output_tokens (usage counts reasoning tokens in it);
    # its rates say which tokens they count.
    RequestMetric("ttfrt", "ttfrt_s", "s", "prefill", None,
                  "t_first_reasoning - t_submit of each request that streamed reasoning",
                  LATENCY_STATS, optional=True, timing=True),
    RequestMetric("decode_rate", "answer_decode_tok_s", "tok/s", "decode", "answer_tokens",
                  "t_last - t_first of each answer (reasoning excluded: output_tokens - "
                  "reasoning_tokens over the answer's own span)", optional=True, timing=True),
    RequestMetric("decode_rate", "decode_with_reasoning_tok_s", "tok/s", "decode",
                  "output_tokens_with_reasoning",
                  "first to last token of either kind (reasoning included in the numerator)",
                  optional=True, timing=True),
    # Multi-turn sessions (issue #26): TTFT of first and of later turns apart (a later
    # turn's history may be served from the prefix cache), and whole sessions.
    RequestMetric("ttft_first_turn", "ttft_first_turn_s", "s", "prefill", None,
                  "t_first - t_submit of each session's first turn", LATENCY_STATS,
                  optional=True, timing=True),
    RequestMetric("ttft_later_turns", "ttft_later_turns_s", "s", "prefill", None,
                  "t_first - t_submit of each session's turns after the first", LATENCY_STATS,
                  optional=True, timing=True),
    RequestMetric("session_latency", "session_s", "s", "end_to_end", None,
                  "first submission to last answer of each session whose turns all "
                  "completed (one value per session, on its last turn)", LATENCY_STATS,
                  optional=True, timing=True),
)
# The columns of the per-request metrics a late client gets wrong (RequestMetric.timing).
TIMING_COLUMNS = frozenset(spec.column for spec in REQUEST_METRICS if spec.timing)


# Per-window values. `w` is one window (a row of `windows`) with its totals over completed
# measured requests (queries/derive_window_sums.sql) and, for measured windows, its counter
# deltas (`counters`).

def _per_elapsed(tokens: Any, w: pd.Series) -> float | None:
    """tokens / elapsed_s; None where a count is missing (the window sums leave a total
    NULL when any request lacks it) or the window has no span."""
    return None if pd.isna(tokens) or not w["elapsed_s"] else tokens / w["elapsed_s"]


def _reasoned(w: pd.Series) -> bool:
    """Whether any of the window's completed requests streamed reasoning (issue #26): its
    output_tokens then hold reasoning tokens, and no entry of numerator output_tokens is
    made of them (the metrics below name reasoning in their numerator instead)."""
    count = w.get("reasoning_requests")
    return count is not None and not pd.isna(count) and count > 0


def _output_throughput(w: pd.Series) -> float | None:
    return None if _reasoned(w) else _per_elapsed(w["output_tokens"], w)


def _total_throughput(w: pd.Series) -> float | None:
    return None if _reasoned(w) else _per_elapsed(w["total_tokens"], w)


def _throughput_with_reasoning(w: pd.Series) -> float | None:
    return _per_elapsed(w["output_tokens"], w) if _reasoned(w) else None


def _answer_throughput(w: pd.Series) -> float | None:
    """Answer tokens (output - reasoning) per elapsed second, on windows with reasoning."""
    if not _reasoned(w) or pd.isna(w["reasoning_tokens"]) or pd.isna(w["output_tokens"]):
        return None
    return _per_elapsed(w["output_tokens"] - w["reasoning_tokens"], w)


def _cached_share(w: pd.Series) -> float | None:
    """The share of the window's prompt tokens the server reported as served from its
    prefix cache (usage's cached_tokens): a prefix-cache win measured as such (T15), not
    read as prefill speed. None where no request reported cached_tokens."""
    cached_n, prompt_n = w.get("cached_tokens_n"), w.get("prompt_tokens_n")
    if not cached_n or pd.isna(cached_n) or cached_n != prompt_n or not w["prompt_tokens_sum"]:
        return None
    return float(w["cached_tokens_sum"]) / float(w["prompt_tokens_sum"])


def _prefix_cache_hit_rate(w: pd.Series) -> float | None:
    """vLLM's prefix-cache hits over queries (tokens) between the window's scrapes."""
    counters = w["counters"]
    queries = counters.get("vllm:prefix_cache_queries_total")
    hits = counters.get("vllm:prefix_cache_hits_total")
    return hits / queries if queries and hits is not None else None


def _aggregate_decode(w: pd.Series) -> float | None:
    """Tokens after each request's first, over the span in which the window decoded."""
    if _reasoned(w):  # its first tokens are answers', its token counts hold reasoning too
        return None
    if pd.isna(w["decode_start_ns"]) or pd.isna(w["decode_end_ns"]) \
            or pd.isna(w["decode_tokens"]):
        return None
    span_s = (w["decode_end_ns"] - w["decode_start_ns"]) / 1e9
    return w["decode_tokens"] / span_s if span_s > 0 else None


def _acceptance_length(w: pd.Series) -> float | None:
    """1 + accepted / drafts from the server's spec-decode counter deltas (vLLM's mean
    acceptance length): tokens per step that drafted, and only those. A step that did not
    draft (a request's first token, prefill, a step with nothing to propose) is not in
    drafts, so this is above the client's tokens per chunk, which counts every event (4.0
    against 2.5 on a real vLLM with n-gram drafts; issue #23)."""
    counters = w["counters"]
    drafts = counters.get("vllm:spec_decode_num_drafts_total")
    accepted = counters.get("vllm:spec_decode_num_accepted_tokens_total")
    return 1 + accepted / drafts if drafts and accepted is not None else None


def _completion_fraction(w: pd.Series) -> float | None:
    finished = w["completed"] + w["failed"]
    return finished / w["submitted"] if w["submitted"] else None


def _success_fraction(w: pd.Series) -> float | None:
    return w["completed"] / w["submitted"] if w["submitted"] else None


def _success_rate_finished(w: pd.Series) -> float | None:
    finished = w["completed"] + w["failed"]
    return w["completed"] / finished if finished else None


def _energy(w: pd.Series) -> float | None:
    """The window's energy in J (view window_energy), None where it has none."""
    energy = w.get("energy_j")
    return None if energy is None or pd.isna(energy) else float(energy)


def _energy_per_token(w: pd.Series) -> float | None:
    """Joules the deployment's GPUs drew over the window per output token delivered in it:
    idle GPUs, failed and unfinished requests included in the joules, only the tokens of
    completed measured requests below them (what a user was served)."""
    energy, tokens = _energy(w), w["output_tokens"]
    return None if energy is None or pd.isna(tokens) or not tokens else energy / tokens


def _tokens_per_joule(w: pd.Series) -> float | None:
    energy, tokens = _energy(w), w["output_tokens"]
    return None if not energy or pd.isna(tokens) else tokens / energy


def _gpu_power(w: pd.Series) -> float | None:
    """Mean power of all the deployment's GPUs together over the window."""
    energy, span = _energy(w), w.get("energy_span_s")
    return None if energy is None or span is None or pd.isna(span) or not span \
        else energy / float(span)


@dataclass(frozen=True)
class WindowMetric:
    """A per-window number (the unit is the window); entry value = mean over windows."""

    metric: str
    unit: str
    phase: str
    numerator: str
    denominator: str
    value: Callable[[pd.Series], float | None]
    population: str | None = None  # None: 'all_submitted' or 'completed_only' by the data
    counts: str = "completed"  # n_requests counts completed or submitted requests
    optional: bool = False  # no entry at all where no window has a value (not applicable)
    # Its value rests on when stream events arrived (the first and last tokens' stamps): a
    # rule of effect block_stream_entries (answers delivered whole) blocks its entries.
    stamped: bool = False


WINDOW_ELAPSED = "window elapsed_s: first measured submission to last completion or drain deadline"
GPU_ENERGY = ("gpu_energy_j: every GPU of the deployment, each energy counter's after minus "
              "before reading around the window (or its power samples integrated)")
DELIVERED = "output_tokens of the window's completed measured requests"
WINDOW_METRICS = (
    WindowMetric("throughput", "tok/s", "end_to_end", "output_tokens", WINDOW_ELAPSED,
                 _output_throughput),
    WindowMetric("throughput", "tok/s", "end_to_end", "input_plus_output_tokens",
                 WINDOW_ELAPSED, _total_throughput),
    WindowMetric("throughput", "tok/s", "end_to_end", "output_tokens_with_reasoning",
                 WINDOW_ELAPSED, _throughput_with_reasoning, optional=True),
    WindowMetric("throughput", "tok/s", "end_to_end", "answer_tokens", WINDOW_ELAPSED,
                 _answer_throughput, optional=True),
    WindowMetric("decode_rate", "tok/s", "decode", "output_tokens",
                 "first t_first to last t_last in the window (each request's tokens after "
                 "its first)", _aggregate_decode, stamped=True),
    WindowMetric("completion_fraction", "fraction", "end_to_end", "finished_requests",
                 "submitted_requests", _completion_fraction, "all_submitted", "submitted"),
    WindowMetric("success_fraction", "fraction", "end_to_end", "completed_requests",
                 "submitted_requests", _success_fraction, "all_submitted", "submitted"),
    # "80 of 85 finished" is true only with its label; never an unlabelled 94% (T14).
    WindowMetric("success_rate", "fraction", "end_to_end", "completed_requests",
                 "finished_requests", _success_rate_finished, "finished_only", "submitted"),
    # Per drafting step only (see _acceptance_length): never read as tokens per chunk.
    WindowMetric("mean_acceptance_length", "tokens/drafting step", "decode",
                 "vllm:spec_decode_num_accepted_tokens_total delta",
                 "vllm:spec_decode_num_drafts_total delta (steps that drafted; plus one "
                 "token per drafting step; steps without a draft are not counted)",
                 _acceptance_length, optional=True),
    # The prefix cache's share (issue #26: shared prefixes, sessions): from usage, and from
    # the server's own counters where it exports vLLM's.
    WindowMetric("cached_token_share", "fraction", "prefill", "cached_tokens",
                 "prompt_tokens of the window's completed measured requests", _cached_share,
                 optional=True),
    WindowMetric("prefix_cache_hit_rate", "fraction", "prefill",
                 "vllm:prefix_cache_hits_total delta", "vllm:prefix_cache_queries_total delta",
                 _prefix_cache_hit_rate, optional=True),
    # Energy (issue #24; rules.ENERGY_METRICS names them for the rule energy_source_labelled):
    # only where every GPU of every node was read at both ends of the window (no entry at
    # all without telemetry; never a zero or a partial sum).
    WindowMetric("energy_per_token", "J/token", "end_to_end", "gpu_energy_j", DELIVERED,
                 _energy_per_token, optional=True),
    WindowMetric("tokens_per_joule", "tokens/J", "end_to_end", "output_tokens", GPU_ENERGY,
                 _tokens_per_joule, optional=True),
    WindowMetric("gpu_power", "W", "end_to_end", "gpu_energy_j",
                 "seconds from the first reading before the window to the last after it",
                 _gpu_power, optional=True),
)
# The window metrics whose value rests on the stamps of stream events (WindowMetric.stamped).
# Goodput and attainment (slo_window_metrics, made per sweep) are judged on each request's
# stamps: a stream rule blocks them as it blocks the other stamped window metrics.
SLO_METRICS = frozenset({"goodput", "slo_attainment", "slo_attainment_completed"})
STAMPED_WINDOW_METRICS = frozenset(m.metric for m in WINDOW_METRICS if m.stamped) \
    | SLO_METRICS

# Server log lines (T2): each field under its own metric name, as peak and mean; never
# the delivered rate (the entry gate checks these names stay apart).
LOG_METRICS = (("server_log_generation_throughput", "generation_tok_s"),
               ("server_log_prompt_throughput", "prompt_tok_s"),
               ("server_log_accepted_throughput", "accepted_tok_s"))


# --- SLOs (issue #27) ------------------------------------------------------------------------
# A window's SLO totals (benchledger/slo_judge.sql, joined by warehouse/derive.py): per SLO
# `slo_met:<name>`, and over every SLO of its workload `slo_met_all` requests with their
# `slo_met_output_tokens`. Failed and unfinished requests meet no SLO.
MEETING_ALL = "requests_meeting_all_slos"
MEETING_SLO = "requests_meeting_slo:"  # and the SLO's name: one SLO's attainment


def _met(w: pd.Series, column: str) -> float | None:
    value = w.get(column)
    return None if value is None or pd.isna(value) else float(value)


def _goodput_requests(w: pd.Series) -> float | None:
    return _per_elapsed(_met(w, "slo_met_all"), w) if _met(w, "slo_met_all") is not None \
        else None


def _goodput_tokens(w: pd.Series) -> float | None:
    tokens = _met(w, "slo_met_output_tokens")
    return None if tokens is None or _reasoned(w) else _per_elapsed(tokens, w)


def _goodput_tokens_with_reasoning(w: pd.Series) -> float | None:
    tokens = _met(w, "slo_met_output_tokens")
    return None if tokens is None or not _reasoned(w) else _per_elapsed(tokens, w)


def _share(column: str, of: str) -> Callable[[pd.Series], float | None]:
    def value(w: pd.Series) -> float | None:
        met, total = _met(w, column), w[of] if of == "submitted" else w["n_done"]
        return None if met is None or not total else met / float(total)
    return value


def slo_window_metrics(slo_names: list[str]) -> tuple[WindowMetric, ...]:
    """Goodput and attainment of a cell whose workload has these SLOs (none: no metric)."""
    if not slo_names:
        return ()
    out = [
        # DistServe's goodput: the rate of requests (and of their tokens) that met every
        # SLO; failed and unfinished requests are in no numerator.
        WindowMetric("goodput", "req/s", "end_to_end", MEETING_ALL, WINDOW_ELAPSED,
                     _goodput_requests, SLO_MET, "submitted", stamped=True),
        WindowMetric("goodput", "tok/s", "end_to_end", "output_tokens", WINDOW_ELAPSED,
                     _goodput_tokens, SLO_MET, "submitted", optional=True, stamped=True),
        WindowMetric("goodput", "tok/s", "end_to_end", "output_tokens_with_reasoning",
                     WINDOW_ELAPSED, _goodput_tokens_with_reasoning, SLO_MET, "submitted",
                     optional=True, stamped=True),
        # Attainment over all submitted requests (failed and unfinished count as misses),
        # and over the completed ones only: each labelled by its population (T14).
        WindowMetric("slo_attainment", "fraction", "end_to_end", MEETING_ALL,
                     "submitted_requests", _share("slo_met_all", "submitted"),
                     "all_submitted", "submitted", stamped=True),
        WindowMetric("slo_attainment_completed", "fraction", "end_to_end", MEETING_ALL,
                     "completed_requests", _share("slo_met_all", "completed"),
                     "completed_only", "completed", stamped=True),
    ]
    out += [WindowMetric("slo_attainment", "fraction", "end_to_end",
                         f"{MEETING_SLO}{name}", "submitted_requests",
                         _share(f"slo_met:{name}", "submitted"), "all_submitted", "submitted",
                         stamped=True)
            for name in slo_names]
    return tuple(out)
