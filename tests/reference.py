"""Row-by-row references for what the pipeline computes set-based (the tests hold the two
together): here, what the client counted in a window, over a pandas frame of its requests,
as warehouse/reconcile.py's SQL sums it for a whole run."""

from __future__ import annotations

import pandas as pd

from benchledger.warehouse.reconcile import reconcile_window


def client_values(requests: pd.DataFrame) -> dict[str, float]:
    """The client's counts of one window's measured requests (reconcile.NO_REQUESTS' keys)."""
    measured = requests[~requests["is_warmup"].astype(bool)]
    prompt = measured["prompt_tokens"]
    cached = (measured["cached_tokens"] if "cached_tokens" in measured
              else pd.Series(float("nan"), index=measured.index))
    return {
        "output_tokens": float(measured["output_tokens"].fillna(0).sum()),
        "prompt_tokens": float(prompt.fillna(0).sum()),
        "uncached_prompt_tokens": float((prompt.fillna(0) - cached.fillna(0)).sum()),
        "completed": float((measured["status"] == "completed").sum()),
        "cached_unknown": float((prompt.notna() & cached.isna()).sum()),
        "prompt_unknown": float(((measured["status"] == "completed") & prompt.isna()).sum()),
    }


def reconcile_requests(window: pd.Series, requests: pd.DataFrame, metrics: pd.DataFrame,
                       family: str | None = None) -> list[dict]:
    """warehouse.reconcile.reconcile_window over a window's request rows; `family`
    defaults to the window's server_family."""
    return reconcile_window(window, client_values(requests), metrics,
                            family or window.get("server_family"))
