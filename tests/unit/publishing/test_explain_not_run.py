"""Issue #43, item 4: `explain` says `not run` for a check that held without judging
anything (a clock not read where the sweep allowed it, a counter not reconciled, a rule
with nothing to apply to), where it printed `[pass]`. The observations are the texts the
rules write (as a run against llama-cpp-python left them)."""

from __future__ import annotations

import pytest

from benchledger.publishing.explain import not_run

RAN = [
    "expected SM clock under load >= 0.9 of max, found 0.98 of max (GPU 0)",
    "expected the server's generation-token counter delta within 0.01 (relative) of the "
    "client's count, found vllm:generation_tokens_total delta 192 vs delivered output "
    "tokens 192",
    # a failing check ran, whatever it found
    "expected submitted == completed + failed + unresolved, found 8 != 6 + 1 + 0",
]
NOT_RUN = [
    "expected SM clock under load >= 0.9 of max, found unchecked: no GPU sample",
    "expected every node and every GPU its deployment listed read before and after the "
    "window, found rule not applicable (its arm's GPU telemetry reported no energy counter)",
    "expected the server's generation-token counter delta within 0.01 (relative) of the "
    "client's count, found the generation-tokens counter (server family not known): not "
    "reconciled (no /metrics scrape before and after the window)",
    "expected the server's finished-request counter delta within 0.01 (relative) of the "
    "client's count, found vllm:request_success_total: not reconciled (its /metrics could "
    "not be read: timed out)",
    "expected the server's prompt-token counter delta within 0.01, found not reconciled",
]


@pytest.mark.parametrize("observed", RAN)
def test_a_check_that_judged_something_ran(observed):
    assert not not_run(observed)


@pytest.mark.parametrize("observed", NOT_RUN)
def test_a_check_that_judged_nothing_did_not_run(observed):
    assert not_run(observed)
