"""Hostile sweep files: whatever the file holds, loading it ends in a Sweep that is safe to
run or in one SweepError naming the file and key; never a traceback, a path outside the
data folder, an unbounded wait or a number no column can hold.

Property-based (hypothesis, derandomized in tests/conftest.py): a valid sweep with one key
replaced by an arbitrary TOML value, and arbitrary bytes as a file.
"""

from __future__ import annotations

import math
import re
import tomllib

import pytest
import tomli_w
from hypothesis import example, given
from hypothesis import strategies as st

from benchledger.raw.layout import RunLayout
from benchledger.sweep.spec import (
    MAX_REQUESTS,
    MAX_WAIT_S,
    Defaults,
    Sweep,
    SweepError,
    load_sweep,
    parse_sweep,
)

BASE = {
    "sweep": {"name": "t", "schedule": "@daily"},
    "defaults": {"requests": 5, "warmup": 1, "restarts": 2, "concurrency": [1, 4]},
    "arms": [{"name": "a", "server": "simulator", "model": "sim-model"},
             {"name": "b", "server": "command", "model": "m",
              "command": "python -m my.server --port {port}"}],
    "workloads": [{"name": "code"}],
}
# Where a hostile value may land: (table, index in an array of tables or None, key).
KEYS = [("sweep", None, k) for k in ("name", "schedule", "description", "retries",
                                     "retry_delay_s")]
KEYS += [("defaults", None, k) for k in Defaults.model_fields]
KEYS += [("arms", i, k) for i in (0, 1) for k in (
    "name", "model", "command", "base_url", "health_path", "metrics_path", "node",
    "api_key_env", "requests", "restarts", "concurrency", "drain_timeout_s", "speculative")]
KEYS += [("workloads", 0, k) for k in ("name", "prompt_set", "input_tokens", "max_tokens")]

SAFE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
NASTY_TEXT = st.sampled_from(["../x", "../../etc/passwd", "a/b", "a b", 'q"q', "x\x00y",
                              "\u202eevil", "{port.__class__.__mro__}", "$(rm -rf /)",
                              "", " ", "ünïcode", "a" * 5000, "C:\\x", "~/x"])
SCALARS = st.one_of(
    st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(max_size=50), NASTY_TEXT)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=4),
                   st.dictionaries(st.text(max_size=5), SCALARS, max_size=3))


def _with(key: tuple, value) -> str:
    table, index, name = key
    doc = {k: (list(map(dict, v)) if isinstance(v, list) else dict(v)) for k, v in BASE.items()}
    target = doc[table] if index is None else doc[table][index]
    target[name] = value
    return tomli_w.dumps(doc)


def _assert_safe(sweep: Sweep, tmp_path) -> None:
    """What an accepted sweep may reach: paths, task ids, waits, stored numbers."""
    names = [sweep.sweep.name, *(a.name for a in sweep.arms), *(w.name for w in sweep.workloads)]
    assert all(SAFE_NAME.fullmatch(n) for n in names), names
    layout = RunLayout(tmp_path / "data", "manual__x")
    for arm in sweep.arms:
        plan = sweep.plan(arm)
        for k in range(plan.restarts):
            slot = layout.slot_dir(arm.name, k).resolve()
            assert slot.is_relative_to((tmp_path / "data").resolve())
        for value in (plan.drain_timeout_s, plan.request_timeout_s, plan.ready_timeout_s):
            assert math.isfinite(value) and 0 < value <= MAX_WAIT_S
        assert 1 <= plan.requests <= MAX_REQUESTS and -(2**63) <= plan.seed < 2**63
        assert math.isfinite(plan.temperature)
        for text in (arm.model, *arm.commands, arm.node, arm.health_path):
            assert "\x00" not in text


@given(key=st.sampled_from(KEYS), value=VALUES)
@example(key=("arms", 0, "name"), value="../x")
@example(key=("defaults", None, "requests"), value=10**9)
@example(key=("defaults", None, "drain_timeout_s"), value=math.inf)
@example(key=("arms", 1, "command"), value="x\x00y")
def test_any_value_anywhere_loads_safely_or_fails_naming_the_key(tmp_path_factory, key, value):
    text = _with(key, value)
    try:
        sweep = parse_sweep(text, source="hostile.toml")
    except SweepError as exc:
        message = str(exc)  # names the file, and where in it the problem is
        assert "hostile.toml" in message and (key[0] in message or key[2] in message)
        return
    _assert_safe(sweep, tmp_path_factory.mktemp("safe"))


@given(data=st.binary(max_size=400))
@example(data=b"\xff\xfe[sweep]\n")
@example(data=b'[sweep]\nname = "t"\x00\n')
def test_arbitrary_bytes_are_a_sweep_or_one_clear_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "s.toml"
    path.write_bytes(data)
    try:
        load_sweep(path)
    except SweepError as exc:
        assert str(path) in str(exc)


@pytest.mark.parametrize("name", ["../x", "a/b", "a b", 'q"', "x\x00y", "", "A", "-x",
                                  "\u00e9t\u00e9", "a" * 64])
def test_names_that_could_leave_the_data_folder_are_refused_naming_the_key(name):
    with pytest.raises(SweepError, match=r"arms\[0\]\.name"):
        parse_sweep(_with(("arms", 0, "name"), name), source="s.toml")


def test_a_non_utf8_file_names_the_byte_and_its_offset(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(_with(("arms", 0, "model"), "caf\u00e9").encode("latin-1"))
    with pytest.raises(SweepError, match=rf"{re.escape(str(path))}: not UTF-8 text "
                                         r"\(byte 0xe9 at offset \d+\)"):
        load_sweep(path)


@pytest.mark.parametrize(("key", "value", "says"), [
    (("defaults", None, "requests"), 10**9, r"defaults\.requests: .*less than or equal to "
                                            rf"{MAX_REQUESTS}"),
    (("arms", 0, "restarts"), 10**6, r"arms\[0\]\.restarts"),
    (("defaults", None, "drain_timeout_s"), math.inf, r"defaults\.drain_timeout_s"),
    (("defaults", None, "temperature"), math.nan, r"defaults\.temperature"),
    (("defaults", None, "seed"), 2**64, r"defaults\.seed"),
    (("arms", 1, "command"), "python -m x --port {port}\x00", r"arms\[1\]\.command"),
    (("arms", 0, "health_path"), "health", r"arms\[0\]\.health_path"),
    (("sweep", None, "schedule"), "every day at noon", r"sweep: .*schedule 'every day at noon'"),
])
def test_out_of_range_values_fail_before_anything_runs(key, value, says):
    with pytest.raises(SweepError, match=says):
        parse_sweep(_with(key, value), source="s.toml")


def test_the_base_of_these_properties_is_itself_a_valid_sweep(tmp_path):
    sweep = parse_sweep(tomli_w.dumps(BASE))
    assert [a.name for a in sweep.arms] == ["a", "b"]
    _assert_safe(sweep, tmp_path)
    assert tomllib.loads(_with(("arms", 0, "name"), "z"))["arms"][0]["name"] == "z"
