"""A sweep whose settings guarantee that nothing it measures can publish is refused when
it is parsed, naming the keys that clash and how to fix them (issue #23, item 3)."""

from __future__ import annotations

import pytest

from benchledger.sweep.spec import SweepError, parse_recorded, parse_sweep
from tests.sweeps import HTTP_CLOCK, simulator_arm, sweep, toml


def _sweep(defaults: dict | None = None, arm: dict | None = None) -> str:
    """The sweep's text: one simulator arm with `arm`'s keys, [defaults] `defaults`."""
    return toml(sweep("t", [simulator_arm("a", **(arm or {}))], defaults=defaults or {}))


NO_CLOCK = {"clock_source": "none"}


def test_no_clock_source_with_required_clocks_is_refused_naming_both_keys():
    with pytest.raises(SweepError) as refused:
        parse_sweep(_sweep(NO_CLOCK), source="s.toml")
    message = str(refused.value)
    (line,) = [part for part in message.splitlines() if "clock_source" in part]
    assert line.strip().startswith("s.toml: arms[0] (a):")
    # both keys, the rule it would fail and both ways out, on one line
    for words in ("clock_source = 'none'", "require_clock_check = true", "clock_under_load",
                  "set clock_source", "require_clock_check = false"):
        assert words in line


def test_the_clash_is_found_wherever_the_keys_are_set():
    # an arm's own clock_source against the default require_clock_check
    with pytest.raises(SweepError, match=r"arms\[0\] \(a\): clock_source = 'none'"):
        parse_sweep(_sweep(arm=NO_CLOCK))
    # an arm that turns the check back on under a sweep-wide "none"
    with pytest.raises(SweepError, match=r"require_clock_check = true"):
        parse_sweep(_sweep({**NO_CLOCK, "require_clock_check": False},
                           {"require_clock_check": True}))


def test_accepted_ways_out():
    unchecked = parse_sweep(_sweep({**NO_CLOCK, "require_clock_check": False}))
    assert unchecked.arm("a").clock_source == "none"
    http = parse_sweep(_sweep(HTTP_CLOCK))
    assert http.arm("a").require_clock_check


def test_a_recorded_run_that_can_never_publish_still_parses():
    """A run recorded before the refusal existed must still derive (its entries blocked by
    clock_under_load, as they were); only a new run is refused."""
    text = _sweep(NO_CLOCK)
    with pytest.raises(SweepError):
        parse_sweep(text, source="s.toml")
    assert parse_recorded(text, None, "recorded").arm("a").clock_source == "none"
