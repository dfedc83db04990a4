"""The demo regression test's comparison can fail: what it must catch, it reports."""

from __future__ import annotations

import copy

from tests.demo_snapshot import differences, normalise, read_fixture


def _pick(snapshot: dict, unit: str, publishable: bool = True) -> str:
    return next(k for k, e in snapshot["entries"].items()
                if e["unit"] == unit and e["publishable"] is publishable
                and e["value"] is not None)


def test_the_fixture_equals_itself():
    fixture = read_fixture()
    assert differences(fixture, copy.deepcopy(fixture)) == []


def test_a_changed_label_count_block_or_verdict_is_reported():
    fixture = read_fixture()
    rate = _pick(fixture, "tok/s")
    for change in (("population", "completed_only"), ("n_requests", 29),
                   ("publishable", False), ("token_source", "logprobs"),
                   ("effective_config_sha256", "config-3")):  # a config no other entry has
        found = copy.deepcopy(fixture)
        found["entries"][rate][change[0]] = change[1]
        assert any(change[0] in line for line in differences(fixture, found)), change
    found = copy.deepcopy(fixture)
    found["comparisons"][0]["verdict"] = "regression"
    assert any("verdict" in line for line in differences(fixture, found))
    found = copy.deepcopy(fixture)
    found["blocks"] = found["blocks"][1:]
    assert differences(fixture, found)


def test_timing_values_are_held_within_their_spread_and_counts_exactly():
    fixture = read_fixture()
    rate = _pick(fixture, "tok/s")
    found = copy.deepcopy(fixture)
    entry = found["entries"][rate]
    entry["value"] *= 1.3
    entry["ci95_low"], entry["ci95_high"] = entry["value"] * 0.5, entry["value"] * 1.5
    assert differences(fixture, found) == []  # within the spread of a loaded machine
    entry["value"] *= 3
    assert any(f"{rate}: value" in line for line in differences(fixture, found))
    latency = next(k for k, e in fixture["entries"].items()
                   if e["unit"] == "s" and e["value"] is not None and e["statistic"] == "p50"
                   and e["publishable"])
    found = copy.deepcopy(fixture)
    found["entries"][latency]["value"] += 0.02  # scheduling on a loaded machine
    assert differences(fixture, found) == []
    found["entries"][latency]["value"] += 1.0  # a second more is no longer noise
    assert any(f"{latency}: value" in line for line in differences(fixture, found))
    # a blocked tail (a p99 of 45 requests: their slowest) is no claim: its value may move
    # with one stall, but it must stay there and stay blocked
    tail = next(k for k, e in fixture["entries"].items()
                if e["unit"] == "s" and e["value"] is not None and e["statistic"] == "p99"
                and not e["publishable"])
    found = copy.deepcopy(fixture)
    found["entries"][tail]["value"] += 1.0
    assert differences(fixture, found) == []
    found["entries"][tail]["value"] = None
    assert any(f"{tail}: value" in line for line in differences(fixture, found))
    found = copy.deepcopy(fixture)
    found["entries"][tail]["publishable"] = True
    assert any(f"{tail}: publishable" in line for line in differences(fixture, found))
    tokens = next(k for k, e in fixture["entries"].items()
                  if e.get("mean_output_tokens") is not None)
    found = copy.deepcopy(fixture)
    found["entries"][tokens]["mean_output_tokens"] += 1  # a count, not a time: exact
    assert any("mean_output_tokens" in line for line in differences(fixture, found))


def test_a_changed_explain_line_is_reported_with_its_line():
    fixture = read_fixture()
    key = next(iter(fixture["explain"]))
    found = copy.deepcopy(fixture)
    found["explain"][key] = found["explain"][key].replace("[pass]", "[FAIL]", 1)
    (line,) = differences(fixture, found)
    assert key in line and "[FAIL]" in line


def test_normalising_keeps_words_and_integers_and_drops_run_ids_hashes_and_times():
    text = ("manual__2026-12-01T21:53:23.066466+00:00/spec-on/r0/code-c1 sha256 "
            "5fe61acea3ac017faacef51688e944a3 value: 0.012345678901234567 found 15 == 15 "
            "(4 samples)")
    assert normalise(text) == ("<run>/spec-on/r0/code-c1 sha256 <hex> value: <num> found "
                               "15 == 15 (<n> samples)")


def test_the_rulers_labels_are_the_machines_and_bursts_are_counts():
    """Issue #21: the client's lag and CPU share say how busy this machine was (present,
    whatever their value); how many requests arrived in a burst is a count (exact)."""
    fixture = read_fixture()
    rate = _pick(fixture, "tok/s")
    found = copy.deepcopy(fixture)
    found["entries"][rate]["client_lag_p99_ms"] *= 10
    found["entries"][rate]["client_cpu_share"] /= 10
    assert differences(fixture, found) == []
    found["entries"][rate]["client_lag_p99_ms"] = None  # not measured: no longer the same
    assert any("client_lag_p99_ms" in line for line in differences(fixture, found))
    found = copy.deepcopy(fixture)
    found["entries"][rate]["n_burst"] = 1
    assert any("n_burst" in line for line in differences(fixture, found))
    text = normalise("expected client lag p99 <= 0.514 ms (a tenth of the median TTFT, 5.14 "
                     "ms), found client lag p99 14 ms (p50 3 ms, CPU share 0.06, 1% of events "
                     "bunched)")
    assert text == normalise("expected client lag p99 <= 0.7 ms (a tenth of the median "
                             "TTFT, 7 ms), found client lag p99 0.0213 ms (p50 0.0144 ms, "
                             "CPU share 0.07, 0% of events bunched)")


def test_an_aa_control_is_judged_by_the_interval_it_found():
    """ci59: under the suite's load the demo's A/A interval excluded 0; its verdict follows
    from that interval (timing), so the rule's answer to it is right, any other wrong."""
    fixture = read_fixture()
    at = next(i for i, c in enumerate(fixture["comparisons"])
              if c["role"] == "control" and c["metric"] == "decode_rate")
    assert fixture["comparisons"][at]["verdict"] == "no finding"
    found = copy.deepcopy(fixture)
    control = found["comparisons"][at]
    control.update(ci95_low=12.0, ci95_high=80.0, verdict="not decidable",
                   reason="the A/A control itself differs (interval excludes 0): instances "
                          "vary more than the restarts average out; add restarts")
    assert differences(fixture, found) == []
    control["verdict"] = "no finding"  # an interval excluding 0 called noise: wrong
    assert any("verdict 'no finding'" in line for line in differences(fixture, found))
    control.update(verdict="not decidable", reason="same-vs-same: the interval includes 0")
    assert differences(fixture, found)
    # an interval on the fixture's side of 0 keeps the fixture's verdict exactly
    found = copy.deepcopy(fixture)
    found["comparisons"][at]["verdict"] = "not decidable"
    assert any("verdict was" in line for line in differences(fixture, found))
    # an A/B's verdict is never judged anew
    ab = next(i for i, c in enumerate(fixture["comparisons"]) if c["role"] == "ab")
    found = copy.deepcopy(fixture)
    found["comparisons"][ab].update(ci95_low=-5.0, verdict="not decidable")
    assert any("verdict was" in line for line in differences(fixture, found))
