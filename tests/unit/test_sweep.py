"""Sweep files: the bundled ones parse, bad ones fail naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchledger.sweep.spec import SweepError, load_sweep, parse_sweep

REPO = Path(__file__).resolve().parents[2]

MINIMAL = """
[sweep]
name = "t"
[[arms]]
name = "a"
server = "simulator"
model = "sim-model"
[[workloads]]
name = "code"
"""


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
    spec = MINIMAL + "[arms.simulator]\nspeculative = true\n"
    assert parse_sweep(spec).arm("a").min_requests == 15
    assert parse_sweep(MINIMAL).arm("a").min_requests == 5
    raised = spec.replace('name = "t"', 'name = "t"\n[defaults]\nmin_requests = 20\n'
                                        'requests = 20')
    assert parse_sweep(raised).arm("a").min_requests == 20
    with pytest.raises(SweepError, match=r"min_requests = 10 is below the protocol's n >= 15"):
        parse_sweep(spec.replace('name = "t"', 'name = "t"\n[defaults]\nmin_requests = 10'))
    with pytest.raises(SweepError, match=r"requests = 3 is below the n the gate requires \(15"):
        parse_sweep(spec.replace('name = "t"', 'name = "t"\n[defaults]\nrequests = 3'))


def test_unknown_key_names_file_and_key_path(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(MINIMAL.replace('model = "sim-model"', 'model = "sim-model"\nmodle = "x"'))
    with pytest.raises(SweepError) as err:
        load_sweep(bad)
    assert str(bad) in str(err.value) and "arms[0].modle: unknown key" in str(err.value)


def test_wrong_type_names_key_and_value():
    with pytest.raises(SweepError) as err:
        parse_sweep(MINIMAL.replace('name = "t"', 'name = "t"\n[defaults]\nrequests = "many"'),
                    "s.toml")
    assert "s.toml: defaults.requests:" in str(err.value) and "'many'" in str(err.value)


def test_external_arm_needs_base_url_and_is_single_instance():
    text = MINIMAL.replace('server = "simulator"', 'server = "external"')
    with pytest.raises(SweepError, match=r"arms\[0\]: server = 'external' needs a 'base_url'"):
        parse_sweep(text)
    sweep = parse_sweep(text.replace('model = "sim-model"',
                                     'model = "m"\nbase_url = "http://127.0.0.1:9"'))
    assert sweep.arm("a").restarts == 1


def test_unknown_prompt_set_and_duplicate_arms_are_errors():
    with pytest.raises(SweepError, match="not a built-in prompt set"):
        parse_sweep(MINIMAL.replace('name = "code"', 'name = "poems"'))
    doubled = MINIMAL + '[[arms]]\nname = "a"\nserver = "simulator"\nmodel = "m"\n'
    with pytest.raises(SweepError, match=r"duplicate name\(s\) \['a'\]"):
        parse_sweep(doubled)


def test_invalid_toml_names_file():
    with pytest.raises(SweepError, match="x.toml: not valid TOML"):
        parse_sweep("[sweep", "x.toml")


TWO_ARMS = MINIMAL + '[[arms]]\nname = "b"\nserver = "simulator"\nmodel = "sim-model"\n'


def test_an_ab_between_identical_arms_is_refused_naming_the_control_route():
    text = TWO_ARMS + '[[comparisons]]\na = "a"\nb = "b"\nmetric = "decode_rate"\n'
    with pytest.raises(SweepError) as err:
        parse_sweep(text, "ab.toml")
    message = str(err.value)
    assert ("ab.toml: comparisons[0]: rule ab_arms_differ (T11): arms 'a' and 'b' have "
            "identical server settings") in message
    assert "A/A control, not an A/B" in message


def test_comparisons_name_real_arms_and_known_metrics():
    differs = TWO_ARMS + "[arms.simulator]\nspeculative = true\n"
    ok = parse_sweep(differs + '[[comparisons]]\na = "a"\nb = "b"\nmetric = "ttft"\n'
                     'control = ["b", "a"]\n')
    assert ok.comparisons[0].control == ["b", "a"]
    with pytest.raises(SweepError, match=r"no arm named \['c'\]"):
        parse_sweep(differs + '[[comparisons]]\na = "a"\nb = "c"\nmetric = "ttft"\n')
    with pytest.raises(SweepError, match=r"comparisons\[0\]\.metric"):
        parse_sweep(differs + '[[comparisons]]\na = "a"\nb = "b"\nmetric = "speed"\n')


def test_arm_settings_that_need_each_other():
    poisson = MINIMAL.replace('name = "t"', 'name = "t"\n[defaults]\narrival = "poisson"')
    with pytest.raises(SweepError, match=r"arms\[0\] \(a\): arrival = 'poisson' needs rate_rps"):
        parse_sweep(poisson)
    assert parse_sweep(poisson.replace('arrival = "poisson"',
                                       'arrival = "poisson"\nrate_rps = 2.0')).arm("a").rate_rps
    http = MINIMAL.replace('name = "t"', 'name = "t"\n[defaults]\nclock_source = "http"')
    with pytest.raises(SweepError, match=r"clock_source = 'http' needs a clock_url"):
        parse_sweep(http)


def test_retry_settings_default_and_bounds():
    """[sweep] retries (0..10, default 1) and retry_delay_s (0..3600 s, default 10): an
    error names the key and the bound."""
    default = parse_sweep(MINIMAL).sweep
    assert (default.retries, default.retry_delay_s) == (1, 10.0)
    chosen = parse_sweep(MINIMAL.replace('name = "t"',
                                         'name = "t"\nretries = 0\nretry_delay_s = 0.5')).sweep
    assert (chosen.retries, chosen.retry_delay_s) == (0, 0.5)
    for line, says in [("retries = 11", r"sweep\.retries: .*less than or equal to 10"),
                       ("retries = -1", r"sweep\.retries: .*greater than or equal to 0"),
                       ("retries = 1.5", r"sweep\.retries: .*integer"),
                       ("retry_delay_s = 3601", r"sweep\.retry_delay_s: .*less than or equal "
                                                r"to 3600"),
                       ("retry_delay_s = -0.1", r"sweep\.retry_delay_s: .*greater than or "
                                                r"equal to 0"),
                       ("retry_delay_s = inf", r"sweep\.retry_delay_s: .*finite")]:
        with pytest.raises(SweepError, match=says):
            parse_sweep(MINIMAL.replace('name = "t"', f'name = "t"\n{line}'), "r.toml")
    with pytest.raises(SweepError, match=r"defaults\.retries: unknown key"):
        parse_sweep(MINIMAL.replace('name = "t"', 'name = "t"\n[defaults]\nretries = 2'))
