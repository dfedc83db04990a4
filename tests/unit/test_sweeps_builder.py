"""tests/sweeps.py, the sweep builder the other tests write their sweeps with: what it
writes parses back to the dict it was given, and a variant changes exactly the keys named."""

from __future__ import annotations

import tomllib

import pytest

from benchledger.sweep.spec import parse_sweep
from tests.sweeps import (
    DELETE,
    NO_CLOCK,
    cluster_sweep,
    command_arm,
    defaults,
    simulator_arm,
    sweep,
    toml,
    variant,
)

BASE = sweep("b", [simulator_arm("a", {"step_ms": 2.0}), command_arm("c", "serve --port {port}")],
             defaults=defaults(clock=NO_CLOCK),
             workloads=["code", {"name": "p", "prompt_set": "prose"}],
             comparisons=[{"a": "a", "b": "c", "metric": "decode_rate"}])


def test_the_text_parses_back_to_the_dict_and_is_a_sweep():
    assert tomllib.loads(toml(BASE)) == BASE
    plan = parse_sweep(toml(BASE)).arm("a")
    assert (plan.requests, plan.restarts, plan.clock_source) == (15, 2, "none")
    assert [w.name for w in parse_sweep(toml(BASE)).workloads] == ["code", "p"]


def test_a_variant_changes_the_named_keys_only_and_leaves_its_base_alone():
    before = toml(BASE)
    changed = variant(BASE, {"defaults": {"requests": 20, "warmup": DELETE},
                             "arms": {"a": {"simulator": {"step_ms": 3.0}}, "c": DELETE},
                             "workloads": {"p": {"prompt_cache": "cold"}},
                             "sweep": {"retries": 0}})
    assert toml(BASE) == before
    assert changed["defaults"] == {**{k: v for k, v in BASE["defaults"].items()
                                      if k != "warmup"}, "requests": 20}
    assert changed["arms"] == [simulator_arm("a", {"step_ms": 3.0})]
    assert changed["workloads"][1] == {"name": "p", "prompt_set": "prose", "prompt_cache": "cold"}
    assert changed["sweep"] == {"name": "b", "retries": 0}
    # a list replaces, it does not merge
    assert variant(BASE, {"workloads": ["prose"]})["workloads"] == ["prose"]
    with pytest.raises(KeyError, match="no table named 'z'"):
        variant(BASE, {"arms": {"z": {"model": "m"}}})


def test_defaults_leave_out_a_key_given_as_none_and_the_cluster_sweep_is_the_old_one():
    assert "restarts" not in defaults(restarts=None)
    assert defaults(clock=None, requests=5) == {"requests": 5, "warmup": 1, "restarts": 2,
                                                "max_tokens": 24}
    two = cluster_sweep("cl", [("x", "node-a")], restarts=1, sweep_keys={"retries": 0})
    assert two["sweep"] == {"name": "cl", "schedule": "none", "retries": 0}
    assert two["arms"] == [{"name": "x", "server": "simulator", "model": "sim-model",
                            "node": "node-a", "simulator": {"speculative": True,
                                                            "step_ms": 2.0}}]
    assert parse_sweep(toml(two)).arm("x").restarts == 1
