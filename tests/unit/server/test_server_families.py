"""Server families (issue #13): vLLM, SGLang, llama.cpp's server and TGI name and count their
/metrics differently; each is recognised and reconciled with its own counters.

The /metrics pages are tests/fixtures/metrics/<family>.txt (each names its source and
version). A window's "after" page is its "before" page with the family's counters moved by
what the client received (or by 10% more: a lying counter), as each server would.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pandas as pd
import pytest

from benchledger.client import WindowResult
from benchledger.raw.layout import RunLayout
from benchledger.restart.window_write import write_window
from benchledger.server.observe import FAMILY_PREFIXES, detect_family, families_named, server_family
from benchledger.simulator.engine import Engine
from benchledger.simulator.metrics import render_metrics
from benchledger.simulator.options import MetricsFamily, SimConfig
from benchledger.sweep.spec import SERVER_FAMILIES
from benchledger.warehouse.observations import metric_samples
from benchledger.warehouse.reconcile import FAMILY_COUNTERS, QUANTITIES
from tests import sweeps
from tests.reference import reconcile_requests
from tests.synthetic import (
    RUN_ID,
    accounting,
    derived_warehouse,
    request_row,
    write_as_a_step,
    write_synthetic_run,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
N, OUTPUT, PROMPT, CACHED = 6, 21, 50, 20  # requests per window and each one's usage

# What each server adds to which sample line when it serves the window: (line prefix, the
# client count it adds). Written from the servers' documentation, apart from the catalogue.
MOVES = {
    "vllm": [("vllm:generation_tokens_total{", "output"), ("vllm:prompt_tokens_total{", "prompt"),
             ('vllm:request_success_total{engine="0",finished_reason="length"', "completed")],
    "sglang": [("sglang:generation_tokens_total{", "output"),
               ("sglang:prompt_tokens_total{", "prompt"),
               ("sglang:cached_tokens_total{", "cached"),
               ("sglang:num_requests_total{", "completed")],
    # llama.cpp counts the prompt tokens it evaluated: its cache hits are not in them
    "llamacpp": [("llamacpp:tokens_predicted_total ", "output"),
                 ("llamacpp:prompt_tokens_total ", "evaluated")],
    "tgi": [("tgi_request_generated_tokens_sum ", "output"),
            ("tgi_request_generated_tokens_count ", "completed"),
            ('tgi_request_generated_tokens_bucket{le="+Inf"}', "completed"),
            ("tgi_request_input_length_sum ", "prompt"),
            ("tgi_request_success ", "completed"), ("tgi_request_count ", "completed")],
}
CLIENT = {"output": N * OUTPUT, "prompt": N * PROMPT, "cached": N * CACHED,
          "evaluated": N * (PROMPT - CACHED), "completed": N}


def fixture(family: str) -> str:
    return (FIXTURES / f"{family}.txt").read_text()


def after_window(text: str, family: str, generation_scale: float = 1.0) -> str:
    """The page once the server counted the window's N requests (generation scaled)."""
    lines = []
    for line in text.splitlines():
        for prefix, count in MOVES[family]:
            if line.startswith(prefix):
                name, value = line.rsplit(" ", 1)
                added = CLIENT[count] * (generation_scale if count == "output" else 1)
                line = f"{name} {float(value) + round(added)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def metrics_frame(before: str, after: str) -> pd.DataFrame:
    return pd.DataFrame([{"phase": phase, "name": name, "labels": labels, "value": value}
                         for phase, text in (("before", before), ("after", after))
                         for name, labels, value in metric_samples(text)])


def requests(n: int = N) -> pd.DataFrame:
    rows = [{"is_warmup": False, "status": "completed", "output_tokens": OUTPUT,
             "prompt_tokens": PROMPT, "cached_tokens": CACHED}] * n
    warmup = {"is_warmup": True, "status": "completed", "output_tokens": 99,
              "prompt_tokens": 99, "cached_tokens": 0}
    return pd.DataFrame([*rows, warmup])


def window(**overrides) -> pd.Series:
    values = {"window_id": "w", "run_id": "r", "failed": 0, "unresolved": 0,
              "reconcile_tolerance": 0.01, "observation_errors": None}
    return pd.Series({**values, **overrides})


# --- the names ------------------------------------------------------------------------------

def test_every_family_is_declared_alike_by_sweep_observer_warehouse_and_simulator():
    assert tuple(FAMILY_PREFIXES) == tuple(FAMILY_COUNTERS) == SERVER_FAMILIES
    assert typing.get_args(MetricsFamily) == SERVER_FAMILIES


@pytest.mark.parametrize("family", SERVER_FAMILIES)
def test_each_fixture_names_its_source_and_is_recognised_as_its_family(family):
    text = fixture(family)
    assert "benchledger fixture" in text.splitlines()[0]
    assert "Sure of" in text  # how sure the names are, said where they are written down
    assert families_named(text) == [family]
    stored = {name for name, _, _ in metric_samples(text)}
    # every counter the warehouse reconciles is a sample name as the loader stores it
    assert {c.name for c in FAMILY_COUNTERS[family].values()} <= stored


def test_a_page_of_no_known_family_or_of_several_is_no_family():
    assert families_named("# TYPE my_requests_total counter\nmy_requests_total 3\n") == []
    both = fixture("vllm") + fixture("tgi")
    assert families_named(both) == ["vllm", "tgi"]


@pytest.mark.parametrize("family", SERVER_FAMILIES)
def test_the_simulator_exports_every_counter_of_its_family(family):
    engine = Engine(SimConfig(metrics_family=family))
    text = render_metrics(engine)
    assert families_named(text) == [family]
    stored = {name for name, _, _ in metric_samples(text)}
    assert {c.name for c in FAMILY_COUNTERS[family].values()} <= stored


def test_the_arm_may_name_the_family_and_a_server_without_metrics_has_none():
    assert server_family("sglang", "http://127.0.0.1:1/metrics") == ("sglang",
                                                                     "arms.server_family")
    family, why = detect_family("http://127.0.0.1:1/metrics", timeout_s=2)
    assert family is None and "http://127.0.0.1:1/metrics: ConnectError" in why


# --- reconciling each family -----------------------------------------------------------------

@pytest.mark.parametrize("family", SERVER_FAMILIES)
def test_each_family_reconciles_with_its_own_counters(family):
    text = fixture(family)
    rows = reconcile_requests(window(server_family=family), requests(),
                            metrics_frame(text, after_window(text, family)))
    assert [r["quantity"] for r in rows] == list(FAMILY_COUNTERS[family])
    assert [r["counter"] for r in rows] == [c.name for c in FAMILY_COUNTERS[family].values()]
    assert {r["status"] for r in rows} == {"match"}, [r["detail"] for r in rows]
    generation = rows[0]
    assert generation["client_value"] == generation["server_delta"] == N * OUTPUT


@pytest.mark.parametrize("family", SERVER_FAMILIES)
def test_a_lying_generation_counter_mismatches_in_each_family(family):
    text = fixture(family)
    rows = reconcile_requests(window(server_family=family), requests(),
                            metrics_frame(text, after_window(text, family, 1.10)))
    by_quantity = {r["quantity"]: r for r in rows}
    generation = by_quantity["generation_tokens"]
    assert generation["status"] == "mismatch"
    assert generation["relative_error"] == pytest.approx(0.10, abs=0.01)
    assert generation["detail"].startswith(FAMILY_COUNTERS[family]["generation_tokens"].name)
    assert by_quantity["prompt_tokens"]["status"] == "match"


def test_llamacpp_prompt_tokens_leave_out_cache_hits_and_are_unchecked_without_them():
    text = fixture("llamacpp")
    after = after_window(text, "llamacpp")
    prompt = reconcile_requests(window(server_family="llamacpp"), requests(),
                              metrics_frame(text, after))[1]
    assert prompt["client_value"] == N * (PROMPT - CACHED) and prompt["status"] == "match"
    # A llama.cpp build that reports no cached_tokens: the evaluated count is unknowable.
    unknown = requests().assign(cached_tokens=None)
    prompt = reconcile_requests(window(server_family="llamacpp"), unknown,
                              metrics_frame(text, after))[1]
    assert prompt["status"] == "no counter" and prompt["relative_error"] is None
    assert f"{N} measured requests reported no usage.prompt_tokens_details" in prompt["detail"]


def test_llamacpp_has_no_finished_request_counter_so_no_row_for_it():
    text = fixture("llamacpp")
    rows = reconcile_requests(window(server_family="llamacpp"), requests(),
                            metrics_frame(text, after_window(text, "llamacpp")))
    assert {r["quantity"] for r in rows} == {"generation_tokens", "prompt_tokens"}
    assert set(QUANTITIES) - {r["quantity"] for r in rows} == {"finished_requests"}


@pytest.mark.parametrize("family", SERVER_FAMILIES)
def test_a_restart_without_a_recorded_family_takes_the_one_its_window_shows(family):
    text = fixture(family)
    rows = reconcile_requests(window(server_family=None), requests(),
                            metrics_frame(text, after_window(text, family)))
    assert rows[0]["counter"] == FAMILY_COUNTERS[family]["generation_tokens"].name


def test_unfinished_requests_make_each_family_a_lower_bound():
    text = fixture("sglang")
    rows = reconcile_requests(window(server_family="sglang", unresolved=1), requests(),
                            metrics_frame(text, after_window(text, "sglang")))
    assert {r["status"] for r in rows} == {"lower bound"}


# --- through the warehouse: the gate blocks a lying counter of every family ----------------

@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("families")
    layout = RunLayout(tmp_path / "data", RUN_ID)
    arms = {f"{family}-{kind}": (family, 1.10 if kind == "lying" else 1.0)
            for family in SERVER_FAMILIES for kind in ("honest", "lying")}
    sweep = sweeps.sweep("families", [sweeps.simulator_arm(arm, model="m") for arm in arms],
                         defaults={"requests": N, "restarts": 1})
    windows = {}
    for arm in arms:
        wid = layout.window_id(arm, 0, "code", 1)
        rows = [request_row(wid, i, tokens=OUTPUT, prompt_tokens=PROMPT) for i in range(N)]
        for row in rows:
            row["cached_tokens"] = CACHED
        windows[(arm, 0, "code")] = (rows, {})
    write_synthetic_run(tmp_path, sweep, windows)
    for arm, (family, scale) in arms.items():
        if family != "tgi":  # TGI's restart recorded no family: its window's names tell
            manifest = json.loads(layout.restart_manifest(arm, 0).read_text())
            write_as_a_step(layout.restart_manifest(arm, 0),
                            {**manifest, "server_family": family})
        rows, _ = windows[(arm, 0, "code")]
        text = fixture(family)
        observations = {"thresholds": {"reconcile_tolerance": 0.01}, "metrics": {
            "before": {"scraped_at": "2026-11-30T00:00:00+00:00", "text": text},
            "after": {"scraped_at": "2026-11-30T00:01:00+00:00",
                      "text": after_window(text, family, scale)}}}
        write_window(layout, arm, 0, "code", "code", 5,
                     WindowResult(rows=rows, accounting=accounting(rows[0]["window_id"], rows)),
                     observations)
    con = derived_warehouse(layout.run_dir)
    yield con
    con.close()


def test_the_warehouse_records_each_restarts_family(warehouse):
    recorded = dict(warehouse.execute("SELECT arm, server_family FROM restarts").fetchall())
    assert recorded["llamacpp-honest"] == "llamacpp" and recorded["tgi-honest"] is None


def test_honest_counters_of_every_family_reconcile_their_entries(warehouse):
    checks = dict(warehouse.execute(
        "SELECT arm, list(DISTINCT counter_check) FROM published_entries GROUP BY arm"
    ).fetchall())
    assert checks == {f"{family}-honest": ["reconciled"] for family in SERVER_FAMILIES}


@pytest.mark.parametrize("family", SERVER_FAMILIES)
def test_a_lying_counter_blocks_the_entries_in_every_family(warehouse, family):
    arm = f"{family}-lying"
    published = warehouse.execute("SELECT count(*) FROM published_entries WHERE arm = ?",
                                  [arm]).fetchone()[0]
    assert published == 0
    found = warehouse.execute(
        "SELECT DISTINCT b.found FROM current_entries e JOIN entry_blocks b USING (entry_id) "
        "WHERE e.arm = ? AND b.rule = 'generation_tokens_reconcile'", [arm]).fetchall()
    counter = FAMILY_COUNTERS[family]["generation_tokens"].name
    assert len(found) == 1 and found[0][0].startswith(f"{counter} delta")
