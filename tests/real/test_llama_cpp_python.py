"""The optional real-server tier (`make test-real`): a sweep against llama-cpp-python's
OpenAI-compatible server, a server nobody here wrote, through the same pipeline as every
other sweep (real Airflow `dag.test()`, real DuckDB file, the arm's `command` starting and
stopping the server per restart).

The model is a tiny random GGUF written locally by tests/real/tiny_gguf.py (nothing is
downloaded); it never samples its end-of-sequence token, so every request generates exactly
max_tokens tokens, which is what the counts below are checked against.

What llama-cpp-python 0.3.36's server does that the pipeline must cope with, each checked:
no `/health` (readiness falls back to `/v1/models`), no `/metrics` (nothing to reconcile,
recorded so), `stream_options.include_usage` ignored (a `usage` arm stops at the warm-up
naming the options), one logprobs entry per streamed token (token_count = "logprobs"
counts them), `POST /extras/tokenize` (token_count = "server_tokenizer", calibrated
against non-streamed usage), and, at its default `interrupt_requests`, a stream in
progress ended with `[DONE]` and no finish_reason when another request arrives (at
concurrency 4: failed as cut, never completed; issue #39).

`make test-real` builds the server's virtualenv (.venv-real) and sets
BENCHLEDGER_LLAMA_PYTHON to its interpreter; without it these tests are skipped.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import NO_CLOCK, command_arm, defaults, sweep

LLAMA_PYTHON = os.environ.get("BENCHLEDGER_LLAMA_PYTHON")
pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not LLAMA_PYTHON, reason="the real-server tier: run `make test-real`"),
]
HERE = Path(__file__).resolve().parent
MAX_TOKENS = 32
REQUESTS = 15
# The arm `cut` runs the server as it starts by default (interrupt_requests on) at this
# concurrency: each arriving request ends the stream in progress with [DONE] (issue #39).
CUT_CONCURRENCY = 4


def llama_sweep(python: str, model: Path) -> dict:
    server = (f"{python} -m llama_cpp.server --model {model} --model_alias tiny "
              "--host 127.0.0.1 --port {port} --n_ctx 1024 --verbose false")

    def arm(name: str, **keys) -> dict:
        # its server answers HTTP 400 to an X-Request-Id that is not a UUID
        return command_arm(name, server, model="tiny", ready_timeout_s=60,
                           request_id_header=False, **keys)

    return sweep(
        "real-llama-cpp-python",
        [arm("lp", token_count="logprobs"),
         arm("tok", token_count="server_tokenizer", tokenize_path="/extras/tokenize",
             calibration_requests=4),
         arm("use"),
         arm("cut", token_count="logprobs", concurrency=[CUT_CONCURRENCY], restarts=1)],
        sweep={"retries": 0},
        defaults=defaults(requests=REQUESTS, max_tokens=MAX_TOKENS, clock=NO_CLOCK,
                          temperature=0.0),
        workloads=["prose"])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("llama")
    model = workdir / "tiny.gguf"
    subprocess.run([LLAMA_PYTHON, str(HERE / "tiny_gguf.py"), str(model)], check=True,
                   timeout=120)
    terminal = io.StringIO()  # what `benchledger run` prints (failures go to stderr)
    with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(terminal):
        run_id, state, con = run_sweep_text(workdir, llama_sweep(LLAMA_PYTHON, model))
    yield {"run_id": run_id, "state": state, "con": con, "terminal": terminal.getvalue(),
           "data": workdir / "data"}
    con.close()


def rows(run, sql, *params):
    return run["con"].execute(sql, [run["run_id"], *params]).fetchall()


def test_the_server_without_health_became_ready_through_v1_models(run):
    found = rows(run, "SELECT arm, status, ready_probe, server_family FROM restarts "
                      "WHERE run_id = ? AND arm IN ('lp', 'tok') ORDER BY arm, restart_index")
    assert len(found) == 4  # two restarts per measured arm, each its own server process
    for arm, status, probe, family in found:
        assert (status, probe) == ("ok", "/v1/models"), arm
        assert family is None  # no /metrics: no family's counters to reconcile


def test_logprobs_count_every_generated_token_and_publish_labelled(run):
    counts = rows(run, "SELECT r.status, r.token_source, r.output_tokens, "
                       "r.usage_output_tokens, list_sum(r.content_event_tokens), "
                       "list_max(r.content_event_tokens) "
                       "FROM request_records r JOIN windows w USING (window_id) "
                       "WHERE w.run_id = ? AND w.arm = 'lp' AND NOT r.is_warmup")
    assert len(counts) == 2 * REQUESTS
    for status, source, output, usage, per_event, most in counts:
        # the server ignores include_usage; its logprobs list one token per chunk
        assert (status, source, output, usage) == ("completed", "logprobs", MAX_TOKENS, None)
        assert per_event == MAX_TOKENS and most == 1
    published = rows(run, "SELECT metric, token_source FROM published_entries "
                          "WHERE run_id = ? AND arm = 'lp'")
    assert ("decode_rate", "logprobs") in published
    assert ("itl_per_token", "logprobs") in published  # per-event counts: per-token gaps
    assert {source for _, source in published} == {"logprobs"}


def test_server_tokenizer_calibrates_against_usage_and_publishes_labelled(run):
    windows = rows(run, "SELECT w.window_id, w.calibration_compared, "
                        "w.calibration_rel_error, w.reconcile_tolerance "
                        "FROM windows w WHERE w.run_id = ? AND w.arm = 'tok'")
    assert len(windows) == 2
    for window_id, compared, error, tolerance in windows:
        assert compared == 4  # the calibration sample, answered with usage (not streamed)
        # one token per character (tiny_gguf's vocabulary): re-tokenizing gives back
        # exactly the tokens generated, and the gate lets the window's rates through
        assert error == 0.0 and tolerance > 0
        (success,), = run["con"].execute(
            "SELECT success FROM validations WHERE subject = ? "
            "AND expectation = 'tokenizer_calibrated'", [window_id]).fetchall()
        assert success
    counts = rows(run, "SELECT DISTINCT token_source, output_tokens FROM requests r "
                       "JOIN windows w USING (window_id) WHERE w.run_id = ? AND w.arm = 'tok' "
                       "AND NOT r.is_warmup")
    assert counts == [("server_tokenizer", MAX_TOKENS)]  # /extras/tokenize's BOS taken off
    published = rows(run, "SELECT metric, token_source FROM published_entries "
                          "WHERE run_id = ? AND arm = 'tok'")
    assert ("decode_rate", "server_tokenizer") in published
    assert {source for _, source in published} == {"server_tokenizer"}
    assert "itl_per_token" not in {metric for metric, _ in published}  # no per-event counts


def test_a_usage_arm_stops_at_the_warmup_naming_the_two_options(run):
    assert run["state"] == "failed"  # the usage arm could not be measured
    found = rows(run, "SELECT status, error FROM restarts WHERE run_id = ? AND arm = 'use'")
    assert found and all(status == "failed" for status, _ in found)
    for text in ('token_count = "logprobs"', 'token_count = "server_tokenizer"'):
        assert text in found[0][1]
        assert text in run["terminal"]


def test_streams_the_server_cuts_at_concurrency_4_are_failed_and_counted(run):
    """llama-cpp-python's default: each arriving request ends the stream in progress with
    `[DONE]`, no finish_reason, no tokens. Those requests are failed as cut (they were
    `completed` with 0 tokens and the window's success fraction 1.0 was published)."""
    found = rows(run, "SELECT r.status, r.finish_reason, r.error, w.window_id "
                      "FROM request_records r JOIN windows w USING (window_id) "
                      "WHERE w.run_id = ? AND w.arm = 'cut' AND NOT r.is_warmup")
    assert len(found) == REQUESTS
    cut = [f for f in found if f[0] == "failed"]
    assert cut, "at concurrency 4 the server cut no stream (was it started with " \
                "--interrupt_requests False?)"
    for status, finish, error, _ in found:
        if status == "completed":
            assert finish in ("length", "stop")
        else:
            assert status == "failed" and finish is None
            assert error.startswith("stream cut: [DONE] arrived without a finish_reason"), error
    (submitted, completed, failed), = rows(
        run, "SELECT submitted, completed, failed FROM windows WHERE run_id = ? AND arm = 'cut'")
    assert (submitted, failed) == (REQUESTS, len(cut)) and completed == REQUESTS - len(cut)
    fractions = rows(run, "SELECT value FROM published_entries WHERE run_id = ? AND arm = 'cut' "
                          "AND metric = 'success_fraction'")
    assert all(value < 1 for value, in fractions), fractions  # no 1.0 is published
    # the measuring task's progress lines count the cut requests among the failed
    window_id = found[0][3]
    logs = [p.read_text(errors="replace") for p in run["data"].rglob("*.log")]
    done = [line for text in logs for line in text.splitlines()
            if f"progress: {window_id} done:" in line]
    assert done, "no progress line of the window in the task logs"
    assert f"{len(cut)} failed ({len(cut)} cut short by the server)" in done[-1], done[-1]
