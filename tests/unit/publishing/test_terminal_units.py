"""Issue #43, item 4: the terminal shows latencies in ms, as the report and the page do;
the warehouse and the exports keep seconds (SI)."""

from __future__ import annotations

import pandas as pd

from benchledger.publishing.report import format_entries

ROW = {"arm": "a", "workload": "code", "metric": "ttft", "phase": "prefill",
       "scope": "single_stream", "concurrency": 1, "numerator": None, "value": 0.005533,
       "unit": "s", "ci95_low": 0.0051, "ci95_high": 0.0060, "n_requests": 30,
       "n_restarts": 3, "restart_mean": 0.0055, "restart_ci95_low": 0.0049,
       "restart_ci95_high": 0.0061, "restart_effect": False, "population": "all_submitted",
       "drain_status": "complete", "counter_check": "reconciled"}


def test_a_latency_is_shown_in_ms_with_its_intervals():
    frame = pd.DataFrame([ROW, {**ROW, "metric": "decode_rate", "unit": "tok/s",
                                "value": 180.25, "ci95_low": 170.0, "ci95_high": 190.0,
                                "restart_mean": 181.0, "restart_ci95_low": 175.0,
                                "restart_ci95_high": 187.0}])
    text = format_entries(frame)
    ttft, decode = (line for line in text.splitlines()[1:])
    assert "5.5 ms" in ttft and "[5.1, 6.0]" in ttft and "5.5 [4.9, 6.1]" in ttft, text
    assert "0.005533" not in text and " s " not in ttft, text
    assert "180.2 tok/s" in decode and "[170.0, 190.0]" in decode, text  # other units as they are
    assert frame["value"].iloc[0] == 0.005533 and frame["unit"].iloc[0] == "s"  # not changed
