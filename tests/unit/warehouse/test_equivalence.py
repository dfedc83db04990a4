"""Issue #42: faster and still the same answers. An A/B at temperature 0 whose candidate
changes the answers of more prompts than its A/A control's own divergence allows has no
improvement to claim (rule outputs_equivalent), and says which prompts and where."""

from __future__ import annotations

import hashlib
import json

import pytest
from scipy.stats import binomtest

from benchledger.publishing.read import comparisons
from benchledger.publishing.report import format_comparisons
from benchledger.raw.layout import RunLayout
from benchledger.rules import OUTPUTS_EQUIVALENT
from benchledger.rules.frame import NOT_APPLICABLE
from benchledger.warehouse.compare import derive_comparisons
from tests.sweeps import command_arm, sweep
from tests.synthetic import RUN_ID, derived_warehouse, request_row, write_synthetic_run

PROMPTS = 10
# decode time of each request per arm: fast is twice as fast as base, its twin the same
DECODE_S = {"base": [1.0, 1.02], "fast": [0.5, 0.51], "fast-again": [0.505, 0.5]}


def answer(prompt: int, changed: bool) -> str:
    return f"answer to prompt {prompt}" + (" but otherwise" if changed else " as greedy says")


def run(tmp_path, changed: dict[str, set[int]], *, control=True, keep_text=True,
        equivalence: bool | None = None):
    """changed: arm -> the prompts whose answer it changes (in every restart)."""
    comparison: dict = {"a": "base", "b": "fast", "metric": "decode_rate"}
    if control:
        comparison["control"] = ["fast", "fast-again"]
    if equivalence is not None:
        comparison["equivalence"] = equivalence
    doc = sweep("eq", [command_arm(name, f"serve --flavour {name} --port {{port}}")
                       for name in DECODE_S],
                defaults={"requests": PROMPTS, "restarts": 2}, comparisons=[comparison])
    layout = RunLayout(tmp_path / "data", RUN_ID)
    windows = {}
    for arm, per_restart in DECODE_S.items():
        for k, seconds in enumerate(per_restart):
            wid = layout.window_id(arm, k, "code", 1)
            rows = []
            for i in range(PROMPTS):
                text = answer(i, i in changed.get(arm, set()))
                rows.append({**request_row(wid, i, decode_s=seconds * (1 + 0.01 * i)),
                             "prompt_id": f"code-{i:02d}",
                             "prompt_sha256": hashlib.sha256(b"p%d" % i).hexdigest(),
                             "answer_sha256": hashlib.sha256(text.encode()).hexdigest(),
                             "answer_chars": len(text),
                             "answer_text": text if keep_text else None})
            windows[(arm, k, "code")] = (rows, {})
    write_synthetic_run(tmp_path, doc, windows)
    con = derived_warehouse(layout.run_dir)
    derive_comparisons(con, RUN_ID)
    return con


def row(con, role="ab") -> dict:
    frame = con.execute("SELECT * FROM comparisons WHERE role = ?", [role]).df()
    assert len(frame) == 1
    return frame.iloc[0].to_dict()


def test_the_same_answers_keep_the_improvement(tmp_path):
    con = run(tmp_path, {})
    ab = row(con)
    assert ab["verdict"] == "improvement", ab["reason"]
    assert (ab["equivalence_prompts"], ab["equivalence_identical"]) == (PROMPTS, PROMPTS)
    assert (ab["control_equivalence_prompts"], ab["control_equivalence_identical"]) == (
        PROMPTS, PROMPTS)
    assert json.loads(ab["equivalence_divergent"]) == []
    # 0 of 10 in the control: its exact 95% interval reaches 30.8%
    assert ab["equivalence_bound"] == pytest.approx(1 - 0.025 ** (1 / PROMPTS))
    (passed,), = con.execute("SELECT success FROM validations WHERE expectation = ?",
                             [OUTPUTS_EQUIVALENT.name]).fetchall()
    assert passed
    control = row(con, "control")
    assert (control["equivalence_prompts"], control["equivalence_identical"]) == (
        PROMPTS, PROMPTS)
    # what the terminal and report.html print beside the verdict
    text = format_comparisons(comparisons(con, RUN_ID))
    assert "answers: the same on 10 of 10 prompts (A/A control: 10 of 10)" in text, text
    assert "answers: the same on 10 of 10 prompts\n" in text + "\n"  # the control's own


def test_changed_answers_block_the_improvement_and_name_the_prompts(tmp_path):
    con = run(tmp_path, {"fast": {1, 4, 6, 8}, "fast-again": {1, 4, 6, 8}})
    ab = row(con)
    assert ab["verdict"] == "no finding"
    assert ab["reason"].startswith(
        "the answers differ: fast changes the answer of 4 of 10 code prompts: code-01 from "
        "character 19, code-04 from character 19, code-06 from character 19, code-08 from "
        "character 19; the A/A control changes 0 of 10 (95% bound 30.8%)"), \
        ab["reason"]
    assert "its improvement is no finding (outputs_equivalent)" in ab["reason"]
    named = json.loads(ab["equivalence_divergent"])
    assert [(d["prompt_id"], d["first_divergent_char"]) for d in named] == [
        (f"code-{i:02d}", len("answer to prompt 1 ")) for i in (1, 4, 6, 8)]
    expected, found = con.execute(
        "SELECT expected, found FROM validations WHERE expectation = ? AND NOT success",
        [OUTPUTS_EQUIVALENT.name]).fetchone()
    assert expected.startswith("answers changed on a share of prompts <=")
    assert found.startswith("fast changes the answer of 4 of 10 code prompts")


def test_a_control_that_diverges_itself_raises_the_bar(tmp_path):
    """A server that is not deterministic: its own twin changes 3 of 10 answers, so 4 of
    10 is within what it does to itself (the exact bound of 3 of 10 is 65%)."""
    con = run(tmp_path, {"fast": {1, 4, 6, 8}, "fast-again": {0, 2, 3}})
    ab = row(con)
    assert ab["verdict"] == "improvement", ab["reason"]
    assert ab["equivalence_bound"] == pytest.approx(
        binomtest(7, 10).proportion_ci(method="exact").high)


def test_without_a_control_any_changed_answer_blocks(tmp_path):
    con = run(tmp_path, {"fast": {3}}, control=False, keep_text=False)
    ab = row(con)
    assert ab["verdict"] == "no finding"
    assert "fast changes the answer of 1 of 10 code prompts: code-03 (where they part is " \
        "unknown: keep_output_text is off); no A/A control" in ab["reason"], ab["reason"]
    assert ab["equivalence_bound"] == 0.0


def test_arms_meant_to_answer_differently_skip_the_check(tmp_path):
    con = run(tmp_path, {"fast": {1, 2, 3, 4, 5}, "fast-again": {1, 2, 3, 4, 5}},
              equivalence=False)
    ab = row(con)
    assert ab["verdict"] == "improvement"
    assert ab["equivalence_prompts"] is None or ab["equivalence_prompts"] != ab[
        "equivalence_prompts"]  # NULL
    assert con.execute("SELECT success, found FROM validations WHERE expectation = ?",
                       [OUTPUTS_EQUIVALENT.name]).fetchall() == [
        (True, f"{NOT_APPLICABLE} (answers not compared)")]
