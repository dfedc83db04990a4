"""Issue #27 through the real pipeline: two SLOs and a rate ladder on simulator arms that
differ in speed (the simulator's batch penalty makes each request slower as more run at
once), an A/A twin of the fast arm, a frontier comparison held to that twin, and an arm
whose requests stall past the drain deadline. Goodput and attainment are recomputed here
by hand from the raw request rows."""

from __future__ import annotations

import contextlib
import io

import pandas as pd
import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

# The goodput and attainment A/Bs are compared at 32 rps, where the arms' TPOTs are far
# apart (fast about 3 ms, slow about 45 ms). The SLOs leave the fast arm room for what a
# loaded 2-core machine does to a process, which is not a slower server but a frozen one:
# in ci41 one fast restart's window at 32 rps froze for about 0.57 s (the suite's first
# minutes, when its Airflow clusters start), its TTFTs reached 573 ms and its TPOT 35 ms,
# and the then 250 ms TTFT and 16 ms TPOT SLOs failed it (as 13.7 and 15.2 ms TPOTs at
# 128 rps had in ci28 and ci29). A freeze of up to about 0.6 s inside a 24-token answer
# adds under 26 ms to its TPOT and under 0.6 s to its first token or a gap: the SLOs
# below hold through it, and the slow arm (step 16 ms) still misses TPOT at 32 rps.
TTFT_S, TPOT_S, ITL_S = 1.0, 0.032, 0.8
FAST_MS, SLOW_MS = 2.0, 16.0  # the simulator's decode step of one running request
RATES = [8, 32, 128]
POINTS = 6  # at most this many rates per searching arm
LADDER = ("fast", "fast-twin", "slow", "stalling")


def slo_sweep() -> dict:
    def arm(name: str, step_ms: float, **keys) -> dict:
        return simulator_arm(name, {"step_ms": step_ms, "batch_penalty": 0.15}, **keys)

    def compared(metric: str, **keys) -> dict:
        return {"a": "slow", "b": "fast", "metric": metric, **keys,
                "control": ["fast", "fast-twin"]}

    stalling = arm("stalling", FAST_MS, rate_rps=[8], drain_timeout_s=2.0)
    stalling["simulator"].update(stall_every=6, stall_s=60)
    return sweep(
        "it-slo-frontier",
        # three restarts behind the frontier comparison: Welch's interval over two restart
        # means has one degree of freedom (t = 12.7), too wide to find anything under load
        [*(arm(name, step, restarts=3)
           for name, step in (("fast", FAST_MS), ("fast-twin", FAST_MS), ("slow", SLOW_MS))),
         stalling,
         *(arm(f"{name}-search", step, rate_search={"min": 4, "max": 512, "points": POINTS})
           for name, step in (("fast", FAST_MS), ("slow", SLOW_MS)))],
        sweep={"retries": 0},
        # 24 requests under a 64-stream cap never queue at the server: a first-token wait
        # that grows over such a window is a process frozen by the loaded machine (ci41:
        # 41x, the fast arm's 32 rps "saturated"), so the queue-growth bound is set out of
        # reach here; these loads saturate by their SLOs, schedule and unresolved requests.
        slo_target={"max_queue_growth": 1000},
        defaults=defaults(requests=24, warmup=2, concurrency=[64], arrival="constant",
                          rate_rps=RATES, clock_interval_s=0.1, max_arrival_lag_ms=1000),
        workloads=["prose"],
        slos=[{"name": "ttft", "metric": "ttft", "max_ms": TTFT_S * 1000, "percentile": 90},
              {"name": "tpot", "metric": "tpot", "max_ms": TPOT_S * 1000},
              {"name": "itl", "metric": "itl", "max_ms": ITL_S * 1000}],
        comparisons=[compared("frontier"), compared("slo_attainment", rate_rps=32),
                     compared("goodput", rate_rps=32)])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("slo")


@pytest.fixture(scope="module")
def run(workdir):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_id, state, con = run_sweep_text(workdir, slo_sweep())
    yield run_id, state, con
    con.close()


def frame(run, sql: str) -> pd.DataFrame:
    run_id, _, con = run
    return con.execute(sql, [run_id]).df()


def by_hand(run) -> pd.DataFrame:
    """Per window, from the raw request rows alone: requests meeting both SLOs, their
    output tokens, and the window's submitted/completed counts and elapsed time."""
    rows = frame(run, """
        SELECT w.arm, coalesce(w.load_point, 'c' || w.concurrency) AS load_point, w.window_id,
               w.restart_id, w.submitted, w.completed, w.elapsed_s, r.status, r.output_tokens,
               r.t_submit_ns, r.t_first_ns, r.t_last_ns, r.content_event_ns
        FROM request_records r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND NOT r.is_warmup""")
    out = []
    for window_id, mine in rows.groupby("window_id"):
        met = 0
        tokens = 0
        for r in mine.itertuples():
            if r.status != "completed":
                continue
            events = list(r.content_event_ns)
            gaps = [b - a for a, b in zip(events, events[1:], strict=False)]
            tpot = (r.t_last_ns - r.t_first_ns) / 1e9 / (r.output_tokens - 1) \
                if r.output_tokens >= 2 else 0.0
            if (r.t_first_ns - r.t_submit_ns) / 1e9 <= TTFT_S and tpot <= TPOT_S \
                    and (not gaps or max(gaps) / 1e9 <= ITL_S):
                met += 1
                tokens += r.output_tokens
        w = mine.iloc[0]
        out.append({"arm": w.arm, "load_point": w.load_point, "window_id": window_id,
                    "met": met, "goodput_rps": met / w.elapsed_s,
                    "goodput_tok_s": tokens / w.elapsed_s,
                    "attainment": met / w.submitted, "completed_attainment":
                    met / w.completed if w.completed else None})
    return pd.DataFrame(out)


def entry_values(run, metric: str, numerator: str, unit: str | None = None) -> pd.Series:
    rows = frame(run, "SELECT arm, load_point, value, unit, population, publishable "
                      "FROM current_entries WHERE run_id = ? AND metric = '" + metric
                 + "' AND numerator = '" + numerator + "'")
    if unit:
        rows = rows[rows["unit"] == unit]
    return rows.set_index(["arm", "load_point"])


def test_run_succeeds_with_every_point_kept(run):
    _, state, _ = run
    assert state == "success"
    points = frame(run, "SELECT arm, load_point FROM frontier WHERE run_id = ?")
    # every rung of every arm is a frontier point, past saturation included
    for arm in ("fast", "fast-twin", "slow"):
        assert sorted(points.loc[points["arm"] == arm, "load_point"]) == sorted(
            f"c64-r{r}" for r in RATES)


@pytest.mark.parametrize(("metric", "numerator", "unit", "column"), [
    ("goodput", "requests_meeting_all_slos", "req/s", "goodput_rps"),
    ("goodput", "output_tokens", "tok/s", "goodput_tok_s"),
    ("slo_attainment", "requests_meeting_all_slos", "fraction", "attainment"),
    ("slo_attainment_completed", "requests_meeting_all_slos", "fraction",
     "completed_attainment"),
])
def test_goodput_and_attainment_equal_a_hand_recomputation(run, metric, numerator, unit,
                                                           column):
    hand = by_hand(run).groupby(["arm", "load_point"])[column].mean()
    entries = entry_values(run, metric, numerator, unit)
    if metric == "slo_attainment":
        entries = entries[entries["population"] == "all_submitted"]
    assert len(entries) == len(hand)
    assert len(hand[hand.index.get_level_values("arm").isin(LADDER)]) == 3 * 3 + 1
    for key, value in hand.items():
        assert entries.loc[key, "value"] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert set(entries["population"]) == {
        "goodput": {"slo_met"}, "slo_attainment": {"all_submitted"},
        "slo_attainment_completed": {"completed_only"}}[metric]


def test_some_load_meets_the_slos_and_some_does_not(run):
    hand = by_hand(run)
    assert hand["attainment"].max() == 1.0
    assert hand["attainment"].min() < 0.9


def test_the_saturation_point_moves_down_when_the_server_is_slower(run):
    points = frame(run, "SELECT arm, requested_rate_rps, sustained, meets_target, saturated,"
                        " saturation_reason FROM frontier WHERE run_id = ?")

    def sustained(arm: str) -> float:
        mine = points[(points["arm"] == arm) & points["sustained"]]
        assert len(mine) <= 1
        return float(mine["requested_rate_rps"].iloc[0]) if len(mine) else 0.0

    assert sustained("fast") > sustained("slow")
    assert sustained("fast") > 0


def test_frontier_points_have_intervals_on_both_axes(run):
    points = frame(run, "SELECT * FROM frontier WHERE run_id = ? AND arm <> 'stalling'")
    assert (points["gpus"] == 1).all()  # the simulator's telemetry lists one GPU
    assert (points["throughput_per_gpu_tok_s"] == points["throughput_tok_s"]).all()
    for axis in ("per_user", "throughput"):
        assert points[f"{axis}_low"].notna().all()
        assert (points[f"{axis}_low"] <= points[f"{axis}_high"]).all()
    # the batch penalty: per-user speed falls as the rate climbs
    fast = points[points["arm"] == "fast"].sort_values("requested_rate_rps")
    assert fast["per_user_tok_s"].iloc[-1] < fast["per_user_tok_s"].iloc[0]
    assert fast["throughput_tok_s"].iloc[-1] > fast["throughput_tok_s"].iloc[0]


def test_frontier_comparison_finds_dominance_and_the_twin_none(run):
    findings = frame(run, "SELECT * FROM frontier_findings WHERE run_id = ?")
    ab = findings[findings["role"] == "ab"]
    control = findings[findings["role"] == "control"]
    assert sorted(ab["load_point"]) == sorted(f"c64-r{r}" for r in RATES)
    assert (ab["finding"] == "b dominates").any(), ab[["load_point", "finding", "reason"]]
    faster = ab[(ab["finding"] == "b dominates") & (ab["per_user_verdict"] == "improvement")]
    assert len(faster), ab
    # the interval of the difference over restarts, not a point, excludes 0
    assert (faster["per_user_ci95_low"] > 0).all()
    assert (ab["per_user_verdict"] != "regression").all()
    # an A/A pair never dominates itself: no finding at every point (its noise, where its
    # own interval excluded 0, is in the reason; the A/B's verdicts are held to it)
    assert set(control["finding"]) == {"no finding"}, control[["load_point", "reason"]]
    assert sorted(control["load_point"]) == sorted(f"c64-r{r}" for r in RATES)


def test_unfinished_requests_are_slo_misses_and_labelled(run):
    submitted = entry_values(run, "slo_attainment", "requests_meeting_all_slos")
    submitted = submitted[submitted["population"] == "all_submitted"]
    completed = entry_values(run, "slo_attainment_completed", "requests_meeting_all_slos")
    key = ("stalling", "c64-r8")
    unresolved = frame(run, "SELECT sum(unresolved) AS n FROM windows WHERE run_id = ? "
                            "AND arm = 'stalling'")["n"].iloc[0]
    assert unresolved > 0
    assert submitted.loc[key, "value"] < completed.loc[key, "value"]
    assert submitted.loc[key, "population"] == "all_submitted"
    assert completed.loc[key, "population"] == "completed_only"
    point = frame(run, "SELECT saturated, saturation_reason FROM frontier WHERE run_id = ? "
                       "AND arm = 'stalling'").iloc[0]
    assert point["saturated"] and "unresolved" in point["saturation_reason"]


def search_steps(workdir, arm: str) -> list[dict]:
    """What restart 0's search saw and chose, step by step (its search record)."""
    import json

    record, = workdir.rglob(f"{arm}/r0/prose.search")
    return json.loads(record.read_text())["steps"]


def test_a_rate_search_stops_past_saturation_and_every_restart_repeats_it(run, workdir):
    windows = frame(run, "SELECT arm, restart_id, load_point FROM windows WHERE run_id = ? "
                         "AND arm LIKE '%-search'")
    points = frame(run, "SELECT arm, requested_rate_rps, sustained, meets_target, saturated,"
                        " n_restarts, publishable FROM frontier WHERE run_id = ? "
                        "AND arm LIKE '%-search'")
    for arm in ("fast-search", "slow-search"):
        mine = windows[windows["arm"] == arm]
        per_restart = mine.groupby("restart_id")["load_point"].apply(frozenset)
        assert len(per_restart) == 2 and per_restart.nunique() == 1  # r1 repeats r0
        assert 2 <= len(per_restart.iloc[0]) <= POINTS
        measured = points[points["arm"] == arm]
        assert (measured["n_restarts"] == 2).all()  # every searched point, both restarts
        # the search steers by restart 0's own judgement (the frontier judges the points
        # again over both restarts: a loaded machine may fail a rate in restart 1 that
        # restart 0 sustained, as a CI run did): it never went more than one doubling
        # past the first rate restart 0 did not sustain
        steps = search_steps(workdir, arm)
        assert {s["load_point"] for s in steps} == set(per_restart.iloc[0])
        failed = [s["rate_rps"] for s in steps if not s["sustained"]]
        if failed:
            assert max(s["rate_rps"] for s in steps) <= 2 * min(failed) + 1e-9, steps

    def sustained(arm: str) -> float:
        mine = points[(points["arm"] == arm) & points["sustained"]]
        return float(mine["requested_rate_rps"].iloc[0]) if len(mine) else 0.0

    assert sustained("fast-search") > sustained("slow-search")
    assert sustained("fast-search") >= 8  # the lowest rate was not its ceiling


def test_goodput_and_attainment_compare_like_any_entry(run):
    rows = frame(run, "SELECT role, metric, numerator, load_point, verdict, difference, "
                      "ci95_low, control_difference FROM comparisons WHERE run_id = ? "
                      "AND metric IN ('goodput', 'slo_attainment')")
    ab = rows[rows["role"] == "ab"].set_index("metric")
    assert set(ab.index) == {"goodput", "slo_attainment"}
    assert set(ab["load_point"]) == {"c64-r32"}
    assert ab.loc["goodput", "numerator"] == "output_tokens"
    # at 32 rps the slow arm meets almost no SLO and the fast one nearly all
    assert ab.loc["slo_attainment", "difference"] > 0.5
    assert ab.loc["slo_attainment", "verdict"] == "improvement"
    assert ab.loc["goodput", "verdict"] == "improvement"
    assert rows.loc[rows["role"] == "control", "verdict"].isin(
        ["no finding", "not decidable"]).all()
