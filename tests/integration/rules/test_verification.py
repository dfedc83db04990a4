"""Issue #5 through the real pipeline: server counters, server log lines and GPU clocks
checked against what the client received.

- `spec`: two restarts on the simulator, the second on a node stuck at a low SM clock;
- `miscount`: a simulator whose /metrics over-counts generated tokens by 10%;
- `noclock`: a node whose clock cannot be read (require_clock_check = false, labelled)."""

from __future__ import annotations

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

SWEEP = sweep(
    "it-verify",
    [simulator_arm("spec", {"speculative": True, "log_interval_s": 0.25,
                            "low_clock_restarts": [1]}),
     simulator_arm("miscount", {"metrics_generation_scale": 1.1}, restarts=1),
     simulator_arm("noclock", restarts=1, clock_url="{base_url}/no-such-endpoint",
                   require_clock_check=False)],
    defaults=defaults(max_tokens=48, clock_interval_s=0.2))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_id, state, con = run_sweep_text(tmp_path_factory.mktemp("verify"), SWEEP)
    yield run_id, state, con
    con.close()


def q(con, sql, params):
    return con.execute(sql, params).fetchall()


def test_counters_reconcile_for_every_window_of_honest_servers(run):
    run_id, _, con = run
    statuses = q(con, "SELECT w.arm, r.counter, r.status FROM reconciliations r "
                      "JOIN windows w USING (window_id) WHERE w.run_id = ?", [run_id])
    windows = q(con, "SELECT count(*) FROM windows WHERE run_id = ?", [run_id])[0][0]
    assert windows == 4  # spec r0 and r1, miscount r0, noclock r0: one workload each
    assert len(statuses) == 3 * windows  # every window, every counter
    honest = {(arm, status) for arm, _, status in statuses if arm != "miscount"}
    assert honest == {("spec", "match"), ("noclock", "match")}


def test_overcounting_metrics_block_publication_naming_the_counter(run):
    run_id, _, con = run
    (status, client, server), = q(
        con, "SELECT r.status, r.client_value, r.server_delta FROM reconciliations r JOIN "
             "windows w USING (window_id) WHERE w.run_id = ? AND w.arm = 'miscount' AND "
             "r.counter = 'vllm:generation_tokens_total'", [run_id])
    assert status == "mismatch" and server == pytest.approx(1.1 * client, rel=0.01)
    # Every decode_rate entry of the arm is blocked by the counter rule (entry_blocks), and
    # its blocked_by text names the counter and the difference.
    blocks = q(con, "SELECT e.entry_id, e.publishable, e.blocked_by, b.found FROM entries e "
                    "LEFT JOIN entry_blocks b ON b.entry_id = e.entry_id "
                    "AND b.rule = 'generation_tokens_reconcile' WHERE e.run_id = ? AND "
                    "e.arm = 'miscount' AND e.metric = 'decode_rate'", [run_id])
    assert len(blocks) == 2  # single_stream and aggregate
    for _, publishable, text, found in blocks:
        assert not publishable and found is not None
        assert "vllm:generation_tokens_total" in found and "+10.0%" in found
        assert f"generation_tokens_reconcile [{run_id}/miscount/r0/code-c1]" in text


def test_low_clock_restart_is_left_out_while_the_other_publishes(run):
    run_id, _, con = run
    clock = dict(q(con, "SELECT subject, observed FROM validations WHERE run_id = ? AND "
                        "expectation = 'clock_under_load' AND NOT success", [run_id]))
    low = [s for s in clock if s.endswith("/spec/r1")]
    assert low and ">= 0.9 of max" in clock[low[0]]
    # the node (the arm's, "local": it runs on the measuring machine) and the GPU
    assert "found local/gpu0 median 494 MHz of 2520 = 0.196 (" in clock[low[0]]
    (value, restarts, publishable, excluded, check), = q(
        con, "SELECT value, n_restarts, publishable, excluded, clock_check FROM entries "
             "WHERE run_id = ? AND arm = 'spec' AND metric = 'decode_rate' "
             "AND scope = 'single_stream'", [run_id])
    assert publishable and restarts == 1 and check == "checked"
    assert "/spec/r1: clock_under_load" in excluded
    means = q(con, "SELECT m.restart_id FROM entry_restart_means m JOIN entries e "
                   "USING (entry_id) WHERE e.run_id = ? AND e.arm = 'spec' AND "
                   "e.metric = 'decode_rate' AND e.scope = 'single_stream'", [run_id])
    assert [r for r, in means] == [f"{run_id}/spec/r0"]


def test_unreadable_clock_is_unchecked_and_says_so(run):
    run_id, _, con = run
    (publishable, check), = q(con, "SELECT publishable, clock_check FROM entries WHERE "
                                   "run_id = ? AND arm = 'noclock' AND metric = 'decode_rate' "
                                   "AND scope = 'single_stream'", [run_id])
    assert publishable and check == "unchecked (require_clock_check = false)"


def test_acceptance_length_from_counters_matches_tokens_per_chunk(run):
    run_id, _, con = run
    values = dict(q(con, "SELECT metric, value FROM entries WHERE run_id = ? AND arm = 'spec' "
                         "AND metric IN ('mean_acceptance_length', 'tokens_per_chunk') "
                         "AND statistic = 'mean'", [run_id]))
    assert values["tokens_per_chunk"] > 1.5
    assert values["mean_acceptance_length"] == pytest.approx(values["tokens_per_chunk"],
                                                             rel=0.1)
    (warning,), = q(con, "SELECT warning FROM published_entries WHERE run_id = ? AND "
                         "arm = 'spec' AND metric = 'tokens_per_chunk' AND "
                         "statistic = 'mean'", [run_id])
    assert warning.startswith("chunk counting would under-report")


def test_server_log_peak_is_kept_apart_from_the_delivered_rate(run):
    run_id, _, con = run
    rows = dict(q(con, "SELECT statistic, value FROM published_entries WHERE run_id = ? AND "
                       "arm = 'spec' AND metric = 'server_log_generation_throughput'",
                  [run_id]))
    delivered = q(con, "SELECT value FROM published_entries WHERE run_id = ? AND "
                       "arm = 'spec' AND metric = 'throughput' AND "
                       "numerator = 'output_tokens'", [run_id])[0][0]
    assert set(rows) == {"server_log_peak", "server_log_mean"}
    assert rows["server_log_peak"] > delivered
    lines = {kind: counts for kind, *counts in q(
        con, "SELECT kind, count(*), count(generation_tok_s), count(accepted_tok_s) "
             "FROM server_log_lines l JOIN windows w USING (window_id) "
             "WHERE w.run_id = ? AND w.arm = 'spec' GROUP BY kind", [run_id])}
    assert set(lines) == {"throughput", "spec_decode"}  # both kinds of line are kept ...
    (n, generation, accepted), (m, spec_generation, spec_accepted) = (
        lines["throughput"], lines["spec_decode"])
    # ... each value under its own name: accepted drafts never pass for generation
    assert n > 0 and (generation, accepted) == (n, 0)
    assert m > 0 and (spec_generation, spec_accepted) == (0, m)
