"""Issue #42 through the real pipeline: spec-on made lossy for a fifth of the prompts (the
simulator's `lossy_share`: from a token drawn from the prompt, the rest of the answer comes
from another stream) is twice as fast as spec-off, and its IMPROVEMENT is blocked by
`outputs_equivalent`, naming the prompts and where their answers first differ; lossless
spec-on in the same sweep publishes its improvement. 40 prompts: with the built-in sets'
16, a control that changed none of them still allows up to 21% (its exact 95% bound), and
a fifth would pass unseen."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

PROMPTS = 40
LOSSY_SHARE = 0.2
MAX_TOKENS = 40  # beyond the simulator's latest divergence (token 32): every lossy prompt shows


def equivalence_sweep() -> dict:
    spec = {"speculative": True}
    control = ["spec-on", "spec-on-again"]
    return sweep(
        "it-equivalence",
        [simulator_arm("spec-off", restarts=3),
         simulator_arm("spec-on", spec, restarts=3),
         simulator_arm("spec-on-again", spec, restarts=3),
         simulator_arm("spec-lossy", {**spec, "lossy_share": LOSSY_SHARE}, restarts=3)],
        defaults=defaults(requests=PROMPTS, max_tokens=MAX_TOKENS, concurrency=[4],
                          keep_output_text=True, clock_interval_s=0.1),
        workloads=[{"name": "questions", "dataset": "questions.jsonl"}],
        comparisons=[{"a": "spec-off", "b": "spec-on", "metric": "decode_rate",
                      "control": control},
                     {"a": "spec-off", "b": "spec-lossy", "metric": "decode_rate",
                      "control": control}])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("equivalence")
    with (workdir / "questions.jsonl").open("w") as f:
        for i in range(PROMPTS):
            f.write(json.dumps({"id": f"q{i:02d}",
                                "prompt": f"Question {i}: explain topic number {i} briefly."})
                    + "\n")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_id, state, con = run_sweep_text(workdir, equivalence_sweep())
    yield run_id, state, con
    con.close()


def comparison(run, b: str) -> dict:
    run_id, _, con = run
    frame = con.execute("SELECT * FROM comparisons WHERE run_id = ? AND role = 'ab' "
                        "AND b = ?", [run_id, b]).df()
    assert len(frame) == 1
    return frame.iloc[0].to_dict()


def test_lossless_speculation_publishes_its_improvement(run):
    _, state, _ = run
    assert state == "success"
    ab = comparison(run, "spec-on")
    assert ab["verdict"] == "improvement", ab["reason"]
    assert ab["equivalence_prompts"] == ab["equivalence_identical"] == PROMPTS
    assert ab["control_equivalence_identical"] == ab["control_equivalence_prompts"] == PROMPTS


def test_lossy_speculation_is_no_finding_naming_the_prompts_and_positions(run):
    run_id, _, con = run
    ab = comparison(run, "spec-lossy")
    changed = ab["equivalence_prompts"] - ab["equivalence_identical"]
    assert ab["equivalence_prompts"] == PROMPTS
    # the simulator draws the lossy prompts from their digests: about a fifth
    assert 0.1 * PROMPTS <= changed <= 0.35 * PROMPTS, changed
    # twice as fast or not (a loaded machine may hide it), never an improvement; the
    # reason says the answers differ either way
    assert ab["verdict"] not in ("improvement", "regression"), ab["reason"]
    assert (f"the answers differ: spec-lossy changes the answer of {changed} of {PROMPTS} "
            "questions prompts: q") in ab["reason"], ab["reason"]
    assert ab["reason"].count(" from character ") == min(changed, 5), ab["reason"]
    assert "(outputs_equivalent)" in ab["reason"]
    named = json.loads(ab["equivalence_divergent"])
    assert len(named) == min(changed, 20)
    for d in named:
        assert d["prompt_id"].startswith("q") and d["first_divergent_char"] > 0, d
    # the position is where the kept texts really part
    first = named[0]
    texts = dict(con.execute(
        "SELECT w.arm, any_value(r.answer_text) FROM request_records r JOIN windows w "
        "USING (window_id) WHERE w.run_id = ? AND r.prompt_id = ? AND NOT r.is_warmup "
        "AND w.arm IN ('spec-off', 'spec-lossy') GROUP BY 1",
        [run_id, first["prompt_id"]]).fetchall())
    at = first["first_divergent_char"]
    assert texts["spec-off"][:at] == texts["spec-lossy"][:at]
    assert texts["spec-off"][at] != texts["spec-lossy"][at]
    found, = con.execute("SELECT found FROM validations v JOIN comparisons c "
                         "ON v.subject = c.comparison_id WHERE c.run_id = ? AND c.b = "
                         "'spec-lossy' AND c.role = 'ab' AND v.expectation = "
                         "'outputs_equivalent' AND NOT v.success", [run_id]).fetchone()
    assert f"the A/A control changes 0 of {PROMPTS}" in found, found
    if ab["ci95_low"] > 0:  # the speed difference itself is still measured and said
        assert "its improvement is no finding (outputs_equivalent); it was: the interval " \
            "over restart means excludes 0" in ab["reason"], ab["reason"]
