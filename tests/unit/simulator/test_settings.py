"""Each setting declared once: the simulator's options reach the sweep, the CLI and the
launch command alike, and [defaults] merge into arms the same way for every key.

The pinned command lines were captured from the code before settings were declared once:
a launch command enters the effective-config hash, so it must not drift.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchledger.server.lifecycle import simulator_command_template
from benchledger.simulator import options
from benchledger.simulator.engine import SimConfig
from benchledger.simulator.server import build_parser, config_from_args
from benchledger.sweep.spec import (
    PER_ARM_KEYS,
    ArmPlan,
    Defaults,
    SimulatorOptions,
    SweepError,
    load_sweep,
    parse_sweep,
)
from tests.sweeps import simulator_arm, sweep, toml

REPO = Path(__file__).resolve().parents[3]

HEAD = ["-m", "benchledger.simulator", "--host", "127.0.0.1", "--port", "{port}",
        "--seed", "{seed}", "--model"]
DEMO_SPEC_ON = [*HEAD, "sim-model", "--speculative", "--num-speculative-tokens", "3",
                "--step-ms", "2.0", "--prefill-tok-s", "20000.0", "--batch-penalty", "0.08",
                "--speed-spread", "0.03", "--acceptance-code", "0.8",
                "--acceptance-prose", "0.45", "--startup-delay-s", "0.0",
                "--log-interval-s", "0.25"]
DEMO_SPEC_OFF = [*HEAD, "sim-model", "--no-speculative", "--num-speculative-tokens", "3",
                 "--step-ms", "2.0", "--prefill-tok-s", "20000.0", "--batch-penalty", "0.08",
                 "--speed-spread", "0.03", "--acceptance-code", "0.8",
                 "--acceptance-prose", "0.45", "--startup-delay-s", "0.0",
                 "--log-interval-s", "0.25"]

# Every [arms.simulator] key away from its default, and the flags that are passed only
# when they matter (stall_s only with stall_every, metrics_generation_scale only when not
# 1, usage and prefix_cache only when off, --low-clock only on the listed restarts).
EVERY_KEY = sweep(
    "every",
    [
        simulator_arm(
            "all",
            {
                "speculative": True,
                "num_speculative_tokens": 5,
                "step_ms": 3,
                "prefill_tok_s": 1000,
                "batch_penalty": 0.1,
                "speed_spread": 0.2,
                "usage": False,
                "acceptance_code": 0.7,
                "acceptance_prose": 0.3,
                "startup_delay_s": 1.5,
                "prefix_cache": False,
                "stall_every": 4,
                "stall_s": 2,
                "log_interval_s": 0.5,
                "low_clock_restarts": [0, 2],
                "metrics_generation_scale": 0.9,
                "metrics_family": "llamacpp",
                "health": False,
                "num_gpus": 4,
                "low_clock_gpu": 2,
                "log_requests": True,
                "lossy_share": 0.2,
            },
            model="m1",
        ),
        simulator_arm("stall-default-s", {"stall_every": 3}, model="m2"),
        simulator_arm(
            "defaults-spelled-out",
            {"stall_s": 5, "usage": True, "prefix_cache": True, "metrics_generation_scale": 1.0},
            model="m2",
        ),
        simulator_arm("empty-table", {}, model="m3"),
        simulator_arm("no-table", model="m3"),
    ],
    defaults={"restarts": 3},
)
ALWAYS = ["--num-speculative-tokens", "3", "--step-ms", "4.0", "--prefill-tok-s", "20000.0",
          "--batch-penalty", "0.08", "--speed-spread", "0.03", "--acceptance-code", "0.8",
          "--acceptance-prose", "0.45", "--startup-delay-s", "0.0"]


def _all_flags(low_clock: bool) -> list[str]:
    return [*HEAD, "m1", "--speculative", "--num-speculative-tokens", "5", "--step-ms", "3.0",
            "--prefill-tok-s", "1000.0", "--batch-penalty", "0.1", "--speed-spread", "0.2",
            "--acceptance-code", "0.7", "--acceptance-prose", "0.3",
            "--startup-delay-s", "1.5", "--no-usage", "--no-prefix-cache",
            "--stall-every", "4", "--stall-s", "2.0", "--log-interval-s", "0.5",
            "--num-gpus", "4", *(["--low-clock"] if low_clock else []), "--low-clock-gpu", "2",
            "--metrics-generation-scale", "0.9", "--metrics-family", "llamacpp", "--no-health",
            "--enable-log-requests", "--lossy-share", "0.2"]


EVERY_KEY_ARGV = {
    "all": {k: _all_flags(k in (0, 2)) for k in range(4)},
    "stall-default-s": {k: [*HEAD, "m2", "--no-speculative", *ALWAYS, "--stall-every", "3",
                            "--stall-s", "600.0", "--log-interval-s", "1.0"]
                        for k in range(4)},
    "defaults-spelled-out": {k: [*HEAD, "m2", "--no-speculative", *ALWAYS,
                                 "--log-interval-s", "1.0"] for k in range(4)},
    "empty-table": {k: [*HEAD, "m3", "--no-speculative", *ALWAYS, "--log-interval-s", "1.0"]
                    for k in range(4)},
    "no-table": {k: [*HEAD, "m3"] for k in range(4)},
}


def _argv(arm, restart: int) -> list[str]:
    argv = simulator_command_template(arm, restart)
    assert argv[0] == sys.executable
    return argv[1:]


# --- the launch command is pinned ---------------------------------------------------------


def test_demo_arms_launch_the_same_commands_as_before():
    sweep = load_sweep(REPO / "dags" / "sweeps" / "demo.toml")
    expected = {"spec-on": DEMO_SPEC_ON, "spec-off": DEMO_SPEC_OFF,
                "spec-on-again": DEMO_SPEC_ON}
    for arm in sweep.arms:
        for k in range(sweep.plan(arm).restarts + 1):
            assert _argv(arm, k) == expected[arm.name], (arm.name, k)


def test_every_simulator_key_launches_the_same_command_as_before():
    sweep = parse_sweep(toml(EVERY_KEY))
    for arm in sweep.arms:
        for k, expected in EVERY_KEY_ARGV[arm.name].items():
            assert _argv(arm, k) == expected, (arm.name, k)


# --- one model of the simulator's options -------------------------------------------------

# The [arms.simulator] keys (and their defaults) a sweep could set before settings were
# declared once; existing sweep files must keep parsing the same.
SWEEP_KEYS = {
    "speculative": False, "num_speculative_tokens": 3, "step_ms": 4.0,
    "prefill_tok_s": 20000.0, "batch_penalty": 0.08, "speed_spread": 0.03, "usage": True,
    "stream_usage": True,
    "acceptance_code": 0.8, "acceptance_prose": 0.45, "startup_delay_s": 0.0,
    "prefix_cache": True, "stall_every": 0, "stall_s": 600.0, "log_interval_s": 1.0,
    "low_clock_restarts": [], "metrics_generation_scale": 1.0,
    "metrics_family": "vllm", "health": True, "num_gpus": 1, "low_clock_gpu": 0,
    "reasoning_tokens": 0, "reasoning_field": "reasoning_content", "log_requests": False,
    "lossy_share": 0.0,
}


def _options(doc: dict = EVERY_KEY, arm: str = "all"):
    sweep = parse_sweep(toml(doc))
    return next(a for a in sweep.arms if a.name == arm)


def test_sweep_keys_and_defaults_are_unchanged():
    assert _options(arm="empty-table").simulator.model_dump() == SWEEP_KEYS


def test_every_config_field_is_a_cli_flag_with_the_config_default():
    parser = build_parser()
    by_dest = {a.dest: a for a in parser._actions}
    defaults = vars(parser.parse_args(["--port", "1"]))
    for f in dataclasses.fields(SimConfig):
        assert f.name in by_dest, f"SimConfig.{f.name} has no flag"
        assert defaults[f.name] == f.default, f.name
        assert by_dest[f.name].help, f"--{f.name} has no help"
    assert config_from_args(parser.parse_args(["--port", "1"])) == SimConfig()


def test_boolean_flags_keep_their_spellings():
    parser = build_parser()
    spellings = {a.dest: a.option_strings for a in parser._actions}
    assert spellings["speculative"] == ["--speculative", "--no-speculative"]
    assert spellings["prefix_cache"] == ["--prefix-cache", "--no-prefix-cache"]
    assert spellings["usage"] == ["--no-usage"]
    assert spellings["stream_usage"] == ["--no-stream-usage"]
    assert spellings["health"] == ["--no-health"]
    assert spellings["low_clock"] == ["--low-clock"]
    assert spellings["log_requests"] == ["--enable-log-requests"]  # vLLM's spelling


def _config_at(arm, restart: int) -> SimConfig:
    argv = [part.format(port=8000, seed=7) for part in _argv(arm, restart)[2:]]
    return config_from_args(build_parser().parse_args(argv))


def test_every_sweep_key_reaches_the_simulator_config():
    """[arms.simulator] -> launch command -> the simulator's parser -> SimConfig, for
    every key, at every restart (low_clock_restarts sets low_clock per restart)."""
    sweep = parse_sweep(toml(EVERY_KEY))
    by_name = {option.name: option for option in options.OPTIONS}
    for arm in sweep.arms:
        values = arm.simulator.model_dump() if arm.simulator else SWEEP_KEYS
        for k in range(4):
            config = _config_at(arm, k)
            assert (config.model, config.seed) == (arm.model, 7)
            for option in options.SWEEP_OPTIONS:
                sent = values[option.sweep_key]
                if option.per_restart:
                    sent = k in sent
                rule = option.setting.passed
                if rule not in (options.ALWAYS, options.CHANGED) and \
                        getattr(config, rule) == by_name[rule].default:
                    continue  # e.g. stall_s: passed only with stall_every, inert without
                assert getattr(config, option.name) == sent, (arm.name, k, option.name)


def test_every_setting_is_a_flag_and_every_sweep_key_a_setting():
    flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    for option in options.OPTIONS:
        assert set(option.flags) <= flags, option.name
        assert option.setting.help, option.name
    assert {o.sweep_key for o in options.SWEEP_OPTIONS} == set(SWEEP_KEYS)
    assert set(SimulatorOptions.model_fields) == set(SWEEP_KEYS)


def test_one_range_per_setting_for_the_sweep_and_the_simulator():
    """A value outside a setting's range is refused by SimConfig (so by the simulator's
    command line) and by the sweep's [arms.simulator] table alike, naming the setting."""
    checked = 0
    for option in options.OPTIONS:
        for bound, outside in (("ge", -1), ("gt", 0), ("le", 1)):
            limit = getattr(option.setting, bound)
            if limit is None:
                continue
            value = option.type(limit + outside) if bound != "gt" else option.type(limit)
            with pytest.raises(ValueError, match=option.name):
                SimConfig(**{option.name: value})
            if option.setting.sweep:
                with pytest.raises(SweepError, match=rf"arms\[0\]\.simulator\.{option.name}:"):
                    parse_sweep(_table(f"{option.name} = {value!r}"), "s.toml")
            checked += 1
    assert checked >= 20


def _table(body: str) -> str:
    return ('[sweep]\nname = "t"\n[[arms]]\nname = "a"\nserver = "simulator"\n'
            f'model = "m"\n[arms.simulator]\n{body}\n[[workloads]]\nname = "code"\n')


def test_simulator_table_rejects_unknown_keys_and_wrong_types_naming_the_key():
    for body, expected in (
            ("speculatve = true", "arms[0].simulator.speculatve: unknown key"),
            ("low_clock = true", "arms[0].simulator.low_clock: unknown key"),
            ("max_num_seqs = 3", "arms[0].simulator.max_num_seqs: unknown key"),
            ('step_ms = "fast"', "arms[0].simulator.step_ms: Input should be a valid number"),
            ("num_speculative_tokens = 2.5",
             "arms[0].simulator.num_speculative_tokens: Input should be a valid integer"),
            ("num_speculative_tokens = 0", "arms[0].simulator.num_speculative_tokens: "
                                           "Input should be greater than or equal to 1"),
            ("acceptance_code = 1.5",
             "arms[0].simulator.acceptance_code: Input should be less than or equal"),
            ("stall_s = 0", "arms[0].simulator.stall_s: Input should be greater than 0"),
            ("metrics_generation_scale = 0", "arms[0].simulator.metrics_generation_scale: "
                                             "Input should be greater than 0"),
            ('metrics_family = "ollama"', "arms[0].simulator.metrics_family: Input should "
                                          "be 'vllm', 'sglang', 'llamacpp' or 'tgi'"),
            ("low_clock_restarts = [-1]",
             "arms[0].simulator.low_clock_restarts[0]: Input should be greater"),
            ("low_clock_restarts = 1",
             "arms[0].simulator.low_clock_restarts: Input should be a valid list")):
        with pytest.raises(SweepError) as err:
            parse_sweep(_table(body), "s.toml")
        assert f"s.toml: {expected}" in str(err.value), body


def test_the_simulator_imports_nothing_else_of_benchledger_and_the_client_no_simulator():
    code = ("import sys, benchledger.simulator.server, benchledger.simulator.options; "
            "print(sorted(m for m in sys.modules if m.startswith('benchledger.') "
            "and not m.startswith('benchledger.simulator')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = ("import sys, benchledger.client; "
            "print([m for m in sys.modules if m.startswith('benchledger.simulator')])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- per-arm values of [defaults]: one merge ---------------------------------------------

# Which [defaults] keys an arm may set for itself, and which hold for the whole sweep.
PER_ARM = {"requests": 30, "min_requests": 25, "warmup": 3, "restarts": 4, "max_tokens": 32,
           "temperature": 0.25, "concurrency": [2, 3], "drain_timeout_s": 11.0,
           "ready_timeout_s": 12.0, "arrival": "poisson", "rate_rps": 1.5,
           "clock_source": "http", "clock_url": "{base_url}/c", "min_clock_ratio": 0.7,
           "require_clock_check": False}
SWEEP_WIDE = {"request_timeout_s": 30.0, "endpoint": "completions", "prompt_cache": "cold",
              "seed": 7, "reconcile_tolerance": 0.02, "clock_interval_s": 0.3,
              "client_workers": 4, "max_client_lag_ms": 0.5, "max_burst_fraction": 0.2,
              "max_arrival_lag_ms": 250.0, "keep_output_text": True}
PLAN_FIELDS = ["arm", "requests", "min_requests_key", "warmup", "restarts", "max_tokens",
               "temperature", "concurrency", "drain_timeout_s", "request_timeout_s",
               "ready_timeout_s", "endpoint", "arrival", "rate_rps", "rate_search",
               "prompt_cache", "seed",
               "reconcile_tolerance", "clock_source", "clock_url", "clock_interval_s",
               "min_clock_ratio", "require_clock_check", "client_workers",
               "max_client_lag_ms", "max_burst_fraction", "max_arrival_lag_ms",
               "keep_output_text"]


def _toml(values: dict) -> str:
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())


def _arms(defaults: dict, *arms: str) -> str:
    return (f'[sweep]\nname = "t"\n[defaults]\n{_toml(defaults)}' + "".join(arms)
            + '[[workloads]]\nname = "code"\n')


def _arm(name: str, extra: str = "", server: str = "simulator") -> str:
    return f'[[arms]]\nname = "{name}"\nserver = "{server}"\nmodel = "m"\n{extra}'


def _plan_value(plan, key: str):
    return getattr(plan, "min_requests_key" if key == "min_requests" else key)


# Per arm too, but never beside rate_rps (one of the two gives an arm's rates): PER_ARM
# sets rate_rps, and tests/unit/sweep/test_slos.py an arm's own rate_search.
EXCLUSIVE_PER_ARM = {"rate_search"}


def test_which_defaults_an_arm_may_set_is_unchanged():
    assert set(PER_ARM_KEYS) == set(PER_ARM) | EXCLUSIVE_PER_ARM
    assert set(Defaults.model_fields) == set(PER_ARM) | EXCLUSIVE_PER_ARM | set(SWEEP_WIDE)
    assert set(ArmPlan.model_fields) == set(PLAN_FIELDS)


def test_an_arm_value_wins_over_defaults_for_every_per_arm_key():
    sweep = parse_sweep(_arms({**SWEEP_WIDE, "rate_rps": 2.0, "requests": 20},
                              _arm("own", _toml(PER_ARM)), _arm("plain")))
    own, plain = sweep.arm("own"), sweep.arm("plain")
    for key, value in PER_ARM.items():
        assert _plan_value(own, key) == value, key
        expected = {"rate_rps": 2.0, "requests": 20}.get(key, Defaults().model_dump()[key])
        assert _plan_value(plain, key) == expected, key
    for key, value in SWEEP_WIDE.items():
        assert getattr(own, key) == getattr(plain, key) == value, key
    assert (own.min_requests, plain.min_requests) == (25, 5)
    assert own.concurrency is not sweep.arms[0].concurrency  # the plan has its own list


def test_sweep_wide_keys_on_an_arm_and_bad_values_name_the_key():
    for key, value in SWEEP_WIDE.items():
        with pytest.raises(SweepError, match=rf"s\.toml: arms\[0\]\.{key}: unknown key"):
            parse_sweep(_arms({}, _arm("a", _toml({key: value}))), "s.toml")
    for key, bad in (("requests", "many"), ("requests", 0), ("concurrency", [0]),
                     ("concurrency", []), ("arrival", "open"), ("min_clock_ratio", 1.5),
                     ("ready_timeout_s", 0), ("require_clock_check", [1])):
        with pytest.raises(SweepError, match=rf"s\.toml: arms\[0\]\.{key}"):
            parse_sweep(_arms({}, _arm("a", _toml({key: bad}))), "s.toml")


def test_external_servers_run_once_whatever_the_defaults_say():
    ext = 'base_url = "http://127.0.0.1:9"\n'
    sweep = parse_sweep(_arms({"restarts": 3}, _arm("e", ext, "external"),
                              _arm("o", ext + "restarts = 1\n", "external"), _arm("s")))
    assert [sweep.plan(arm).restarts for arm in sweep.arms] == [1, 1, 3]
    with pytest.raises(SweepError, match=r"arms\[0\]: server = 'external' cannot be restarted"):
        parse_sweep(_arms({}, _arm("e", ext + "restarts = 2\n", "external")))
