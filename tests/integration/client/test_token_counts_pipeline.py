"""Issue #13 through the real pipeline: token counts with a name for where they came from,
and per-token gaps where each event's tokens are known.

One sweep on the simulator, speculative everywhere (several tokens per event), every
request generating exactly max_tokens tokens (the simulator's answers never end early):

- `lp`: the server reports no usage at all; token_count = "logprobs" counts the tokens its
  streamed logprobs list.
- `tok`: streams carry no usage (llama-cpp-python's behaviour) but non-streamed answers do;
  token_count = "server_tokenizer" counts the received text with /extras/tokenize (which
  puts a BOS token in front, as llama-cpp-python's does), calibrated per window.
- `both`: usage and logprobs both reported: the two counts are held together.
- `use`: plain usage, the baseline of the decode rates.
- `nouse`: no usage and token_count left at "usage": stopped at the warm-up with a message
  naming the two other options.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

MAX_TOKENS = 48
SIM = {"speculative": True, "step_ms": 3.0, "speed_spread": 0.0}
SWEEP = sweep(
    "it-tokens",
    [simulator_arm("lp", {**SIM, "usage": False}, token_count="logprobs"),
     simulator_arm("tok", {**SIM, "stream_usage": False}, token_count="server_tokenizer",
                   tokenize_path="/extras/tokenize", calibration_requests=4),
     simulator_arm("both", SIM, token_count="logprobs"),
     simulator_arm("use", SIM),
     simulator_arm("nouse", {**SIM, "usage": False})],
    sweep={"retries": 0},
    defaults=defaults(restarts=1, max_tokens=MAX_TOKENS))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tokens")
    terminal = io.StringIO()  # what `benchledger run` prints (failures go to stderr)
    with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(terminal):
        run_id, state, con = run_sweep_text(workdir, SWEEP)
    yield {"run_id": run_id, "state": state, "con": con, "terminal": terminal.getvalue(),
           "workdir": workdir}
    con.close()


def rows(run, sql):
    return run["con"].execute(sql, [run["run_id"]]).fetchall()


def published(run, arm: str) -> dict:
    """(metric, scope, numerator) -> (value, token_source) of an arm's published means."""
    found = rows(run, f"SELECT metric, scope, numerator, value, token_source "
                      f"FROM published_entries WHERE run_id = ? AND arm = '{arm}' "
                      "AND statistic = 'mean'")
    return {(m, s, n): (v, t) for m, s, n, v, t in found}


def test_logprobs_count_publishes_labelled_entries_with_the_generated_tokens(run):
    counts = rows(run, "SELECT r.token_source, r.output_tokens, r.usage_output_tokens, "
                       "list_sum(r.content_event_tokens), len(r.content_event_tokens), r.chunks "
                       "FROM request_records r JOIN windows w USING (window_id) "
                       "WHERE w.run_id = ? AND w.arm = 'lp' AND NOT r.is_warmup")
    assert len(counts) == 15
    for source, output, usage, per_event, events, chunks in counts:
        # exactly what the simulator generated, from logprobs alone (it sent no usage)
        assert (source, output, usage) == ("logprobs", MAX_TOKENS, None)
        assert per_event == MAX_TOKENS and events == chunks
    # the server's own counter agrees with the client's logprob count, token for token
    (server, client), = rows(run, "SELECT sum(server_delta), sum(client_value) "
                                  "FROM reconciliations JOIN windows w USING (window_id) "
                                  "WHERE w.run_id = ? AND w.arm = 'lp' "
                                  "AND counter LIKE '%generation_tokens%'")
    assert server == client == 15 * MAX_TOKENS
    entries = published(run, "lp")
    assert entries[("decode_rate", "single_stream", "output_tokens")][1] == "logprobs"
    assert {source for _, source in entries.values()} == {"logprobs"}


def test_server_tokenizer_publishes_labelled_entries_with_the_calibration(run):
    (source, total), = rows(run, "SELECT string_agg(DISTINCT r.token_source), sum(r.output_tokens) "
                                 "FROM requests r JOIN windows w USING (window_id) "
                                 "WHERE w.run_id = ? AND w.arm = 'tok' AND NOT r.is_warmup")
    assert (source, total) == ("server_tokenizer", 15 * MAX_TOKENS)
    (token_count, asked, compared, error, worst, special, detail), = rows(
        run, "SELECT token_count, calibration_requests, calibration_compared, "
             "calibration_rel_error, calibration_max_rel_error, tokenizer_special_tokens, "
             "calibration_detail FROM windows WHERE run_id = ? AND arm = 'tok'")
    assert (token_count, asked, compared, error, worst) == ("server_tokenizer", 4, 4, 0.0, 0.0)
    assert special == 1  # /extras/tokenize's BOS, subtracted from every count
    assert f"tokenizer {4 * MAX_TOKENS} vs usage {4 * MAX_TOKENS}" in detail
    (success, found), = rows(run, "SELECT success, found FROM validations v "
                                  "JOIN windows w ON w.window_id = v.subject "
                                  "WHERE w.run_id = ? AND w.arm = 'tok' "
                                  "AND v.expectation = 'tokenizer_calibrated'")
    assert success and "within reconcile_tolerance" in found
    entries = published(run, "tok")
    assert {source for _, source in entries.values()} == {"server_tokenizer"}
    assert ("decode_rate", "single_stream", "output_tokens") in entries
    # the tokenizer knows no per-event counts: no per-token ITL is claimed
    assert not [key for key in entries if key[0] == "itl_per_token"]


def test_usage_arm_without_usage_stops_at_the_warmup_naming_the_options(run):
    assert run["state"] == "failed"
    (status, error), = rows(run, "SELECT status, error FROM restarts "
                                 "WHERE run_id = ? AND arm = 'nouse'")
    assert status == "failed"
    for text in ("no usage for any of the 1 completed warm-up requests",
                 'token_count = "logprobs"', 'token_count = "server_tokenizer"'):
        assert text in error
        assert text in run["terminal"]  # the terminal's failure line says it too
    assert rows(run, "SELECT count(*) FROM windows WHERE run_id = ? AND arm = 'nouse'") == [(0,)]
    assert rows(run, "SELECT count(*) FROM published_entries "
                     "WHERE run_id = ? AND arm = 'nouse'") == [(0,)]
    task_logs = "".join(p.read_text(errors="replace")
                        for p in (run["workdir"] / "data" / "logs").rglob("*.log"))
    assert "not measured: the server reported no usage" in task_logs


def test_logprobs_and_usage_agree_where_both_are_reported(run):
    (n, agree), = rows(run, "SELECT count(*), "
                            "count(*) FILTER (output_tokens = usage_output_tokens) "
                            "FROM requests r JOIN windows w USING (window_id) "
                            "WHERE w.run_id = ? AND w.arm = 'both' AND NOT r.is_warmup "
                            "AND r.token_source = 'logprobs'")
    assert n == agree == 15
    (success,), = rows(run, "SELECT success FROM validations v JOIN windows w "
                            "ON w.window_id = v.subject WHERE w.run_id = ? AND w.arm = 'both' "
                            "AND v.expectation = 'logprobs_match_usage'")
    assert success


def test_itl_per_token_spreads_each_event_gap_over_its_tokens(run):
    """Per request, the mean event gap over the mean per-token ITL is exactly the tokens
    per event after the first: several under speculation, so the two differ by it."""
    per_request = rows(run, """
        SELECT r.request_id, r.itl_per_token_s, avg(g.event_gap_s),
               sum(g.tokens) / count(*), sum(g.tokens * g.itl_per_token_s) / sum(g.tokens)
        FROM requests r JOIN windows w USING (window_id)
        JOIN token_gaps g USING (request_id)
        WHERE w.run_id = ? AND w.arm = 'lp' AND NOT r.is_warmup
        GROUP BY ALL""")
    assert len(per_request) == 15
    factors = []
    for _, itl, mean_gap, tokens_per_event, weighted in per_request:
        assert mean_gap / itl == pytest.approx(tokens_per_event, rel=1e-9)
        assert weighted == pytest.approx(itl, rel=1e-9)  # the view and the column agree
        factors.append(tokens_per_event)
    assert min(factors) > 1.5  # speculation: several tokens per event
    (event_gaps,), = rows(run, "SELECT count(*) FROM event_gaps g JOIN windows w "
                               "USING (window_id) WHERE w.run_id = ? AND w.arm = 'lp'")
    (token_gaps,), = rows(run, "SELECT count(*) FROM token_gaps g JOIN windows w "
                               "USING (window_id) WHERE w.run_id = ? AND w.arm = 'lp'")
    assert token_gaps == event_gaps  # one row per gap, with its tokens
    (usage_rows,), = rows(run, "SELECT count(*) FROM token_gaps g JOIN windows w "
                               "USING (window_id) WHERE w.run_id = ? AND w.arm = 'use'")
    assert usage_rows == 0  # usage gives no per-event counts: no per-token gaps
    entries = published(run, "lp")
    itl, _ = entries[("itl_per_token", "single_stream", None)]
    tpot, _ = entries[("tpot", "single_stream", None)]
    assert itl == pytest.approx(tpot, rel=0.1)  # both per token, unlike the event gap


def test_decode_rates_from_logprobs_agree_with_usage_based_ones(run):
    # The same requests counted both ways give the same rates: `both`'s published decode
    # rate (from logprobs) is the mean of its requests' usage-based rates.
    (from_usage,), = rows(run, "SELECT avg((usage_output_tokens - 1) / "
                               "((t_last_ns - t_first_ns) / 1e9)) "
                               "FROM requests r JOIN windows w USING (window_id) "
                               "WHERE w.run_id = ? AND w.arm = 'both' AND NOT r.is_warmup")
    both = published(run, "both")[("decode_rate", "single_stream", "output_tokens")]
    assert both == (pytest.approx(from_usage, rel=1e-9), "logprobs")
    # Across servers (lp sends no usage at all, use is counted by usage alone) the rates
    # agree within their 95% intervals: the count's source moves no number.
    intervals = dict(rows(run, "SELECT arm, [ci95_low, ci95_high] FROM published_entries "
                               "WHERE run_id = ? AND metric = 'decode_rate' "
                               "AND scope = 'single_stream' AND statistic = 'mean'"))
    (lp_low, lp_high), (use_low, use_high) = intervals["lp"], intervals["use"]
    assert lp_low < use_high and use_low < lp_high


def test_every_export_names_the_token_source(run):
    from benchledger.publishing.export import entries_markdown
    from benchledger.publishing.read import published_entries

    frame = published_entries(run["con"], run["run_id"])
    assert set(frame["token_source"]) == {"usage", "logprobs", "server_tokenizer"}
    markdown = entries_markdown(frame, run["run_id"])
    assert "| tokens from |" in markdown and "| server_tokenizer |" in markdown
    assert "token_source" in frame.to_csv(index=False).splitlines()[0]  # entries.csv, .json
