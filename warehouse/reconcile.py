"""Reconcile what the client received with the server's own counters, per window (T3).

The before/after scrapes bracket the measured window only (warm-up is outside), so a
counter's delta must equal the client's count within the sweep's tolerance. When a
window had failed or unresolved requests the server also counted work whose usage the
client never saw, so then the client's count is only a lower bound of the delta.

Each server family names its counters differently and counts slightly different things
(FAMILY_COUNTERS; tests/fixtures/metrics/<family>.txt say where each name comes from). A
window is checked against the counters of its restart's family (restarts.server_family:
the arm's server_family, or what /metrics named when the server was ready). A restart
without one (raw files from before, or no family recognised then) takes the family whose
counters the window's own scrapes show, else vLLM's names. A family that has no counter for
a quantity (llama.cpp's server counts no finished requests) gets no row for it: there is
nothing it could have said.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import duckdb
import pandas as pd

from benchledger.rules.core import COUNTER_UNREADABLE, LOWER_BOUND, MATCH, MISMATCH, NO_COUNTER

# What a window is reconciled on, whatever a family calls its counter: one *_reconcile rule
# each (benchledger.rules), reconciliations.quantity.
QUANTITIES = ("generation_tokens", "prompt_tokens", "finished_requests")
# (the name warehouse/derive.py counts a never-reconciled window's missing checks with)
COUNTERS = QUANTITIES


@dataclass(frozen=True)
class Counter:
    """One server counter and the client count it must equal."""

    name: str  # the sample name as the warehouse stores it (prometheus_client's parser)
    client: str  # the client count it is checked against (a key of NO_REQUESTS)
    meaning: str  # that client count in words, for the detail
    left_out: tuple[str, str] | None = None  # a label value whose samples do not count


OUTPUT = "delivered output tokens (usage.completion_tokens)"
PROMPT = "prompt tokens (usage.prompt_tokens)"
COMPLETED = "completed requests"
FAMILY_COUNTERS: dict[str, dict[str, Counter]] = {
    "vllm": {
        "generation_tokens": Counter("vllm:generation_tokens_total", "output_tokens", OUTPUT),
        "prompt_tokens": Counter("vllm:prompt_tokens_total", "prompt_tokens", PROMPT),
        # aborted requests are not successes
        "finished_requests": Counter("vllm:request_success_total", "completed", COMPLETED,
                                     left_out=("finished_reason", "abort")),
    },
    # Counted once per finished request, from the same numbers its usage reports.
    "sglang": {
        "generation_tokens": Counter("sglang:generation_tokens_total", "output_tokens",
                                     OUTPUT),
        "prompt_tokens": Counter("sglang:prompt_tokens_total", "prompt_tokens", PROMPT),
        "finished_requests": Counter("sglang:num_requests_total", "completed", COMPLETED),
    },
    # llama.cpp's server counts the prompt tokens it evaluated: its prompt cache's hits are
    # not in llamacpp:prompt_tokens_total. It has no finished-request counter.
    "llamacpp": {
        "generation_tokens": Counter("llamacpp:tokens_predicted_total", "output_tokens",
                                     OUTPUT),
        "prompt_tokens": Counter("llamacpp:prompt_tokens_total", "uncached_prompt_tokens",
                                 "prompt tokens the server evaluated (usage.prompt_tokens "
                                 "minus usage.prompt_tokens_details.cached_tokens)"),
    },
    # TGI has no token counters, but the sums of its per-request histograms only grow.
    # It exports the counter as tgi_request_success; the parser stores it with _total.
    "tgi": {
        "generation_tokens": Counter("tgi_request_generated_tokens_sum", "output_tokens",
                                     OUTPUT),
        "prompt_tokens": Counter("tgi_request_input_length_sum", "prompt_tokens", PROMPT),
        "finished_requests": Counter("tgi_request_success_total", "completed", COMPLETED),
    },
}
# Windows whose family is unknown are read with the names this project always checked.
DEFAULT_FAMILY = "vllm"
# A scrape the observer could not read, in a window's observation_errors (its parts are
# "metrics: ...", "log: ...", "clocks: ...", joined by "; ").
_UNREADABLE_SCRAPE = re.compile(
    rf"metrics: ((?:before|after): \S+: {re.escape(COUNTER_UNREADABLE)}: .*?)"
    r"(?=; (?:metrics|log|clocks): |$)")
COUNTER_NAMES = [c.name for counters in FAMILY_COUNTERS.values() for c in counters.values()]
COLUMNS = ["window_id", "run_id", "counter", "client_value", "server_delta", "relative_error",
           "tolerance", "status", "detail", "quantity"]


# What the client counted in each window of a run (the measured requests only: warm-up is
# outside the counters' bracket), summed by DuckDB: a run holds up to 10^6 requests.
# (Token counts are integers: the sums are exact below 2^53.) tests/reference.py holds the
# same sums written over a pandas frame, and tests/unit/expectations/test_gate_scale.py the
# two together.
_CLIENT_VALUES_SQL = """
SELECT r.window_id,
       sum(coalesce(r.output_tokens, 0))::DOUBLE AS output_tokens,
       sum(coalesce(r.prompt_tokens, 0))::DOUBLE AS prompt_tokens,
       sum(coalesce(r.prompt_tokens, 0) - coalesce(r.cached_tokens, 0))::DOUBLE
           AS uncached_prompt_tokens,
       count_if(r.status = 'completed')::DOUBLE AS completed,
       count_if(r.prompt_tokens IS NOT NULL AND r.cached_tokens IS NULL)::DOUBLE
           AS cached_unknown,
       count_if(r.status = 'completed' AND r.prompt_tokens IS NULL)::DOUBLE AS prompt_unknown
FROM request_records AS r
JOIN windows AS w USING (window_id)
WHERE w.run_id = ? AND NOT r.is_warmup
GROUP BY r.window_id
"""
NO_REQUESTS = dict.fromkeys(("output_tokens", "prompt_tokens", "uncached_prompt_tokens",
                              "completed", "cached_unknown", "prompt_unknown"), 0.0)


def window_family(recorded: object, metrics: pd.DataFrame) -> tuple[str, bool]:
    """(the family whose counters check the window, whether it was known): the restart's
    recorded family, else the one family whose counters the window's scrapes show, else
    the default (not known)."""
    if isinstance(recorded, str) and recorded in FAMILY_COUNTERS:
        return recorded, True
    names = set(metrics["name"])
    seen = [family for family, counters in FAMILY_COUNTERS.items()
            if any(c.name in names for c in counters.values())]
    return (seen[0], True) if len(seen) == 1 else (DEFAULT_FAMILY, False)


def _server_delta(metrics: pd.DataFrame, counter: Counter) -> float | None:
    rows = metrics[metrics["name"] == counter.name]
    if counter.left_out:
        label, value = counter.left_out
        found = rows["labels"].map(lambda labels: json.loads(labels).get(label))
        rows = rows[found != value]
    if not (rows["phase"] == "after").any():
        return None  # a label set may first appear after the window; none at all: no counter
    after = rows.loc[rows["phase"] == "after", "value"].sum()
    before = rows.loc[rows["phase"] == "before", "value"].sum()
    return float(after - before)


def reconcile_window(window: pd.Series, client: dict[str, float], metrics: pd.DataFrame,
                     recorded_family: object) -> list[dict]:
    """One window's reconciliations: `client` what the client counted in it (the keys of
    NO_REQUESTS), `metrics` its scrapes of the counters, `recorded_family` its restart's
    server_family (NULL: the one its scrapes show, else vLLM's names)."""
    family, known = window_family(recorded_family, metrics)
    clean = window["failed"] == 0 and window["unresolved"] == 0
    tolerance = window.get("reconcile_tolerance")
    # A window row from pandas holds NaN for NULL, and error <= NaN is false: without a
    # tolerance there is nothing to mismatch (the rule skips such windows too).
    tolerance = None if tolerance is None or pd.isna(tolerance) else float(tolerance)
    # The scrape itself failing is recorded by the observer as a "metrics: ..." error,
    # which says whether the endpoint was missing or could not be read.
    errors = str(window.get("observation_errors") or "")
    scraped = "metrics:" not in errors
    unreadable = _UNREADABLE_SCRAPE.search(errors)
    rows = []
    for quantity, counter in FAMILY_COUNTERS[family].items():
        server = _server_delta(metrics, counter) if scraped else None
        value = client[counter.client]
        # a family not known has no counter names of its own: the details say so rather
        # than name the default family's (vLLM's names for a llama.cpp server misled)
        shown = counter.name if known else \
            f"the {quantity.replace('_', '-')} counter (server family not known)"
        base = {"window_id": window["window_id"], "run_id": window["run_id"],
                "counter": counter.name, "quantity": quantity, "client_value": value,
                "server_delta": server, "tolerance": tolerance}
        if unreadable:
            rows.append({**base, "relative_error": None, "status": COUNTER_UNREADABLE,
                         "detail": f"{shown}: not reconciled (its /metrics could not "
                                   f"be read: {unreadable[1][:500]})"})
            continue
        unchecked = _why_unchecked(counter, server, scraped, known, client)
        if unchecked or server is None:  # (no counter is always a reason: never both)
            rows.append({**base, "relative_error": None, "status": NO_COUNTER,
                         "detail": f"{shown}: not reconciled ({unchecked})"})
            continue
        if clean:
            error = abs(server - value) / max(value, 1.0)
            status = MATCH if tolerance is None or error <= tolerance else MISMATCH
        else:
            error = max(0.0, (value - server) / max(value, 1.0))
            status = LOWER_BOUND
        sign = (server - value) / max(value, 1.0)
        rows.append({**base, "relative_error": error, "status": status,
                     "detail": f"{counter.name} delta {server:g} vs {counter.meaning} "
                               f"{value:g} ({sign:+.1%})" + ("" if clean else
                                                             "; failed/unresolved requests "
                                                             "make the client count a lower "
                                                             "bound")})
    return rows


def _why_unchecked(counter: Counter, server: float | None, scraped: bool, known: bool,
                   client: dict[str, float]) -> str | None:
    """Why this counter cannot check the window, or None when it can."""
    if not scraped:
        return "no /metrics scrape before and after the window"
    if server is None:
        return "the server exposes no such counter" + (
            "" if known else "; its /metrics names no known server family")
    if counter.client in ("prompt_tokens", "uncached_prompt_tokens") \
            and client.get("prompt_unknown"):
        # A server without usage (its output tokens counted from logprobs or its
        # tokenizer) gives no prompt count: nothing to hold its counter against.
        return (f"{client['prompt_unknown']:g} completed measured requests reported no "
                "usage.prompt_tokens, so the client has no prompt count")
    if counter.client == "uncached_prompt_tokens" and client["cached_unknown"]:
        return (f"it counts only the prompt tokens the server evaluated, and "
                f"{client['cached_unknown']:g} measured requests reported no "
                "usage.prompt_tokens_details.cached_tokens, so the client cannot know "
                "that count")
    return None


def reconcile_run(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Compute and store (replacing earlier results) the run's reconciliations."""
    windows = con.execute(
        "SELECT w.*, r.server_family FROM windows AS w "
        "LEFT JOIN restarts AS r ON r.restart_id = w.restart_id WHERE w.run_id = ?",
        [run_id]).df()
    client = {row[0]: dict(zip(NO_REQUESTS, row[1:], strict=True))
              for row in con.execute(_CLIENT_VALUES_SQL, [run_id]).fetchall()}
    metrics = con.execute(
        "SELECT m.window_id, m.phase, m.name, m.labels, m.value FROM server_metrics m "
        "JOIN windows w USING (window_id) WHERE w.run_id = ? AND list_contains(?, m.name)",
        [run_id, COUNTER_NAMES]).df()
    rows = []
    for _, window in windows.iterrows():
        rows += reconcile_window(window, client.get(window["window_id"], NO_REQUESTS),
                                 metrics[metrics["window_id"] == window["window_id"]],
                                 window["server_family"])
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if not frame.empty:
        con.execute("DELETE FROM reconciliations WHERE run_id = ?", [run_id])
        con.register("incoming_reconciliations", frame)
        try:
            # by name: quantity came later (migration 0014), so it is the table's last column
            con.execute("INSERT INTO reconciliations (window_id, run_id, counter, "
                        "client_value, server_delta, relative_error, tolerance, status, "
                        "detail, quantity) SELECT * FROM incoming_reconciliations")
        finally:
            con.unregister("incoming_reconciliations")
    return frame
