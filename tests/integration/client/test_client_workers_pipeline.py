"""Issue #21 through the real pipeline: one sweep measured with the client's streams on one
event loop and spread over two worker processes gives the same rows, the same accounting,
the same counter reconciliation and the same entries; only the timestamps differ.

The sweep runs at concurrency 4 (a window never has more workers than streams, so the
demo and the fault suite, at concurrency 1, are measured by one loop whatever
client_workers says). Its arms count tokens three ways: the server's usage, its streamed
logprobs and its tokenizer after the window (which the parent counts, from the records the
workers sent back).
"""

from __future__ import annotations

import contextlib
import io

import pytest

from benchledger.warehouse.metrics import REQUEST_METRICS
from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

SIM = {"speculative": True, "step_ms": 3.0, "speed_spread": 0.0}


def workers_sweep(workers: int) -> dict:
    return sweep(
        f"it-workers-{workers}",
        [simulator_arm("use", SIM),
         simulator_arm("lp", {**SIM, "usage": False}, token_count="logprobs"),
         simulator_arm("tok", {**SIM, "stream_usage": False}, token_count="server_tokenizer",
                       tokenize_path="/extras/tokenize", calibration_requests=2)],
        sweep={"retries": 0},
        defaults=defaults(requests=16, warmup=4, restarts=1, max_tokens=64, concurrency=[4],
                          client_workers=workers,
                          clock_interval_s=0.1))  # the measured part lasts about a second


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for workers in (1, 2):
        workdir = tmp_path_factory.mktemp(f"workers{workers}")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run_id, state, con = run_sweep_text(workdir, workers_sweep(workers))
        out[workers] = (run_id, state, con)
    yield out
    for _, _, con in out.values():
        con.close()


def query(runs, workers: int, sql: str) -> list[tuple]:
    run_id, _, con = runs[workers]
    return con.execute(sql, [run_id]).fetchall()


def test_both_runs_succeed_with_the_workers_they_were_given(runs):
    for workers in (1, 2):
        assert runs[workers][1] == "success"
        assert query(runs, workers, "SELECT DISTINCT client_workers FROM windows "
                                    "WHERE run_id = ?") == [(workers,)]


def test_rows_and_accounting_are_the_same(runs):
    rows_sql = """
        SELECT w.arm, r.seq, r.is_warmup, r.status, r.error, r.output_tokens, r.token_source,
               r.usage_output_tokens, r.prompt_tokens, r.chunks, r.finish_reason,
               len(r.content_event_ns) = r.chunks, r.content_event_tokens
        FROM request_records r JOIN windows w USING (window_id)
        WHERE w.run_id = ? ORDER BY ALL"""
    one, two = query(runs, 1, rows_sql), query(runs, 2, rows_sql)
    assert len(one) == 3 * (16 + 4) and one == two
    counts_sql = """SELECT arm, submitted, completed, failed, unresolved, warmup_submitted,
                           drain_status, token_count, calibration_compared,
                           calibration_rel_error
                    FROM windows WHERE run_id = ? ORDER BY arm"""
    assert query(runs, 1, counts_sql) == query(runs, 2, counts_sql)


def test_the_counters_reconcile_the_same(runs):
    sql = """SELECT w.arm, c.quantity, c.server_delta, c.client_value, c.relative_error
             FROM reconciliations c JOIN windows w USING (window_id)
             WHERE w.run_id = ? ORDER BY ALL"""
    one = query(runs, 1, sql)
    assert one and one == query(runs, 2, sql)
    assert all(error == 0 for *_, error in one if error is not None)


SECONDS = {metric.metric for metric in REQUEST_METRICS if metric.unit == "s"}


def test_the_entries_are_the_same(runs):
    """The same entries, labels and verdicts; counts exact; timing values close (each run
    is its own measurement of a simulator with no speed spread)."""
    # The server's own log lines come every 0.25 s whatever the client does: how many fall
    # in a window of about a second is not the client's to keep the same.
    sql = """SELECT arm, metric, statistic, scope, numerator, population, token_source,
                    n_completed, publishable, value
             FROM entries WHERE run_id = ? AND metric NOT LIKE 'server_log%' ORDER BY ALL"""
    one = {row[:-1]: row[-1] for row in query(runs, 1, sql)}
    two = {row[:-1]: row[-1] for row in query(runs, 2, sql)}
    assert one.keys() == two.keys() and len(one) > 30
    assert any(key[-1] for key in one)  # something published
    for key, value in one.items():
        other = two[key]
        if value is None or other is None:
            assert value == other, key
        elif key[1] in ("tokens_per_chunk", "mean_acceptance_length", "completion_fraction",
                        "success_fraction", "success_rate"):
            assert value == pytest.approx(other), key
        elif key[1] in SECONDS:
            # A latency of a few milliseconds, measured twice on a busy 2-core machine:
            # one time slice lost by either run (up to ~20 ms under load) doubles a 12 ms
            # TTFT. A tail statistic of 16 requests (p90, p99, max) is one or two requests'
            # value, so two lost slices set it (seen: 15 vs 38 ms, and 16 vs 70 ms, in
            # loaded CI runs). What the workers could get wrong (a stamp taken in the wrong
            # process, a request submitted a window late) shifts it by far more than that.
            slack = 0.02 if key[2] in ("p50", "mean", "median") else 0.1
            assert 0.5 < value / other < 2 or abs(value - other) < slack, (key, value, other)
        else:  # a rate: the same server, measured twice
            assert 0.5 < value / other < 2, (key, value, other)

