"""Issue #27's sweep keys, load points and the frontier's verdict words (no server)."""

from __future__ import annotations

import itertools
import textwrap

import pytest

from benchledger.client.streams import constant_arrivals
from benchledger.raw import window_stem
from benchledger.sweep import LoadPoint, SweepError, parse_sweep
from benchledger.warehouse.frontier import finding

BASE = """
    [sweep]
    name = "s"
    [defaults]
    concurrency = [4, 16]
    {defaults}
    [[arms]]
    name = "a"
    server = "simulator"
    model = "sim-model"
    [[workloads]]
    name = "prose"
    [[workloads]]
    name = "code"
    {more}
    """


def sweep(defaults: str = "", more: str = ""):
    return parse_sweep(textwrap.dedent(BASE.format(defaults=textwrap.dedent(defaults),
                                                   more=textwrap.dedent(more))))


def test_a_rate_ladder_is_one_load_point_per_rate_and_concurrency():
    plan = sweep('arrival = "poisson"\nrate_rps = [8, 2]').arms[0]
    points = sweep('arrival = "poisson"\nrate_rps = [8, 2]').plan(plan).load_points
    assert points == [LoadPoint(4, 2.0), LoadPoint(4, 8.0), LoadPoint(16, 2.0),
                      LoadPoint(16, 8.0)]
    assert [p.label for p in points[:2]] == ["c4-r2", "c4-r8"]
    assert window_stem("prose", LoadPoint(64, 2.5)) == "prose-c64-r2.5"
    # one rate keeps the windows' older names
    one = sweep('arrival = "poisson"\nrate_rps = 3')
    assert [p.label for p in one.plan(one.arms[0]).load_points] == ["c4", "c16"]
    assert window_stem("prose", 4) == "prose-c4"


def test_a_rate_ladder_needs_an_open_loop():
    with pytest.raises(SweepError, match="rate ladder"):
        sweep("rate_rps = [1, 2]")


def test_constant_arrivals_are_evenly_spaced():
    assert list(itertools.islice(constant_arrivals(4.0), 4)) == [0.0, 0.25, 0.5, 0.75]
    assert sweep('arrival = "constant"\nrate_rps = [1, 4]').plan(
        sweep('arrival = "constant"\nrate_rps = [1, 4]').arms[0]).rate_ladder


def test_slos_parse_and_apply_per_workload():
    s = sweep(more="""
        [[slos]]
        name = "ttft"
        metric = "ttft"
        max_ms = 500
        percentile = 90
        [[slos]]
        name = "tpot-code"
        metric = "tpot"
        max_ms = 40
        workloads = ["code"]
        [slo_target]
        attainment = 0.95
        """)
    assert [slo.name for slo in s.slos_of("prose")] == ["ttft"]
    assert [slo.name for slo in s.slos_of("code")] == ["ttft", "tpot-code"]
    assert s.slos[0].max_s == 0.5 and s.slo_target.attainment == 0.95


@pytest.mark.parametrize(("more", "message"), [
    ('[[slos]]\nname = "x"\nmetric = "ttft"\nmax_ms = 1\n'
     '[[slos]]\nname = "x"\nmetric = "tpot"\nmax_ms = 1', "duplicate name"),
    ('[[slos]]\nname = "x"\nmetric = "ttft"\nmax_ms = 1\nworkloads = ["chat"]',
     "no workload named"),
    ('[[slos]]\nname = "x"\nmetric = "latency"\nmax_ms = 1', "slos"),
    ('[[slos]]\nname = "x"\nmetric = "ttft"\nmax_ms = 0', "max_ms"),
])
def test_bad_slos_are_refused_by_name(more, message):
    with pytest.raises(SweepError, match=message):
        sweep(more=more)


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
    assert finding(throughput, per_user)[0] == expected
