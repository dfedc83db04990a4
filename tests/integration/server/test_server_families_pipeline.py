"""Issue #13 through the real pipeline: servers of other families and without /health.

One sweep on the simulator, its /metrics in another server's names:

- `sglang`: SGLang's names, recognised from /metrics when the server is ready;
- `llamacpp`: llama.cpp's server, whose /health answers 404 (ready through /v1/models);
- `tgi`: TGI's names, the arm saying so itself (server_family = "tgi");
- `liar`: llama.cpp's names with a generation counter 10% too high.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

SWEEP = sweep(
    "it-families",
    [simulator_arm("sglang", {"metrics_family": "sglang"}),
     simulator_arm("llamacpp", {"metrics_family": "llamacpp", "health": False}),
     simulator_arm("tgi", {"metrics_family": "tgi"}, server_family="tgi"),
     simulator_arm("liar", {"metrics_family": "llamacpp", "metrics_generation_scale": 1.1})],
    defaults=defaults(requests=6, restarts=1, max_tokens=32, clock_interval_s=0.2))
FAMILIES = {"sglang": "sglang", "llamacpp": "llamacpp", "tgi": "tgi", "liar": "llamacpp"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("families")
    run_id, state, con = run_sweep_text(workdir, SWEEP)
    yield run_id, state, con, workdir
    con.close()


def test_each_restart_records_its_family_and_the_probe_that_found_it_ready(run):
    run_id, state, con, workdir = run
    rows = con.execute("SELECT arm, server_family, ready_probe FROM restarts "
                       "WHERE run_id = ?", [run_id]).fetchall()
    assert {arm: family for arm, family, _ in rows} == FAMILIES
    # the llama.cpp-like server has no /health: /v1/models declared it ready
    assert {arm: probe for arm, _, probe in rows} == {
        "sglang": "/health", "llamacpp": "/v1/models", "tgi": "/health", "liar": "/health"}
    manifests = {path.parent.parent.name: json.loads(path.read_text())
                 for path in Path(workdir, "data").glob("raw/*/*/r0/restart.json")}
    assert manifests["tgi"]["server_family_source"] == "arms.server_family"
    assert manifests["sglang"]["server_family_source"].endswith("/metrics: sglang:* metric names")


def test_every_window_is_reconciled_with_its_familys_own_counters(run):
    run_id, _, con, _ = run
    rows = con.execute("SELECT w.arm, r.quantity, r.counter, r.status FROM reconciliations r "
                       "JOIN windows w USING (window_id) WHERE w.run_id = ?",
                       [run_id]).fetchall()
    counters = {(arm, quantity): (counter, status) for arm, quantity, counter, status in rows}
    assert counters[("sglang", "generation_tokens")] == ("sglang:generation_tokens_total",
                                                         "match")
    assert counters[("sglang", "finished_requests")] == ("sglang:num_requests_total", "match")
    assert counters[("llamacpp", "prompt_tokens")] == ("llamacpp:prompt_tokens_total", "match")
    assert ("llamacpp", "finished_requests") not in counters  # llama.cpp counts none
    assert counters[("tgi", "prompt_tokens")] == ("tgi_request_input_length_sum", "match")
    assert counters[("tgi", "finished_requests")] == ("tgi_request_success_total", "match")
    assert counters[("liar", "generation_tokens")] == ("llamacpp:tokens_predicted_total",
                                                       "mismatch")
    # the warm prompt cache served some prompt tokens, which llama.cpp does not count
    (client, delta), = con.execute(
        "SELECT r.client_value, r.server_delta FROM reconciliations r JOIN windows w "
        "USING (window_id) WHERE w.run_id = ? AND w.arm = 'llamacpp' "
        "AND r.quantity = 'prompt_tokens'", [run_id]).fetchall()
    prompt, cached = con.execute(
        "SELECT sum(prompt_tokens), sum(cached_tokens) FROM request_records r JOIN windows w "
        "USING (window_id) WHERE w.run_id = ? AND w.arm = 'llamacpp' AND NOT r.is_warmup",
        [run_id]).fetchone()
    assert cached > 0 and client == delta == prompt - cached


def test_honest_families_publish_reconciled_and_the_liar_is_blocked(run):
    run_id, _, con, _ = run
    checks = dict(con.execute("SELECT arm, list(DISTINCT counter_check) FROM published_entries "
                              "WHERE run_id = ? GROUP BY arm", [run_id]).fetchall())
    assert checks == {"sglang": ["reconciled"], "llamacpp": ["reconciled"],
                      "tgi": ["reconciled"]}
    (found,), = con.execute(
        "SELECT DISTINCT b.found FROM current_entries e JOIN entry_blocks b USING (entry_id) "
        "WHERE e.run_id = ? AND e.arm = 'liar' AND b.rule = 'generation_tokens_reconcile'",
        [run_id]).fetchall()
    assert found.startswith("llamacpp:tokens_predicted_total delta")
    # (the simulator rounds its scaled cumulative count, warm-up included: about +10%)
    assert float(re.search(r"\(\+([\d.]+)%\)", found).group(1)) == pytest.approx(10, abs=0.5)
