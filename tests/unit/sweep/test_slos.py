"""Issue #27's sweep keys, load points and the frontier's verdict words (no server)."""

from __future__ import annotations

import itertools

import pytest

from benchledger.client.streams import constant_arrivals
from benchledger.raw.layout import window_stem
from benchledger.sweep.spec import LoadPoint, SweepError, parse_sweep
from benchledger.warehouse.frontier import finding
from tests import sweeps
from tests.sweeps import toml


def sweep(defaults: dict | None = None, **tables):
    """One simulator arm at concurrency 4 and 16, prose and code, `defaults` added to
    [defaults] and `tables` (slos=..., slo_target=...) to the file; parsed."""
    return parse_sweep(toml(sweeps.sweep(
        "s", [sweeps.simulator_arm("a")], defaults={"concurrency": [4, 16], **(defaults or {})},
        workloads=["prose", "code"], **tables)))


def slo(name: str, metric: str, max_ms: float, **keys) -> dict:
    return {"name": name, "metric": metric, "max_ms": max_ms, **keys}


POISSON_SEARCH = {"arrival": "poisson", "rate_search": {"min": 1, "max": 8}}


def test_a_rate_ladder_is_one_load_point_per_rate_and_concurrency():
    ladder = {"arrival": "poisson", "rate_rps": [8, 2]}
    plan = sweep(ladder).arms[0]
    points = sweep(ladder).plan(plan).load_points
    assert points == [LoadPoint(4, 2.0), LoadPoint(4, 8.0), LoadPoint(16, 2.0),
                      LoadPoint(16, 8.0)]
    assert [p.label for p in points[:2]] == ["c4-r2", "c4-r8"]
    assert window_stem("prose", LoadPoint(64, 2.5)) == "prose-c64-r2.5"
    # one rate keeps the windows' older names
    one = sweep({"arrival": "poisson", "rate_rps": 3})
    assert [p.label for p in one.plan(one.arms[0]).load_points] == ["c4", "c16"]
    assert window_stem("prose", 4) == "prose-c4"


def test_a_rate_ladder_needs_an_open_loop():
    with pytest.raises(SweepError, match="rate ladder"):
        sweep({"rate_rps": [1, 2]})


def test_constant_arrivals_are_evenly_spaced():
    assert list(itertools.islice(constant_arrivals(4.0), 4)) == [0.0, 0.25, 0.5, 0.75]
    constant = {"arrival": "constant", "rate_rps": [1, 4]}
    assert sweep(constant).plan(sweep(constant).arms[0]).rate_ladder


def test_slos_parse_and_apply_per_workload():
    s = sweep(slos=[slo("ttft", "ttft", 500, percentile=90),
                    slo("tpot-code", "tpot", 40, workloads=["code"])],
              slo_target={"attainment": 0.95})
    assert [slo.name for slo in s.slos_of("prose")] == ["ttft"]
    assert [slo.name for slo in s.slos_of("code")] == ["ttft", "tpot-code"]
    assert s.slos[0].max_s == 0.5 and s.slo_target.attainment == 0.95


@pytest.mark.parametrize(("slos", "message"), [
    ([slo("x", "ttft", 1), slo("x", "tpot", 1)], "duplicate name"),
    ([slo("x", "ttft", 1, workloads=["chat"])], "no workload named"),
    ([slo("x", "latency", 1)], "slos"),
    ([slo("x", "ttft", 0)], "max_ms"),
])
def test_bad_slos_are_refused_by_name(slos, message):
    with pytest.raises(SweepError, match=message):
        sweep(slos=slos)


@pytest.mark.parametrize(("throughput", "per_user", "expected"), [
    ("improvement", "improvement", "b dominates"),
    ("improvement", "no finding", "b dominates"),
    ("no finding", "regression", "a dominates"),
    ("improvement", "regression", "trade-off"),
    ("no finding", "no finding", "no finding"),
    ("no finding", "not decidable", "not decidable"),
    (None, "no finding", "not decidable"),
])
def test_frontier_finding_words(throughput, per_user, expected):
    assert finding(throughput, per_user, has_control=True)[0] == expected
    assert finding(throughput, per_user, has_control=False)[0] == expected


def test_a_rate_search_doubles_then_bisects_and_stops_past_the_first_failure():
    from benchledger.sweep.slos import RateSearch, next_rate

    search = RateSearch(min=1, max=64, points=8, resolution=0.1)
    history: list[tuple[float, bool]] = []
    while (rate := next_rate(search, history)) is not None:
        history.append((rate, rate <= 11.0))  # a server that sustains up to 11 rps
    rates = [rate for rate, _ in history]
    assert rates[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]  # never beyond the first failure
    assert max(rates) == 16.0 and len(rates) <= 8
    best = max(rate for rate, ok in history if ok)
    assert 9.5 <= best <= 11.0  # bisected close to the ceiling


@pytest.mark.parametrize(("ceiling", "expected"), [
    (0.5, [1.0]),  # the lowest rate already fails: nothing else is measured
    (100.0, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),  # sustained up to max: stops there
])
def test_a_rate_search_stops_at_its_bounds(ceiling, expected):
    from benchledger.sweep.slos import RateSearch, next_rate

    search = RateSearch(min=1, max=64, points=10)
    history: list[tuple[float, bool]] = []
    while (rate := next_rate(search, history)) is not None:
        history.append((rate, rate <= ceiling))
    assert [rate for rate, _ in history] == expected


def test_rate_search_and_rate_rps_are_exclusive_and_need_an_open_loop():
    with pytest.raises(SweepError, match="open-loop"):
        sweep({"rate_search": {"min": 1, "max": 8}})
    with pytest.raises(SweepError, match="both give the arm's rates"):
        sweep({**POISSON_SEARCH, "rate_rps": 2})
    with pytest.raises(SweepError, match="min"):
        sweep({**POISSON_SEARCH, "rate_search": {"min": 8, "max": 8}})
    s = sweep(POISSON_SEARCH)
    assert s.plan(s.arms[0]).load_points == []  # restart 0 chooses them


def test_load_point_labels_parse_back():
    for point in (LoadPoint(8), LoadPoint(64, 2.5), LoadPoint(4, 22.6)):
        assert LoadPoint.parse(point.label) == point
    with pytest.raises(ValueError, match="not a load point"):
        LoadPoint.parse("r8")


def test_a_searching_restart_judges_its_window_by_the_slos(tmp_path):
    """judge_window runs the one SLO definition over the window's requests file: a window
    where 2 of 4 submitted requests meet the TTFT bound (one too slow, one failed) misses
    the 90% target, and unresolved requests are a saturation sign of their own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchledger.restart.rate_search import SLO_COLUMNS, judge_window

    ms = 1_000_000
    rows = [{"window_id": "w", "request_id": f"r{i}", "status": status,
             "output_tokens": 3, "t_submit_ns": i * 100 * ms,
             "t_first_ns": i * 100 * ms + ttft * ms, "t_last_ns": i * 100 * ms + (ttft + 20) * ms,
             "t_done_ns": i * 100 * ms + (ttft + 21) * ms, "t_first_reasoning_ns": None,
             "t_last_reasoning_ns": None,
             "content_event_ns": [i * 100 * ms + (ttft + d) * ms for d in (0, 10, 20)],
             "is_warmup": False}
            for i, (status, ttft) in enumerate([("completed", 10), ("completed", 20),
                                                ("completed", 300), ("failed", 5)])]
    schema = pa.schema([(c, pa.list_(pa.int64()) if c == "content_event_ns"
                         else pa.bool_() if c == "is_warmup"
                         else pa.string() if c in ("window_id", "request_id", "status")
                         else pa.int64()) for c in SLO_COLUMNS])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "w.parquet")
    s = sweep(POISSON_SEARCH, slos=[slo("ttft", "ttft", 100)])
    manifest = {"requests_file": "w.parquet", "submitted": 4, "unresolved": 0,
                "requested_span_s": 0.3, "achieved_span_s": 0.3}
    verdict = judge_window(manifest, tmp_path, s, s.plan(s.arms[0]), "prose")
    assert verdict["attainment"] == pytest.approx(0.5)  # r0, r1 of 4 submitted
    assert not verdict["sustained"] and "below the target" in verdict["why"]
    manifest["unresolved"] = 2
    assert "unresolved" in judge_window(manifest, tmp_path, s, s.plan(s.arms[0]), "prose")["why"]


def test_the_slo_frontier_example_parses():
    from pathlib import Path

    from benchledger.sweep.spec import load_sweep

    example = load_sweep(Path(__file__).parents[3] / "docs/examples/slo_frontier.toml")
    assert [slo.metric for slo in example.slos] == ["ttft", "tpot"]
    assert {c.metric for c in example.comparisons} == {"frontier", "goodput"}
    assert example.arm("spec-on-search").rate_search is not None
    assert [p.label for p in example.arm("spec-on").load_points] == [
        "c64-r4", "c64-r16", "c64-r64"]


@pytest.mark.parametrize(("throughput", "per_user", "expected"), [
    ("no finding", "no finding", "no finding"),
    ("not decidable", "no finding", "no finding"),  # noisy: said in the reason
    (None, "no finding", "not decidable"),
])
def test_an_aa_pair_never_dominates(throughput, per_user, expected):
    from benchledger.warehouse.frontier import control_finding

    word, reason = control_finding(throughput, per_user)
    assert word == expected
    if throughput == "not decidable":
        assert "excluded 0 on throughput" in reason
