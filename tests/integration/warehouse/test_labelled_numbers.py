"""Issue #3 through the real pipeline: the concurrency ladder's scopes, an unfinished
tail kept as rows, and cold vs warm prompts against the simulator's prefix cache."""

from __future__ import annotations

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

SWEEP = sweep(
    "it-labels",
    # single stream, then 8 closed-loop streams
    [simulator_arm("ladder", concurrency=[1, 8]),
     # every 6th request hangs: an unfinished tail at the deadline
     simulator_arm("stall", {"stall_every": 6, "stall_s": 30}, restarts=1, warmup=0,
                   concurrency=[4], drain_timeout_s=1.0)],
    defaults=defaults(requests=16, max_tokens=32),
    # warm: the same prompts again and again; cold: the same prompts behind a unique
    # prefix each
    workloads=["code", {"name": "code-cold", "prompt_set": "code", "prompt_cache": "cold"}])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_id, state, con = run_sweep_text(tmp_path_factory.mktemp("labels"), SWEEP)
    yield run_id, state, con
    con.close()


def rows(con, sql, params):
    return con.execute(sql, params).fetchall()


def test_ladder_publishes_single_stream_per_user_and_aggregate(run):
    run_id, state, con = run
    assert state == "success"
    decode = {(scope, c): value for scope, c, value in rows(
        con, "SELECT scope, concurrency, value FROM published_entries WHERE run_id = ? "
             "AND arm = 'ladder' AND workload = 'code' AND metric = 'decode_rate' "
             "AND statistic = 'mean'", [run_id])}
    assert set(decode) == {("single_stream", 1), ("aggregate", 1), ("per_user", 8),
                           ("aggregate", 8)}
    # T6: eight streams deliver more in total and less to each user than one stream
    assert decode[("aggregate", 8)] > 2 * decode[("per_user", 8)]
    assert decode[("per_user", 8)] < decode[("single_stream", 1)]
    numerators = rows(con, "SELECT DISTINCT numerator FROM published_entries WHERE run_id = ? "
                           "AND arm = 'ladder' AND metric = 'throughput'", [run_id])
    assert sorted(n for n, in numerators) == ["input_plus_output_tokens", "output_tokens"]


def test_stalled_requests_stay_unresolved_rows_and_label_their_entries(run):
    run_id, _, con = run
    windows = rows(con, "SELECT workload, submitted, completed, failed, unresolved, "
                        "drain_status FROM windows WHERE run_id = ? AND arm = 'stall' "
                        "ORDER BY workload", [run_id])
    assert [w[0] for w in windows] == ["code", "code-cold"]  # one restart, c=4
    for _, submitted, completed, failed, unresolved, drain in windows:
        assert unresolved > 0 and drain == "incomplete"
        assert submitted == completed + failed + unresolved == 16
    kept = rows(con, "SELECT count(*) FROM requests r JOIN windows w USING (window_id) "
                     "WHERE w.run_id = ? AND w.arm = 'stall' AND r.status = 'unresolved'",
                [run_id])
    assert kept == [(sum(w[4] for w in windows),)]
    rates = rows(con, "SELECT DISTINCT population, drain_status FROM entries WHERE run_id = ? "
                      "AND arm = 'stall' AND unit = 'tok/s' AND publishable "
                      "AND statistic NOT LIKE 'server_log%'", [run_id])
    assert rates == [("completed_only", "incomplete")]  # never published as if complete


def test_cold_prompts_defeat_the_prefix_cache(run):
    run_id, _, con = run
    cached = dict(rows(con, "SELECT w.workload, max(r.cached_tokens) FROM requests r "
                            "JOIN windows w USING (window_id) WHERE w.run_id = ? "
                            "AND w.arm = 'ladder' AND NOT r.is_warmup GROUP BY w.workload",
                       [run_id]))
    assert cached["code-cold"] == 0 and cached["code"] > 0
    prefixes = rows(con, "SELECT count(DISTINCT prompt_prefix), count(*) FROM requests r "
                         "JOIN windows w USING (window_id) WHERE w.run_id = ? "
                         "AND w.workload = 'code-cold'", [run_id])
    assert prefixes[0][0] == prefixes[0][1]  # every cold request had its own prefix
    prefill = rows(con, "SELECT workload, publishable FROM entries WHERE run_id = ? "
                        "AND arm = 'ladder' AND metric = 'prefill_rate' AND concurrency = 1",
                   [run_id])
    assert dict(prefill) == {"code": False, "code-cold": True}
