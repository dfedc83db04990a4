"""usage_plausible under hostile usage reports (hypothesis): any int64 count, NULL, huge,
negative, in any mix, on any request status and token source. The gate's verdict per
request equals an exact integer reference, whatever float64 does to counts above 2**53
(Arrow hands nullable integer columns to pandas as float64), and the gate never raises.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from benchledger.expectations import gate
from benchledger.expectations.gate import run_gate
from benchledger.rules import MAX_PROMPT_TOKENS, USAGE_PLAUSIBLE

INT64 = st.integers(-(2**63), 2**63 - 1)
EDGES = st.sampled_from([0, 1, 8, 128, 2**24, 2**24 + 1, 2**31 - 1, 2**53, 2**53 + 1,
                         10**9, -1, -(2**63), 2**63 - 1])
COUNT = st.one_of(st.none(), EDGES, INT64)
REQUEST = st.fixed_dictionaries({
    "status": st.sampled_from(["completed", "completed", "failed", "unresolved"]),
    "token_source": st.sampled_from(["usage", "usage", "missing"]),
    "max_tokens": st.one_of(st.integers(1, 2**31 - 1), st.sampled_from([8, 128])),
    "output_tokens": COUNT, "prompt_tokens": COUNT, "cached_tokens": COUNT,
})


def reference(r: dict) -> str | None:
    """The rule with exact Python integers: None where it does not apply."""
    if r["status"] != "completed" or r["token_source"] != "usage":
        return None
    o, m, p, c = r["output_tokens"], r["max_tokens"], r["prompt_tokens"], r["cached_tokens"]
    checks = [("output_tokens NULL", o is None),
              ("output_tokens below 0", o is not None and o < 0),
              ("output_tokens above max_tokens", o is not None and o > m),
              ("prompt_tokens NULL", p is None),
              ("prompt_tokens below 0", p is not None and p < 0),
              (f"prompt_tokens above {MAX_PROMPT_TOKENS}",
               p is not None and p > MAX_PROMPT_TOKENS),
              ("cached_tokens below 0", c is not None and c < 0),
              ("cached_tokens above prompt_tokens", None not in (c, p) and c > p)]
    return next((reason for reason, broken in checks if broken), "plausible")


def as_gate_reads_it(requests: list[dict]) -> pd.DataFrame:
    """The frame validate.gate_requests hands over: through Arrow, int64 columns."""
    rows = [{"request_id": f"q{i}", "window_id": f"w{i % 3}", "temperature": 0.0,
             "ttft_s": 0.1, "e2e_s": 1.0, **r} for i, r in enumerate(requests)]
    schema = pa.schema([("request_id", pa.string()), ("window_id", pa.string()),
                        ("temperature", pa.float64()), ("ttft_s", pa.float64()),
                        ("e2e_s", pa.float64()), ("status", pa.string()),
                        ("token_source", pa.string()), ("max_tokens", pa.int32()),
                        ("output_tokens", pa.int64()), ("prompt_tokens", pa.int64()),
                        ("cached_tokens", pa.int64())])
    return pa.Table.from_pylist(rows, schema=schema).to_pandas()


@given(st.lists(REQUEST, min_size=1, max_size=30))
def test_each_verdict_equals_the_exact_reference(requests):
    frame = gate.prepare("measured_requests", as_gate_reads_it(requests))
    assert list(frame["completed_usage_check"]) == [reference(r) for r in requests]


@settings(max_examples=15)  # each example is a real GX validation (~0.3 s)
@given(st.lists(REQUEST, min_size=1, max_size=12))
def test_the_gate_fails_a_window_exactly_when_a_request_is_implausible(requests):
    frame = as_gate_reads_it(requests)
    windows = pd.DataFrame({"window_id": ["w0", "w1", "w2"], "submitted": 4, "completed": 4,
                            "failed": 0, "unresolved": 0, "min_requests": 1})
    restarts = pd.DataFrame({"restart_id": ["r0"], "status": ["ok"]})
    results = {r.subject: r for r in run_gate(restarts, windows, frame)
               if r.expectation == USAGE_PLAUSIBLE.name}
    for window in ("w0", "w1", "w2"):
        verdicts = [reference(r) for i, r in enumerate(requests) if f"w{i % 3}" == window]
        bad = [v for v in verdicts if v not in (None, "plausible")]
        judged = [v for v in verdicts if v is not None]
        assert results[window].success is (not bad)
        assert results[window].found.startswith(
            f"{len(bad)} of {len(judged)} completed rows with usage implausible")
