"""Sweep files: the bundled ones parse, bad ones fail naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchledger.sweep.spec import SweepError, load_sweep, parse_sweep
from tests.sweeps import simulator_arm, sweep, toml, variant, write_sweep

REPO = Path(__file__).resolve().parents[3]

MINIMAL = sweep("t", [simulator_arm("a")])


def parsed(changes: dict | None = None, source: str = "<sweep>", base: dict = MINIMAL):
    """`base` (MINIMAL) with `changes` (tests.sweeps.variant), parsed as a sweep file is."""
    return parse_sweep(toml(variant(base, changes or {})), source)


def test_demo_sweep_plan():
    sweep = load_sweep(REPO / "dags" / "sweeps" / "demo.toml")
    assert [a.name for a in sweep.arms] == ["spec-on", "spec-off", "spec-on-again"]
    speed, energy = sweep.comparisons
    for comparison in (speed, energy):
        assert (comparison.a, comparison.b, comparison.control) == (
            "spec-off", "spec-on", ["spec-on", "spec-on-again"])
    assert (speed.metric, energy.metric) == ("decode_rate", "energy_per_token")
    # the pretend dcgm-exporter page of each arm's node: clocks and the energy counter
    assert (sweep.arm("spec-on").clock_source, sweep.arm("spec-on").clock_url) == (
        "dcgm", "{base_url}/dcgm")
    assert [w.name for w in sweep.workloads] == ["code", "prose"]
    on, off = sweep.arm("spec-on"), sweep.arm("spec-off")
    assert on.arm.is_speculative and not off.arm.is_speculative
    assert (on.restarts, on.requests, on.min_requests) == (3, 15, 15)
    assert sweep.sweep.airflow_schedule is None and sweep.dag_id == "benchledger_demo"


def test_protocol_floor_on_n():
    spec = variant(MINIMAL, {"arms": {"a": {"simulator": {"speculative": True}}}})
    assert parsed(base=spec).arm("a").min_requests == 15
    assert parsed().arm("a").min_requests == 5
    raised = {"defaults": {"min_requests": 20, "requests": 20}}
    assert parsed(raised, base=spec).arm("a").min_requests == 20
    with pytest.raises(SweepError, match=r"min_requests = 10 is below the protocol's n >= 15"):
        parsed({"defaults": {"min_requests": 10}}, base=spec)
    with pytest.raises(SweepError, match=r"requests = 3 is below the n the gate requires \(15"):
        parsed({"defaults": {"requests": 3}}, base=spec)


def test_unknown_key_names_file_and_key_path(tmp_path):
    bad = tmp_path / "bad.toml"
    write_sweep(bad, variant(MINIMAL, {"arms": {"a": {"modle": "x"}}}))
    with pytest.raises(SweepError) as err:
        load_sweep(bad)
    assert str(bad) in str(err.value) and "arms[0].modle: unknown key" in str(err.value)


def test_wrong_type_names_key_and_value():
    with pytest.raises(SweepError) as err:
        parsed({"defaults": {"requests": "many"}}, "s.toml")
    assert "s.toml: defaults.requests:" in str(err.value) and "'many'" in str(err.value)


def test_external_arm_needs_base_url_and_is_single_instance():
    external = {"arms": {"a": {"server": "external"}}}
    with pytest.raises(SweepError, match=r"arms\[0\]: server = 'external' needs a 'base_url'"):
        parsed(external)
    plan = parsed(variant(external, {"arms": {"a": {"model": "m",
                                                    "base_url": "http://127.0.0.1:9"}}}))
    assert plan.arm("a").restarts == 1


def test_unknown_prompt_set_and_duplicate_arms_are_errors():
    with pytest.raises(SweepError, match="not a built-in prompt set"):
        parsed({"workloads": {"code": {"name": "poems"}}})
    doubled = {"arms": [*MINIMAL["arms"], simulator_arm("a", model="m")]}
    with pytest.raises(SweepError, match=r"duplicate name\(s\) \['a'\]"):
        parsed(doubled)


def test_invalid_toml_names_file():
    with pytest.raises(SweepError, match="x.toml: not valid TOML"):
        parse_sweep("[sweep", "x.toml")


TWO_ARMS = variant(MINIMAL, {"arms": [*MINIMAL["arms"], simulator_arm("b")]})


def test_an_ab_between_identical_arms_is_refused_naming_the_control_route():
    compared = {"comparisons": [{"a": "a", "b": "b", "metric": "decode_rate"}]}
    with pytest.raises(SweepError) as err:
        parsed(compared, "ab.toml", base=TWO_ARMS)
    message = str(err.value)
    assert ("ab.toml: comparisons[0]: rule ab_arms_differ (T11): arms 'a' and 'b' have "
            "identical server settings") in message
    assert "A/A control, not an A/B" in message


def test_comparisons_name_real_arms_and_known_metrics():
    differs = variant(TWO_ARMS, {"arms": {"b": {"simulator": {"speculative": True}}}})

    def compared(b: str, metric: str, **keys) -> dict:
        return {"comparisons": [{"a": "a", "b": b, "metric": metric, **keys}]}

    ok = parsed(compared("b", "ttft", control=["b", "a"]), base=differs)
    assert ok.comparisons[0].control == ["b", "a"]
    with pytest.raises(SweepError, match=r"no arm named \['c'\]"):
        parsed(compared("c", "ttft"), base=differs)
    with pytest.raises(SweepError, match=r"comparisons\[0\]\.metric"):
        parsed(compared("b", "speed"), base=differs)


def test_arm_settings_that_need_each_other():
    poisson = {"defaults": {"arrival": "poisson"}}
    with pytest.raises(SweepError, match=r"arms\[0\] \(a\): arrival = 'poisson' needs rate_rps"):
        parsed(poisson)
    assert parsed({"defaults": {"arrival": "poisson", "rate_rps": 2.0}}).arm("a").rate_rps
    with pytest.raises(SweepError, match=r"clock_source = 'http' needs a clock_url"):
        parsed({"defaults": {"clock_source": "http"}})


def test_retry_settings_default_and_bounds():
    """[sweep] retries (0..10, default 1) and retry_delay_s (0..3600 s, default 10): an
    error names the key and the bound."""
    default = parsed().sweep
    assert (default.retries, default.retry_delay_s) == (1, 10.0)
    chosen = parsed({"sweep": {"retries": 0, "retry_delay_s": 0.5}}).sweep
    assert (chosen.retries, chosen.retry_delay_s) == (0, 0.5)
    for keys, says in [({"retries": 11}, r"sweep\.retries: .*less than or equal to 10"),
                       ({"retries": -1}, r"sweep\.retries: .*greater than or equal to 0"),
                       ({"retries": 1.5}, r"sweep\.retries: .*integer"),
                       ({"retry_delay_s": 3601}, r"sweep\.retry_delay_s: .*less than or "
                                                 r"equal to 3600"),
                       ({"retry_delay_s": -0.1}, r"sweep\.retry_delay_s: .*greater than or "
                                                 r"equal to 0"),
                       ({"retry_delay_s": float("inf")}, r"sweep\.retry_delay_s: .*finite")]:
        with pytest.raises(SweepError, match=says):
            parsed({"sweep": keys}, "r.toml")
    with pytest.raises(SweepError, match=r"defaults\.retries: unknown key"):
        parsed({"defaults": {"retries": 2}})
