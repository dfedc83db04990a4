"""The GX gate against real Great Expectations (no mocks): one row per (subject, rule)."""

from __future__ import annotations

import re
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pytest

from benchledger.expectations.gate import (
    SUITES,
    RuleResult,
    run_comparison_gate,
    run_entry_gate,
    run_gate,
)
from benchledger.rules import CATALOGUE, GxCheck

N_MEASURED = 15
SUITE_RULES = {
    "restarts": ["restart_healthy", "clock_under_load"],
    "windows": ["accounting_balances", "n_at_least_min", "generation_tokens_reconcile",
                "prompt_tokens_reconcile", "finished_requests_reconcile",
                "counters_readable", "tokenizer_calibrated", "client_lag_within_bound",
                "streams_not_buffered", "arrivals_on_schedule", "energy_readable"],
    "measured_requests": ["token_source_is_usage", "temperature_is_zero", "ttft_not_above_e2e",
                          "usage_plausible", "logprobs_match_usage"],
}
ENTRY_RULES = ["entry_has_validated_value", "incomplete_rate_labelled",
               "latency_population_labelled", "rate_numerator_labelled",
               "prefill_rate_cold_prompts", "entry_token_source_single", "evidence_labelled",
               "rate_denominator_stated", "request_counts_balance", "server_log_kept_apart",
               "burst_share_bounded", "energy_source_labelled", "percentile_n_sufficient"]
COMPARISON_RULES = ["ab_arms_differ", "ab_restarts_replicated", "ab_beyond_control",
                    "ab_beyond_drift", "outputs_equivalent"]


def make_run(
    n_restarts: int = 2, windows_per_restart: int = 2, n: int = N_MEASURED
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A clean sweep run: every rule should pass."""
    restarts = pd.DataFrame(
        {
            "restart_id": [f"r{i}" for i in range(n_restarts)],
            "arm": "spec-on",
            "status": "ok",
        }
    )
    window_rows, request_rows = [], []
    for r in range(n_restarts):
        for k, workload in zip(range(windows_per_restart), ["code", "prose"] * 8, strict=False):
            window_id = f"r{r}-w{k}"
            window_rows.append(
                {
                    "window_id": window_id,
                    "restart_id": f"r{r}",
                    "workload": workload,
                    "concurrency": 1,
                    "submitted": n,
                    "completed": n,
                    "failed": 0,
                    "unresolved": 0,
                    "drain_status": "complete",
                    "min_requests": N_MEASURED,
                }
            )
            request_rows += [
                {
                    "request_id": f"{window_id}-q{i}",
                    "window_id": window_id,
                    "status": "completed",
                    "token_source": "usage",
                    "temperature": 0.0,
                    "ttft_s": 0.05 + i / 1000,
                    "e2e_s": 2.0 + i / 100,
                    "max_tokens": 128,
                    "prompt_tokens": 50 + i,
                    "output_tokens": 100 + i,
                    "cached_tokens": i,
                }
                for i in range(n)
            ]
    return restarts, pd.DataFrame(window_rows), pd.DataFrame(request_rows)


def by_key(results: list[RuleResult]) -> dict[tuple[str, str], RuleResult]:
    return {(r.subject, r.expectation): r for r in results}


def failures(results: list[RuleResult]) -> set[tuple[str, str]]:
    return {(r.subject, r.expectation) for r in results if not r.success}


@pytest.fixture(scope="module")
def clean_results() -> list[RuleResult]:
    return run_gate(*make_run())


def test_clean_run_passes_every_rule(clean_results):
    assert clean_results
    assert all(r.success for r in clean_results), [r for r in clean_results if not r.success]
    assert all(r.observed.startswith("expected ") for r in clean_results)


def test_every_subject_rule_pair_appears_exactly_once(clean_results):
    restarts, windows, _ = make_run()
    expected = (
        [("restarts", s, rule) for s in restarts["restart_id"] for rule in SUITE_RULES["restarts"]]
        + [("windows", s, rule) for s in windows["window_id"] for rule in SUITE_RULES["windows"]]
        + [
            ("measured_requests", s, rule)
            for s in windows["window_id"]
            for rule in SUITE_RULES["measured_requests"]
        ]
    )
    got = [(r.suite, r.subject, r.expectation) for r in clean_results]
    assert sorted(got) == sorted(expected)
    assert len(set(got)) == len(got)


def test_rules_table_names_every_rule_of_every_suite():
    gx_rules = {rule.name for rule in CATALOGUE if isinstance(rule.check, GxCheck)}
    assert gx_rules == {rule for rules in SUITE_RULES.values() for rule in rules} | set(
        ENTRY_RULES) | set(COMPARISON_RULES)
    assert set(SUITES) == set(SUITE_RULES)


def test_missing_token_source_fails_only_that_window():
    restarts, windows, requests = make_run()
    requests.loc[requests["window_id"] == "r1-w0", "token_source"] = "missing"
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r1-w0", "token_source_is_usage")}
    observed = by_key(results)[("r1-w0", "token_source_is_usage")].observed
    assert observed == ("expected token_source in ['usage', 'logprobs', 'server_tokenizer'] "
                        "on completed requests, found 15 of 15 completed rows 'missing'")


def test_null_token_source_is_not_silently_accepted():
    # GX map expectations skip nulls by default; the gate must not.
    restarts, windows, requests = make_run()
    requests.loc[3, "token_source"] = None
    results = run_gate(restarts, windows, requests)
    window_id = requests.loc[3, "window_id"]
    assert failures(results) == {(window_id, "token_source_is_usage")}
    observed = by_key(results)[(window_id, "token_source_is_usage")].observed
    assert "1 of 15 completed rows NULL" in observed


def test_nonzero_temperature_fails_temperature_is_zero():
    restarts, windows, requests = make_run()
    requests.loc[requests["request_id"] == "r0-w1-q4", "temperature"] = 0.7
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r0-w1", "temperature_is_zero")}
    observed = by_key(results)[("r0-w1", "temperature_is_zero")].observed
    assert observed == "expected temperature == 0.0, found 1 of 15 rows 0.7"


def test_ttft_above_e2e_fails_and_names_the_request():
    restarts, windows, requests = make_run()
    requests.loc[requests["request_id"] == "r1-w1-q2", ["ttft_s", "e2e_s"]] = [3.0, 1.5]
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r1-w1", "ttft_not_above_e2e")}
    observed = by_key(results)[("r1-w1", "ttft_not_above_e2e")].observed
    assert "1 of 15 completed rows" in observed
    assert "r1-w1-q2 (ttft_s 3.0, e2e_s 1.5)" in observed


def test_ttft_rule_ignores_unfinished_requests_and_missing_times():
    restarts, windows, requests = make_run()
    requests.loc[0, ["status", "ttft_s", "e2e_s"]] = ["failed", 3.0, 1.5]
    requests.loc[1, "e2e_s"] = None
    results = run_gate(restarts, windows, requests)
    assert not {rule for _, rule in failures(results)} & {"ttft_not_above_e2e"}
    window_id = requests.loc[0, "window_id"]
    assert "0 of 13 completed rows" in by_key(results)[(window_id, "ttft_not_above_e2e")].observed


def test_unbalanced_accounting_fails_accounting_balances():
    restarts, windows, requests = make_run()
    windows.loc[windows["window_id"] == "r0-w0", "submitted"] = 20  # 5 requests unaccounted
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r0-w0", "accounting_balances")}
    observed = by_key(results)[("r0-w0", "accounting_balances")].observed
    assert observed == (
        "expected submitted == completed + failed + unresolved, found 20 != 15 + 0 + 0"
    )


def test_too_few_completed_fails_n_at_least_min_with_numbers():
    restarts, windows, requests = make_run()
    mask = windows["window_id"] == "r1-w1"
    windows.loc[mask, ["completed", "failed"]] = [12, 3]  # still balances: 15 = 12 + 3 + 0
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r1-w1", "n_at_least_min")}
    observed = by_key(results)[("r1-w1", "n_at_least_min")].observed
    assert observed == "expected completed >= 15, found 12"


def test_failed_restart_fails_restart_healthy_and_external_passes():
    restarts, windows, requests = make_run(n_restarts=3)
    restarts.loc[1, "status"] = "failed"
    restarts.loc[2, "status"] = "external"
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r1", "restart_healthy")}
    observed = by_key(results)[("r1", "restart_healthy")].observed
    assert observed == "expected status in ['ok', 'external'], found 'failed'"


def test_window_without_measured_requests_still_gets_request_rule_rows():
    restarts, windows, requests = make_run()
    requests = requests[requests["window_id"] != "r0-w1"]
    results = run_gate(restarts, windows, requests)
    rows = [r for r in results if r.subject == "r0-w1" and r.suite == "measured_requests"]
    assert sorted(r.expectation for r in rows) == sorted(SUITE_RULES["measured_requests"])
    assert all(r.success for r in rows)
    assert "0 of 0 completed rows" in by_key(results)[("r0-w1", "token_source_is_usage")].observed


def test_several_failures_are_all_reported():
    restarts, windows, requests = make_run()
    restarts.loc[0, "status"] = "crashed"
    windows.loc[1, "submitted"] = 16
    requests.loc[0, "temperature"] = 1.0
    requests.loc[20, "token_source"] = "missing"
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {
        ("r0", "restart_healthy"),
        (windows.loc[1, "window_id"], "accounting_balances"),
        (requests.loc[0, "window_id"], "temperature_is_zero"),
        (requests.loc[20, "window_id"], "token_source_is_usage"),
    }


def test_missing_input_column_is_refused():
    restarts, windows, requests = make_run()
    with pytest.raises(ValueError, match="token_source"):
        run_gate(restarts, windows, requests.drop(columns=["token_source"]))


def test_results_carry_expected_and_found_apart(clean_results):
    for result in clean_results:
        assert result.expected and result.found
        assert result.observed == f"expected {result.expected}, found {result.found}"
    n_rule = next(r for r in clean_results if r.expectation == "n_at_least_min")
    assert (n_rule.expected, n_rule.found) == ("completed >= 15", "15")


def test_failed_and_unresolved_requests_need_no_usage():
    restarts, windows, requests = make_run()
    rows = requests["window_id"] == "r0-w0"
    first_two = requests[rows].index[:2]
    requests.loc[first_two, "status"] = ["failed", "unresolved"]
    requests.loc[first_two, "token_source"] = "missing"
    results = run_gate(restarts, windows, requests)
    result = by_key(results)[("r0-w0", "token_source_is_usage")]
    assert result.success and "0 of 13 completed rows" not in result.observed


def entry(**overrides) -> dict:
    values = dict(entry_id="e1", metric="decode_rate", unit="tok/s", numerator="output_tokens",
                  population="all_submitted", drain_status="complete", prompt_cache="cold",
                  n_failed=0, n_unresolved=0, statistic="mean", value=27.5)
    values.update(overrides)
    return values


def test_entry_rules_pass_on_honest_labels():
    entries = pd.DataFrame([
        entry(),
        entry(entry_id="e2", metric="throughput", drain_status="incomplete",
              population="completed_only", n_unresolved=3),
        entry(entry_id="e3", metric="ttft", unit="s", numerator=None,
              population="completed_only", n_failed=1),
        entry(entry_id="e4", metric="prefill_rate", numerator="prompt_tokens"),
        entry(entry_id="e5", metric="server_log_generation_throughput", numerator=None,
              statistic="server_log_peak", population="server_log_lines",
              drain_status="incomplete"),
        entry(entry_id="e6", metric="energy_per_token", unit="J/token",
              numerator="gpu_energy_j", energy_source="energy counter"),
        entry(entry_id="e7", metric="tokens_per_joule", unit="tokens/J",
              energy_source="energy counter + integrated power samples"),
        # percentiles from exactly as many requests as each needs (issue #39)
        entry(entry_id="e8", metric="ttft", unit="s", numerator=None, statistic="p50",
              n_requests=2),
        entry(entry_id="e9", metric="ttft", unit="s", numerator=None, statistic="p90",
              n_requests=10),
        entry(entry_id="e10", metric="tpot", unit="s", numerator=None, statistic="p99",
              n_requests=100),
    ])
    results = run_entry_gate(entries)
    assert len(results) == 10 * len(ENTRY_RULES)
    assert all(r.success for r in results), [r for r in results if not r.success]


@pytest.mark.parametrize(("overrides", "rule", "found"), [
    (dict(drain_status="incomplete", n_unresolved=15), "incomplete_rate_labelled",
     "'all_submitted'"),
    (dict(metric="ttft", unit="s", numerator=None, n_failed=5), "latency_population_labelled",
     "'all_submitted'"),
    (dict(numerator=None), "rate_numerator_labelled", "NULL"),
    (dict(metric="prefill_rate", numerator="prompt_tokens", prompt_cache="warm"),
     "prefill_rate_cold_prompts", "'warm'"),
    # a server log peak dressed up as the delivered decode rate (the 40.7 vs 27.8 trap)
    (dict(statistic="server_log_peak"), "server_log_kept_apart",
     "'decode_rate / server_log_peak'"),
    # evidence from elsewhere (issue #14): its kind, its denominator, its counts
    (dict(evidence="measured elsewhere"), "evidence_labelled", "'measured elsewhere'"),
    (dict(evidence=None), "evidence_labelled", "NULL"),
    (dict(denominator=None), "rate_denominator_stated", "NULL"),
    (dict(n_submitted=128, n_completed=120, n_failed=2), "request_counts_balance",
     "128 != 120 + 2 + 0"),
    # energy whose joules came from nowhere the protocol names (T18)
    (dict(metric="energy_per_token", unit="J/token", numerator="gpu_energy_j",
          energy_source=None), "energy_source_labelled", "NULL"),
    (dict(metric="gpu_power", unit="W", numerator="gpu_energy_j",
          energy_source="nvidia-smi power.draw x elapsed"), "energy_source_labelled",
     "'nvidia-smi power.draw x elapsed'"),
    # a p99 from one request (the interrupted window of issue #39), a p90 from 9, a p50 from
    # 1, and a percentile whose count was not recorded
    (dict(metric="ttft", unit="s", numerator=None, statistic="p99", n_requests=1),
     "percentile_n_sufficient", "p99 from 1 request"),
    (dict(metric="ttft", unit="s", numerator=None, statistic="p99", n_requests=99),
     "percentile_n_sufficient", "p99 from 99 requests"),
    (dict(metric="e2e_latency", unit="s", numerator=None, statistic="p90", n_requests=9),
     "percentile_n_sufficient", "p90 from 9 requests"),
    (dict(metric="ttft", unit="s", numerator=None, statistic="p50", n_requests=1),
     "percentile_n_sufficient", "p50 from 1 request"),
    (dict(metric="ttft", unit="s", numerator=None, statistic="p90", n_requests=None),
     "percentile_n_sufficient", "p90 from an unrecorded number of requests"),
])
def test_entry_rule_failures_name_what_was_found(overrides, rule, found):
    results = run_entry_gate(pd.DataFrame([entry(**overrides)]))
    failed = [r for r in results if not r.success]
    assert [r.expectation for r in failed] == [rule]
    assert failed[0].observed.endswith(f"found {found}")


def test_counter_mismatch_fails_naming_the_counter_and_both_counts():
    restarts, windows, requests = make_run()
    windows["reconcile_tolerance"] = 0.01
    windows["generation_error"] = 0.0
    windows.loc[0, "generation_error"] = 0.10
    windows.loc[0, "generation_detail"] = ("vllm:generation_tokens_total delta 2112 vs "
                                           "delivered output tokens 1920 (+10.0%)")
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r0-w0", "generation_tokens_reconcile")}
    observed = by_key(results)[("r0-w0", "generation_tokens_reconcile")].observed
    assert observed.startswith("expected the server's generation-token counter delta within 0.01")
    assert "2112 vs delivered output tokens 1920" in observed


@pytest.mark.parametrize(("ratio", "require", "passes"), [
    (0.95, True, True), (0.196, True, False), (None, True, False), (None, False, True),
])
def test_clock_under_load(ratio, require, passes):
    restarts, windows, requests = make_run(n_restarts=1)
    restarts["clock_ratio"] = ratio
    restarts["min_clock_ratio"] = 0.9
    restarts["require_clock_check"] = require
    restarts["clock_detail"] = "GPU 0: 494 of 2520 MHz" if ratio else "unchecked"
    result = by_key(run_gate(restarts, windows, requests))[("r0", "clock_under_load")]
    assert result.success is passes
    assert result.observed.startswith("expected SM clock under load >= 0.9 of max, found")


def test_data_docs_render_each_suite_validated_and_accumulate(tmp_path):
    docs = tmp_path / "docs"
    run = make_run()
    entries = pd.DataFrame([entry(), entry(entry_id="e2", numerator=None)])  # e2 fails a rule
    gate_results = run_gate(*run, docs_dir=docs)
    entry_results = run_entry_gate(entries, docs_dir=docs)  # same site: adds to the index
    # Docs change nothing about the rows returned.
    assert gate_results == run_gate(*run)
    assert entry_results == run_entry_gate(entries)

    index = docs / "index.html"
    assert index.is_file()
    # The index lists one validation result page per suite validated, across both calls.
    links = set(re.findall(r"'_table_row_link_path': '(validations/[^']+\.html)'",
                           index.read_text()))
    pages = {link.split("/")[1]: docs / unquote(link) for link in links}
    assert len(links) == 4
    assert set(pages) == {*SUITES, "entries"}
    text = {suite: page.read_text() for suite, page in pages.items()}
    # Each page renders its expectations, named by rule and by GX expectation type.
    assert "expect_column_values_to_be_in_set" in text["restarts"]
    for suite, rules in [*SUITE_RULES.items(), ("entries", ENTRY_RULES)]:
        assert all(rule in text[suite] for rule in rules), suite
    # ... and shows the results of the data validated: e2's missing numerator fails.
    status = {suite: re.search(r"Status:</span>.*?</i> (\w+)", page).group(1)
              for suite, page in text.items()}
    assert status == {**dict.fromkeys(SUITES, "Succeeded"), "entries": "Failed"}
    assert "[null]" in text["entries"]


def test_an_entry_without_a_validated_value_is_blocked():
    results = run_entry_gate(pd.DataFrame([entry(), entry(entry_id="e2", value=None)]))
    verdict = {r.subject: r for r in results if r.expectation == "entry_has_validated_value"}
    assert verdict["e1"].success and verdict["e1"].found == "27.5"
    assert not verdict["e2"].success
    assert verdict["e2"].found == "no value: no window behind it passed every rule"


def test_a_rate_of_prompt_tokens_without_them_says_so_not_that_windows_failed():
    """llama-cpp-python streams no usage: counted from logprobs, a request's prompt tokens
    are unknown, so its input_plus_output throughput has no value though every window
    passed (that was said as "no window behind it passed every rule")."""
    blind = dict(value=None, numerator="input_plus_output_tokens", mean_prompt_tokens=None,
                 token_source="logprobs")
    results = run_entry_gate(pd.DataFrame([
        entry(entry_id="e1", **blind),
        entry(entry_id="e2", **{**blind, "mean_prompt_tokens": 180.0}),
        entry(entry_id="e3", **{**blind, "numerator": "output_tokens"})]))
    found = {r.subject: r.found for r in results
             if r.expectation == "entry_has_validated_value"}
    assert found["e1"] == ("no value: no request's prompt tokens are known (token_source "
                           "'logprobs'; only a server's usage reports them), so a rate of "
                           "prompt tokens cannot be computed")
    assert found["e2"] == found["e3"] == "no value: no window behind it passed every rule"


def comparison(**overrides) -> dict:
    values = dict(comparison_id="c1", a="base", b="fast", a_config="aaa", b_config="bbb",
                  a_restarts=2, b_restarts=2, difference=3.0, control_difference=0.5,
                  relative_difference=0.1, significant_drift=None)
    values.update(overrides)
    return values


@pytest.mark.parametrize(("overrides", "failed", "found"), [
    ({}, set(), None),
    ({"b_config": "aaa"}, {"ab_arms_differ"}, "base aaa, fast aaa (identical)"),
    ({"a_config": None, "b_config": None}, set(), None),  # unknown configs: not refused
    ({"b_restarts": 1}, {"ab_restarts_replicated"}, "base 2, fast 1"),
    ({"difference": -0.4}, {"ab_beyond_control"}, "|-0.4| vs |0.5|"),
    ({"control_difference": None}, set(), None),  # no control measured: not applicable
    ({"significant_drift": 0.05}, set(), None),  # a drift smaller than the difference
    ({"significant_drift": 0.15}, {"ab_beyond_drift"},
     "difference 10% vs drift 15% over the sweep"),
])
def test_comparison_rules(overrides, failed, found):
    results = run_comparison_gate(pd.DataFrame([comparison(**overrides)]))
    assert sorted(r.expectation for r in results) == sorted(COMPARISON_RULES)
    assert {r.expectation for r in results if not r.success} == failed
    for result in results:
        if not result.success:
            assert result.found == found


def test_data_docs_keep_a_partial_row_list_while_results_count_every_row(tmp_path):
    """At 10^6 requests the complete unexpected-row lists would make the Data Docs store
    tens of MB; the stored result keeps GX's partial 20, the rows in the warehouse count all."""
    import json

    restarts, windows, requests = make_run(n=60)
    requests.loc[requests["window_id"] == "r0-w0", "temperature"] = 0.7
    results = run_gate(restarts, windows, requests, docs_dir=tmp_path / "docs")
    assert by_key(results)[("r0-w0", "temperature_is_zero")].found == "60 of 60 rows 0.7"
    stored = [json.loads(p.read_text())
              for p in (tmp_path / "docs" / ".gx" / "validations").rglob("*.json")]
    temperature = [r for doc in stored for r in doc["results"]
                   if r["expectation_config"]["meta"]["rule"] == "temperature_is_zero"]
    assert len(temperature) == 1
    details = temperature[0]["result"]
    assert details["unexpected_count"] == 60
    assert len(details["unexpected_index_list"]) == 20 and len(details["unexpected_list"]) == 20


# --- usage_plausible: counts a server reported that cannot be true ------------------------


@pytest.mark.parametrize(("counts", "found"), [
    # the server without /metrics: 10**9 tokens for max_tokens = 8
    (dict(max_tokens=8, output_tokens=10**9),
     "1 of 15 completed rows with usage implausible: output_tokens above max_tokens (1); "
     "r0-w1-q4 (output_tokens 1000000000 above max_tokens 8)"),
    (dict(output_tokens=-7), "output_tokens below 0 (1); r0-w1-q4 (output_tokens -7 below 0)"),
    (dict(output_tokens=129), "r0-w1-q4 (output_tokens 129 above max_tokens 128)"),
    (dict(prompt_tokens=None), "prompt_tokens NULL (1); r0-w1-q4 (prompt_tokens NULL)"),
    (dict(prompt_tokens=-3), "r0-w1-q4 (prompt_tokens -3 below 0)"),
    (dict(prompt_tokens=10**9), "prompt_tokens above 16777216 (1); "
     "r0-w1-q4 (prompt_tokens 1000000000 above 16777216)"),
    (dict(cached_tokens=-1), "r0-w1-q4 (cached_tokens -1 below 0)"),
    (dict(prompt_tokens=40, cached_tokens=41),
     "r0-w1-q4 (cached_tokens 41 above prompt_tokens 40)"),
    (dict(output_tokens=None), "r0-w1-q4 (output_tokens NULL)"),
    (dict(output_tokens=2.5), "r0-w1-q4 (output_tokens 2.5 not an integer)"),
    (dict(max_tokens=None), "r0-w1-q4 (max_tokens NULL)"),
    # issue #22: 1 token for 8 text-bearing events (each carries a token at least)
    (dict(output_tokens=1, chunks=8),
     "output_tokens below chunks (1); r0-w1-q4 (output_tokens 1 below chunks 8)"),
])
def test_impossible_usage_fails_usage_plausible_naming_request_and_values(counts, found):
    restarts, windows, requests = make_run()
    row = requests.index[requests["request_id"] == "r0-w1-q4"]
    for column, value in counts.items():
        # (chunks: a column make_run leaves out, NULL on the other rows)
        requests[column] = requests[column].astype(object) if column in requests else None
        requests.loc[row, column] = value
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r0-w1", "usage_plausible")}
    result = by_key(results)[("r0-w1", "usage_plausible")]
    assert result.found.startswith("1 of 15 completed rows with usage implausible: ")
    assert result.found.endswith(found)
    assert result.expected == ("0 <= output_tokens <= max_tokens, output_tokens >= chunks "
                               "(its text-bearing events), 0 <= prompt_tokens <= 16777216 "
                               "and 0 <= cached_tokens <= prompt_tokens on completed "
                               "requests with usage")


@pytest.mark.parametrize("counts", [
    dict(output_tokens=0),  # an empty answer is possible
    dict(output_tokens=0, chunks=0),  # ... with no text-bearing event
    dict(output_tokens=8, chunks=8),  # one token per event
    dict(output_tokens=24, chunks=8),  # several per event (speculative decoding)
    dict(output_tokens=5, chunks=None),  # events not handed over: not judged
    dict(output_tokens=128),  # exactly the target
    dict(cached_tokens=None),  # cached_tokens is optional in usage
    dict(prompt_tokens=0, cached_tokens=0),
    dict(prompt_tokens=64, cached_tokens=64),  # the whole prompt from the prefix cache
    dict(prompt_tokens=2**24, cached_tokens=2**24),  # the longest prompt there can be
])
def test_possible_usage_passes_usage_plausible(counts):
    restarts, windows, requests = make_run()
    for column, value in counts.items():
        # (chunks: a column make_run leaves out, NULL on the other rows)
        requests[column] = requests[column].astype(object) if column in requests else None
        requests.loc[requests["request_id"] == "r0-w1-q4", column] = value
    results = run_gate(restarts, windows, requests)
    assert not failures(results)
    assert by_key(results)[("r0-w1", "usage_plausible")].found == (
        "0 of 15 completed rows with usage implausible")


def test_usage_plausible_judges_only_completed_requests_with_usage():
    restarts, windows, requests = make_run()
    w0 = requests.index[requests["window_id"] == "r0-w0"]
    # Failed and unresolved requests have no meaningful usage; a request without usage
    # is token_source_is_usage's failure, not this rule's (its counts are NULL by design).
    requests.loc[w0[:2], "status"] = ["failed", "unresolved"]
    requests.loc[w0[:2], "output_tokens"] = [10**9, -5]
    requests.loc[w0[2], "token_source"] = "missing"
    requests["prompt_tokens"] = requests["prompt_tokens"].astype(object)
    requests.loc[w0[2], ["prompt_tokens", "output_tokens"]] = [None, None]
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r0-w0", "token_source_is_usage")}
    assert by_key(results)[("r0-w0", "usage_plausible")].found == (
        "0 of 12 completed rows with usage implausible")


def test_usage_plausible_counts_every_reason_and_lists_the_first_requests():
    restarts, windows, requests = make_run()
    rows = requests.index[requests["window_id"] == "r1-w0"]
    requests["prompt_tokens"] = requests["prompt_tokens"].astype(float)  # NULLs: as Arrow does
    requests.loc[rows[:4], "output_tokens"] = 10**9
    requests.loc[rows[4], "prompt_tokens"] = np.nan
    # string dtypes with NULLs, as DuckDB's Arrow hands them over
    requests["token_source"] = requests["token_source"].astype("string")
    requests.loc[rows[5], "token_source"] = pd.NA
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r1-w0", "usage_plausible"), ("r1-w0", "token_source_is_usage")}
    assert by_key(results)[("r1-w0", "usage_plausible")].found == (
        "5 of 14 completed rows with usage implausible: output_tokens above max_tokens (4), "
        "prompt_tokens NULL (1); r1-w0-q0 (output_tokens 1000000000 above max_tokens 128), "
        "r1-w0-q1 (output_tokens 1000000000 above max_tokens 128), "
        "r1-w0-q2 (output_tokens 1000000000 above max_tokens 128), ...")


def test_a_window_behind_its_schedule_fails_arrivals_on_schedule():
    """Issue #26: an open-loop window (a replayed trace, Poisson arrivals) whose requests
    went out late by more than the bound is blocked, saying how late; one on time passes,
    and a closed loop (no due times: NULL lag) has nothing to check."""
    restarts, windows, requests = make_run()
    schedule = {"r0-w0": (412.0, 950.0, 2.1, 3.4), "r0-w1": (3.0, 5.0, 3.39, 3.4)}
    for column in ("arrival_lag_p99_ms", "arrival_lag_max_ms", "achieved_span_s",
                   "requested_span_s", "max_arrival_lag_ms"):
        windows[column] = np.nan
    for window_id, (p99, most, achieved, requested) in schedule.items():
        mask = windows["window_id"] == window_id
        windows.loc[mask, ["arrival_lag_p99_ms", "arrival_lag_max_ms", "achieved_span_s",
                           "requested_span_s", "max_arrival_lag_ms"]] = [
            p99, most, achieved, requested, 100.0]
    results = run_gate(restarts, windows, requests)
    assert failures(results) == {("r0-w0", "arrivals_on_schedule")}
    observed = by_key(results)[("r0-w0", "arrivals_on_schedule")].observed
    assert observed == ("expected arrival lag p99 <= 100 ms, found arrival lag p99 412 ms, "
                        "max 950 ms; submissions spanned 2.1 s of the 3.4 s scheduled")
    assert by_key(results)[("r0-w1", "arrivals_on_schedule")].success
    assert by_key(results)[("r1-w0", "arrivals_on_schedule")].success  # closed loop
