"""Issue #21 through the real pipeline: a ruler that knows its own error (trap T17).

One sweep, run the way a user runs it (`benchledger run`'s code, Airflow in a child
process, DuckDB):

- `calm` and `starved`: the same simulator. `starved` is measured by a client whose event
  loop a hook keeps busy 20 ms out of every 25 (tests/hooks/starve_client, on PYTHONPATH
  for every process of the run): its lag columns show it, its per-request timing entries
  are blocked by client_lag_within_bound naming the lag, and its aggregate throughput
  still publishes, labelled with the lag.
- `fewbursts` and `manybursts`: tests/faults/fault_server.py in mode stall-burst, a server
  whose API stalls and then sends a whole answer in one write (request 5 of `fewbursts`,
  every third of `manybursts`); its clean answers stream one token every 5 ms. The burst
  requests have no decode rate (NULL, with the reason), the windows count them, and the
  published decode rate rests on the spread requests only, near the server's true speed;
  where a third of the requests are bursts the decode entries are blocked, naming how many.
  The first event and the rest of a burst are two writes right after each other: the
  client often gets them in one read, and then the request was delivered whole (issue #22):
  it has no TTFT either, and a window where more than a tenth of the requests came so
  blocks its timing entries (streams_not_buffered).
"""

from __future__ import annotations

import contextlib
import io
import shlex
import sys
from pathlib import Path

import pytest

from benchledger.client.ruler import PROBE_PERIOD_S
from tests.conftest import run_sweep_text
from tests.sweeps import HTTP_CLOCK, NO_CLOCK, command_arm, defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
HOOK = REPO / "tests" / "hooks" / "starve_client"
FAULT_SERVER = REPO / "tests" / "faults" / "fault_server.py"
REQUESTS = 15
# fault_server.py: 8 one-token events, EVENT_GAP_S = 5 ms apart: at most 200 tok/s decoding
TRUE_DECODE_TOK_S = 200.0
EVENTS = 8
# A measured rate may pass the server's by a little: the client stamps an event when it
# reads it, and a first event read a time slice late shortens the decode span (a fresh-clone
# CI saw 200.26). A burst, the trap these tests are about, reads as thousands of tok/s.
AT_MOST_DECODE_TOK_S = 1.1 * TRUE_DECODE_TOK_S


def fault_arm(name: str, *selection: str) -> dict:
    # a 20 ms first event (a prefill): the smallest quantity measured, whose tenth bounds
    # the client's lag; the stream after it is what the bursts are about
    argv = [sys.executable, str(FAULT_SERVER), "--port", "{port}", "--mode", "stall-burst",
            "--first-event-ms", "20", *selection]
    command = " ".join(part if part == "{port}" else shlex.quote(part) for part in argv)
    return command_arm(name, command, model="fault-model", **NO_CLOCK)


def sim_arm(name: str) -> dict:
    return simulator_arm(name, {"step_ms": 3.0, "speed_spread": 0.0}, **HTTP_CLOCK)


SWEEP = sweep("it-ruler", [sim_arm("calm"), sim_arm("starved"),
                           fault_arm("fewbursts", "--nth", "5"),
                           fault_arm("manybursts", "--every", "3")],
              sweep={"retries": 0},
              defaults=defaults(requests=REQUESTS, restarts=1, max_tokens=64, clock=None,
                                concurrency=[1], client_workers=1))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ruler")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BENCHLEDGER_TEST_STARVE", "starved")
        patch.setenv("PYTHONPATH", str(HOOK))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run_id, state, con = run_sweep_text(workdir, SWEEP)
    yield {"run_id": run_id, "state": state, "con": con}
    con.close()


def rows(run, sql: str) -> list[tuple]:
    return run["con"].execute(sql, [run["run_id"]]).fetchall()


def window(run, arm: str) -> dict:
    cursor = run["con"].execute("SELECT * FROM windows WHERE run_id = ? AND arm = ?",
                                [run["run_id"], arm])
    names = [d[0] for d in cursor.description]
    (values,), = [cursor.fetchall()]
    return dict(zip(names, values, strict=True))


def entries(run, arm: str) -> dict:
    """(metric, statistic, scope, numerator) -> (value, publishable, blocked_by, lag, n_burst)."""
    found = rows(run, f"""SELECT metric, statistic, scope, numerator, value, publishable,
                                 blocked_by, client_lag_p99_ms, n_burst
                          FROM entries WHERE run_id = ? AND arm = '{arm}'""")
    return {tuple(r[:4]): r[4:] for r in found}


def test_the_run_measured_every_arm(run):
    assert rows(run, "SELECT arm, completed FROM windows WHERE run_id = ? ORDER BY arm") == \
        [(arm, REQUESTS) for arm in ("calm", "fewbursts", "manybursts", "starved")]


def test_the_starved_clients_lag_is_in_its_window(run):
    calm, starved = window(run, "calm"), window(run, "starved")
    assert calm["client_workers"] == starved["client_workers"] == 1
    assert calm["client_lag_p50_ms"] < 1 < 2 < starved["client_lag_p50_ms"], \
        (calm["client_lag_p50_ms"], starved["client_lag_p50_ms"])
    assert starved["client_lag_p99_ms"] > 10
    # the hook spins for 20 ms of every 25 of wall time: alone on a core that is 0.7-0.8 of
    # the window, on a machine loaded four processes to a core about a quarter (CI saw 0.24);
    # the calm client idles on its one stream (about 0.03)
    assert starved["client_cpu_share"] > 3 * calm["client_cpu_share"], \
        (calm["client_cpu_share"], starved["client_cpu_share"])
    assert calm["client_cpu_share"] < 0.3
    assert starved["bunched_event_fraction"] > calm["bunched_event_fraction"]


def test_the_starved_windows_timing_entries_are_blocked_naming_the_lag(run):
    (success, expected, found), = rows(run, """
        SELECT success, expected, found FROM validations v JOIN windows w
          ON w.window_id = v.subject
        WHERE w.run_id = ? AND w.arm = 'starved' AND v.expectation = 'client_lag_within_bound'""")
    assert not success
    assert "client lag" in expected and "ms" in found, (expected, found)
    starved = entries(run, "starved")
    for key in (("ttft", "p50", "single_stream", None), ("ttft", "p99", "single_stream", None),
                ("tpot", "mean", "single_stream", None),
                ("e2e_latency", "p90", "single_stream", None),
                ("decode_rate", "mean", "single_stream", "output_tokens")):
        value, publishable, blocked_by, *_ = starved[key]
        assert value is not None and not publishable, key
        assert "client_lag_within_bound" in blocked_by, (key, blocked_by)
    # the aggregate rate's error is the lag over the whole window: it publishes, labelled
    value, publishable, blocked_by, lag, _ = starved[("throughput", "mean", "aggregate",
                                                      "output_tokens")]
    assert publishable and value > 0 and lag == window(run, "starved")["client_lag_p99_ms"]
    calm = entries(run, "calm")
    assert calm[("ttft", "p50", "single_stream", None)][1], "the calm client's entries publish"


def test_burst_requests_have_no_decode_rate_and_say_why(run):
    found = rows(run, """
        SELECT w.arm, r.seq, r.decode_tok_s, r.tpot_s, r.rate_withheld, r.ttft_s,
               coalesce(rr.client_lag_ms, w.client_lag_p99_ms) / 1e3 AS lag_s
        FROM requests r JOIN windows w USING (window_id)
        JOIN request_records rr USING (request_id)
        WHERE w.run_id = ? AND NOT r.is_warmup AND w.arm LIKE '%bursts' ORDER BY ALL""")
    # fault server request numbers: 1 is the warm-up, measured request m{n-2}
    bursts = {"fewbursts": {5 - 2}, "manybursts": {n - 2 for n in range(3, REQUESTS + 2, 3)}}
    for arm, seq, decode, tpot, withheld, ttft, lag_s in found:
        if seq in bursts[arm]:
            assert decode is None and tpot is None, (arm, seq)
            if withheld.startswith("one read: "):  # the first event came with the rest
                assert withheld.startswith("one read: all 8 content events arrived in one "
                                           "network read"), withheld
                assert ttft is None  # its first token's time is the whole answer's
            else:
                assert withheld.startswith("burst: 7 events after the first in "), withheld
                assert ttft is not None  # the first token's time is not a decode span
        else:
            # a spread request's rate is kept, and is as true as the ruler can tell: its
            # first stamp may be late by the lag during it (the row's client_lag_ms) plus
            # one probe period, the longest stall no probe was waiting through
            # (docs/protocol.md, Bursts), shortening the 35 ms span. Fresh-clone CIs read
            # one 4.6 ms late with a lag of 5.2 ms (222 tok/s), and one 1.7 ms late with a
            # lag of 0.44 ms (210 tok/s: a stall between two probes).
            span_s = (EVENTS - 1) / TRUE_DECODE_TOK_S
            assert withheld is None and lag_s < span_s, (arm, seq, withheld, lag_s)
            assert 0.5 * TRUE_DECODE_TOK_S < decode <= (
                (EVENTS - 1) / (span_s - lag_s - PROBE_PERIOD_S)), (arm, seq, decode, lag_s)
    counts = dict(rows(run, "SELECT arm, burst_requests FROM window_bursts "
                            "WHERE run_id = ? ORDER BY arm"))
    assert counts == {"calm": 0, "fewbursts": 1, "manybursts": 5, "starved": counts["starved"]}


def test_published_decode_rates_rest_on_spread_requests_only(run):
    few = entries(run, "fewbursts")
    value, publishable, blocked_by, _, n_burst = few[("decode_rate", "mean", "single_stream",
                                                      "output_tokens")]
    assert publishable and n_burst == 1, blocked_by
    assert 0.5 * TRUE_DECODE_TOK_S < value <= AT_MOST_DECODE_TOK_S
    # what the mean would have been with the burst's rate in it: the trap, a speed the
    # server cannot deliver. (Not "5x the published value": the burst's span is how late
    # the client read the server's second write, microseconds on an idle machine and about
    # 2 ms on a loaded CI one, where the naive mean came to 2.2x; it is above the server's
    # true speed while the client reads that write within 12 ms.)
    (naive,), = rows(run, """
        SELECT avg((r.output_tokens - 1) / ((r.t_last_ns - r.t_first_ns) / 1e9))
        FROM request_records r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.arm = 'fewbursts' AND NOT r.is_warmup""")
    assert naive > AT_MOST_DECODE_TOK_S >= value
    many = entries(run, "manybursts")
    value, publishable, blocked_by, _, n_burst = many[("decode_rate", "mean", "single_stream",
                                                       "output_tokens")]
    assert not publishable and n_burst == 5
    assert "burst_share_bounded" in blocked_by and "5 of 15" in blocked_by, blocked_by
    # the aggregate throughput and TTFT do not rest on per-request decode spans; the TTFT
    # is blocked only where more than a tenth of the answers came whole in one read
    (one_read,), = rows(run, """
        SELECT count_if(r.delivered_in_one_read) FROM requests r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.arm = 'manybursts' AND NOT r.is_warmup""")
    _, publishable, blocked_by, *_ = many[("ttft", "p50", "single_stream", None)]
    assert publishable == (one_read / REQUESTS <= 0.1), (one_read, blocked_by)
    assert publishable or "streams_not_buffered" in blocked_by
    assert many[("throughput", "mean", "aggregate", "output_tokens")][1]
