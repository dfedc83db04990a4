"""Reconcile what the client received with the server's own counters, per window (T3).

The before/after scrapes bracket the measured window only (warm-up is outside), so a
counter's delta must equal the client's usage sum within the sweep's tolerance. When a
window had failed or unresolved requests the server also counted work whose usage the
client never saw, so then the client's count is only a lower bound of the delta.
"""

from __future__ import annotations

import json

import duckdb
import pandas as pd

# server counter -> (client column it is checked against, how to sum it)
COUNTERS = {
    "vllm:generation_tokens_total": "delivered output tokens (usage.completion_tokens)",
    "vllm:prompt_tokens_total": "prompt tokens (usage.prompt_tokens)",
    "vllm:request_success_total": "completed requests",
}


def _client_values(requests: pd.DataFrame) -> dict[str, float]:
    measured = requests[~requests["is_warmup"].astype(bool)]
    return {
        "vllm:generation_tokens_total": float(measured["output_tokens"].fillna(0).sum()),
        "vllm:prompt_tokens_total": float(measured["prompt_tokens"].fillna(0).sum()),
        "vllm:request_success_total": float((measured["status"] == "completed").sum()),
        "prompt_unknown": float(((measured["status"] == "completed")
                                 & measured["prompt_tokens"].isna()).sum()),
    }


# _client_values of every window of a run, summed by DuckDB: a run holds up to 10^6
# requests, which pandas would first have to fetch and then filter once per window.
# (Token counts are integers: the sums are exact either way below 2^53.)
_CLIENT_VALUES_SQL = """
SELECT r.window_id,
       sum(coalesce(r.output_tokens, 0))::DOUBLE AS generation,
       sum(coalesce(r.prompt_tokens, 0))::DOUBLE AS prompt,
       count_if(r.status = 'completed')::DOUBLE AS success,
       count_if(r.status = 'completed' AND r.prompt_tokens IS NULL)::DOUBLE AS prompt_unknown
FROM request_records AS r
JOIN windows AS w USING (window_id)
WHERE w.run_id = ? AND NOT r.is_warmup
GROUP BY r.window_id
"""
_NO_REQUESTS = {**dict.fromkeys(COUNTERS, 0.0), "prompt_unknown": 0.0}


def _server_delta(metrics: pd.DataFrame, counter: str) -> float | None:
    rows = metrics[metrics["name"] == counter]
    if counter == "vllm:request_success_total":  # aborted requests are not successes
        reasons = rows["labels"].map(lambda labels: json.loads(labels).get("finished_reason"))
        rows = rows[reasons != "abort"]
    if not (rows["phase"] == "after").any():
        return None  # a label set may first appear after the window; none at all: no counter
    after = rows.loc[rows["phase"] == "after", "value"].sum()
    before = rows.loc[rows["phase"] == "before", "value"].sum()
    return float(after - before)


def reconcile_window(window: pd.Series, requests: pd.DataFrame,
                     metrics: pd.DataFrame) -> list[dict]:
    return _reconcile(window, _client_values(requests), metrics)


def _reconcile(window: pd.Series, client: dict[str, float],
               metrics: pd.DataFrame) -> list[dict]:
    clean = window["failed"] == 0 and window["unresolved"] == 0
    tolerance = window.get("reconcile_tolerance")
    # A window row from pandas holds NaN for NULL, and error <= NaN is false: without a
    # tolerance there is nothing to mismatch (the rule skips such windows too).
    tolerance = None if tolerance is None or pd.isna(tolerance) else float(tolerance)
    # The scrape itself failing is recorded by the observer as a "metrics: ..." error.
    scraped = "metrics:" not in str(window.get("observation_errors") or "")
    rows = []
    for counter, meaning in COUNTERS.items():
        server = _server_delta(metrics, counter) if scraped else None
        value = client[counter]
        base = {"window_id": window["window_id"], "run_id": window["run_id"],
                "counter": counter, "client_value": value, "server_delta": server,
                "tolerance": tolerance}
        # A server without usage (its output tokens counted from logprobs or its
        # tokenizer) gives no prompt count: nothing to hold its counter against.
        no_prompts = counter == "vllm:prompt_tokens_total" and client.get("prompt_unknown")
        if server is None or no_prompts:
            why = (f"{client['prompt_unknown']:g} completed measured requests reported no "
                   "usage.prompt_tokens, so the client has no prompt count" if no_prompts
                   else "the server exposes no such counter" if scraped
                   else "no /metrics scrape before and after the window")
            rows.append({**base, "relative_error": None, "status": "no counter",
                         "detail": f"{counter}: not reconciled ({why})"})
            continue
        if clean:
            error = abs(server - value) / max(value, 1.0)
            status = "match" if tolerance is None or error <= tolerance else "mismatch"
        else:
            error = max(0.0, (value - server) / max(value, 1.0))
            status = "lower bound"
        sign = (server - value) / max(value, 1.0)
        rows.append({**base, "relative_error": error, "status": status,
                     "detail": f"{counter} delta {server:g} vs {meaning} {value:g} "
                               f"({sign:+.1%})" + ("" if clean else
                                                   "; failed/unresolved requests make the "
                                                   "client count a lower bound")})
    return rows


def reconcile_run(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Compute and store (replacing earlier results) the run's reconciliations."""
    windows = con.execute("SELECT * FROM windows WHERE run_id = ?", [run_id]).df()
    client = {window_id: {"vllm:generation_tokens_total": generation,
                          "vllm:prompt_tokens_total": prompt,
                          "vllm:request_success_total": success,
                          "prompt_unknown": prompt_unknown}
              for window_id, generation, prompt, success, prompt_unknown
              in con.execute(_CLIENT_VALUES_SQL, [run_id]).fetchall()}
    metrics = con.execute(
        "SELECT m.window_id, m.phase, m.name, m.labels, m.value FROM server_metrics m "
        "JOIN windows w USING (window_id) WHERE w.run_id = ? AND m.name IN (?, ?, ?)",
        [run_id, *COUNTERS]).df()
    rows = []
    for _, window in windows.iterrows():
        rows += _reconcile(window, client.get(window["window_id"], _NO_REQUESTS),
                           metrics[metrics["window_id"] == window["window_id"]])
    frame = pd.DataFrame(rows, columns=["window_id", "run_id", "counter", "client_value",
                                        "server_delta", "relative_error", "tolerance",
                                        "status", "detail"])
    if not frame.empty:
        con.execute("DELETE FROM reconciliations WHERE run_id = ?", [run_id])
        con.register("incoming_reconciliations", frame)
        try:
            con.execute("INSERT INTO reconciliations SELECT * FROM incoming_reconciliations")
        finally:
            con.unregister("incoming_reconciliations")
    return frame
