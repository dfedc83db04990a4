"""Answers delivered whole in one read are not measured streams (issue #22, item 9).

A proxy that buffers whole responses, or compression without flushes, hands the client the
whole answer in one network read: every content event gets one stamp, so what would be a
TTFT is the time to the whole answer and the decode span is zero. Synthetic windows written
by the project's own writers, loaded, gated and derived as the pipeline does it: such a
request has no TTFT, prefill rate, decode rate, TPOT or ITL (rate_withheld says why, its
e2e time stays); a window where more than max_burst_fraction of the requests with 2 or more
content events arrived that way fails streams_not_buffered, whose effect blocks every
per-request timing entry resting on it and its aggregate decode rate (a span from the first
token's stamp to the last's), naming it; its throughput, counts and fractions publish.
"""

from __future__ import annotations

import pytest

from benchledger.raw.layout import RunLayout
from benchledger.rules import STREAMS_NOT_BUFFERED
from benchledger.warehouse.metrics import REQUEST_METRICS
from tests.sweeps import NO_CLOCK, simulator_arm, sweep
from tests.synthetic import RUN_ID, derived_warehouse, request_row, write_synthetic_run

N = 10
TIMING_METRICS = {spec.metric for spec in REQUEST_METRICS if spec.timing}
ONE_READ = [0.0] * 19  # 19 events after the first, all in the first one's read
SPREAD = [0.05 * (j + 1) for j in range(19)]  # one every 50 ms


def buffered_sweep() -> dict:
    return sweep("buffered", [simulator_arm(arm, model="m")
                              for arm in ("streamed", "buffered", "few")],
                 defaults={"requests": N, "restarts": 1, **NO_CLOCK})


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("buffered")
    layout = RunLayout(tmp_path / "data", RUN_ID)
    one_read_of = {"streamed": set(), "buffered": set(range(N)), "few": {4}}
    windows = {}
    for arm, one_read in one_read_of.items():
        wid = layout.window_id(arm, 0, "code", 1)
        rows = [request_row(wid, i, tokens=40, ttft_s=0.2,
                            reads=ONE_READ if i in one_read else SPREAD) for i in range(N)]
        # cold prompts: the prefill rate publishes unless a rule blocks it
        windows[(arm, 0, "code")] = (rows, {"prompt_cache": "cold"})
    write_synthetic_run(tmp_path, buffered_sweep(), windows)
    con = derived_warehouse(layout.run_dir)
    yield con, layout
    con.close()


def entries(con, arm):
    frame = con.execute("SELECT * FROM current_entries WHERE arm = ?", [arm]).df()
    return {(e.metric, e.scope, e.statistic): e for e in frame.itertuples()}


def test_a_request_delivered_in_one_read_has_no_stream_times_and_says_why(warehouse):
    con, _ = warehouse
    rows = con.execute("SELECT seq, delivered_in_one_read, ttft_s, prefill_tok_s, "
                       "decode_tok_s, tpot_s, e2e_s, rate_withheld FROM requests "
                       "WHERE window_id LIKE '%/few/%' ORDER BY seq").fetchall()
    for seq, one_read, ttft, prefill, decode, tpot, e2e, withheld in rows:
        if seq == 4:
            assert one_read is True
            assert e2e == pytest.approx(0.2 + 0.1)  # submission to the stream's end: kept
            assert (ttft, prefill, decode, tpot) == (None, None, None, None)
            assert withheld == ("one read: all 20 content events arrived in one network "
                                "read (delivered whole, not streamed): no TTFT, prefill "
                                "rate, decode rate, TPOT or ITL")
        else:
            assert one_read is False and withheld is None
            assert e2e == pytest.approx(0.2 + 0.95 + 0.1)
            assert ttft == pytest.approx(0.2) and decode == pytest.approx(39 / 0.95)


def test_a_buffered_window_fails_streams_not_buffered_naming_what_was_seen(warehouse):
    con, layout = warehouse
    results = dict(((s, (ok, e, f)) for s, ok, e, f in con.execute(
        "SELECT subject, success, expected, found FROM validations WHERE expectation = ?",
        [STREAMS_NOT_BUFFERED.name]).fetchall()))
    expected = ("at most 10% of the completed measured requests with 2 or more content "
                "events arrived whole in one network read (max_burst_fraction 0.1)")
    assert results[layout.window_id("buffered", 0, "code", 1)] == (
        False, expected, "delivered in one read: 10 of 10 arrived whole in one read (100%): "
                         "a proxy that buffers, or compression without flushes; their TTFT "
                         "is the whole answer's time and their decode span 0")
    assert results[layout.window_id("few", 0, "code", 1)] == (
        True, expected, "1 of 10 arrived whole in one read (10%)")
    assert results[layout.window_id("streamed", 0, "code", 1)] == (
        True, expected, "0 of 10 arrived whole in one read (0%)")


def test_its_timing_entries_are_blocked_and_its_aggregates_publish(warehouse):
    con, _ = warehouse
    by_label = entries(con, "buffered")
    # per-request timing metrics, and the aggregate decode rate (a window metric whose span
    # runs from the window's first token to its last)
    timing = {key: e for key, e in by_label.items() if key[0] in TIMING_METRICS}
    assert {key[0] for key in timing} >= {"ttft", "decode_rate", "tpot", "e2e_latency",
                                          "prefill_rate", "e2e_rate"}
    assert ("decode_rate", "aggregate", "mean") in timing
    for key, e in timing.items():
        assert not e.publishable and STREAMS_NOT_BUFFERED.name in e.blocked_by, key
    for key in [("throughput", "aggregate", "mean"), ("success_fraction", "aggregate", "mean"),
                ("tokens_per_chunk", "single_stream", "mean")]:
        assert by_label[key].publishable, (key, by_label[key].blocked_by)
    # the operator's view: one block per entry, naming the window and what was seen
    found = {f for f, in con.execute(
        "SELECT DISTINCT b.found FROM entry_blocks b JOIN entries e USING (entry_id) "
        "WHERE b.rule = ? AND e.arm = 'buffered'", [STREAMS_NOT_BUFFERED.name]).fetchall()}
    assert found == {"delivered in one read: 10 of 10 arrived whole in one read (100%): a "
                     "proxy that buffers, or compression without flushes; their TTFT is the "
                     "whole answer's time and their decode span 0"}


def test_streamed_windows_publish_their_ttft_from_their_streamed_requests(warehouse):
    con, _ = warehouse
    for arm, n in (("streamed", N), ("few", N - 1)):
        ttft = entries(con, arm)[("ttft", "single_stream", "mean")]
        assert ttft.publishable and ttft.value == pytest.approx(0.2), arm
        assert ttft.n_requests == n, arm  # the one-read request has no TTFT
