"""What to do when each rule of the catalogue fails: the advice `benchledger run` prints
first when a run publishes nothing, beside the rule's own expected/found.

Advice, not a judgement: a rule's fix is not part of its declaration (the ruleset version
does not change when advice is reworded), and every rule has one (rules/__init__.py checks
at import). Rules that hold by construction say so: their failure is a defect of
benchledger, to be reported with the run's raw folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from benchledger.rules.comparisons import (
    AB_ARMS_DIFFER,
    AB_BEYOND_CONTROL,
    AB_BEYOND_DRIFT,
    AB_RESTARTS_REPLICATED,
    OUTPUTS_EQUIVALENT,
)
from benchledger.rules.entries import (
    BURST_SHARE_BOUNDED,
    ENERGY_SOURCE_LABELLED,
    ENTRY_HAS_VALIDATED_VALUE,
    ENTRY_TOKEN_SOURCE_SINGLE,
    EVIDENCE_LABELLED,
    INCOMPLETE_RATE_LABELLED,
    LATENCY_POPULATION_LABELLED,
    PERCENTILE_N_SUFFICIENT,
    PREFILL_RATE_COLD_PROMPTS,
    RATE_DENOMINATOR_STATED,
    RATE_NUMERATOR_LABELLED,
    REQUEST_COUNTS_BALANCE,
    SERVER_LOG_KEPT_APART,
)
from benchledger.rules.requests import (
    LOGPROBS_MATCH_USAGE,
    TEMPERATURE_IS_ZERO,
    TOKEN_SOURCE_IS_USAGE,
    TTFT_NOT_ABOVE_E2E,
    USAGE_PLAUSIBLE,
)
from benchledger.rules.restarts import CLOCK_UNDER_LOAD, RESTART_HEALTHY
from benchledger.rules.windows import (
    ACCOUNTING_BALANCES,
    ARRIVALS_ON_SCHEDULE,
    CLIENT_LAG_WITHIN_BOUND,
    COUNTERS_READABLE,
    ENERGY_READABLE,
    FINISHED_REQUESTS_RECONCILE,
    GENERATION_TOKENS_RECONCILE,
    N_AT_LEAST_MIN,
    PROMPT_TOKENS_RECONCILE,
    STREAMS_NOT_BUFFERED,
    TOKENIZER_CALIBRATED,
    WINDOWS_PRESENT,
)

_DEFECT = ("a defect of benchledger, not of the server: report it with the run's raw "
           "folder (`benchledger sql` shows the entry)")
_COUNTERS = ("another client used the server during the window, or the counter is not the "
             "one this family exports: measure a server nobody else is using, or name the "
             "family (arms.server_family); reconcile_tolerance bounds the difference")

FIXES: Mapping[str, str] = MappingProxyType({
    RESTART_HEALTHY.name: "the server crashed, never became ready or was stopped: read the "
                       "restart's server.log under the data dir, fix the server or its "
                       "command (ready_timeout_s for a slow start), and run again",
    CLOCK_UNDER_LOAD.name: "the GPUs ran below min_clock_ratio of their top clock (throttled "
                        "or power-capped): fix the node and run again; a window shorter "
                        "than clock_interval_s may end before any sample (lower it); a "
                        "server with no GPU clock to read (a CPU server, a remote one) "
                        "needs clock_source = \"none\" and require_clock_check = false",
    WINDOWS_PRESENT.name: "a planned window left no record (its restart ended first): see "
                       "the restart's status and server.log, then run again",
    ACCOUNTING_BALANCES.name: _DEFECT,
    N_AT_LEAST_MIN.name: "too few measured requests completed: raise requests, and read why "
                      "the others failed (requests.status, error)",
    GENERATION_TOKENS_RECONCILE.name: _COUNTERS,
    PROMPT_TOKENS_RECONCILE.name: _COUNTERS,
    FINISHED_REQUESTS_RECONCILE.name: _COUNTERS,
    COUNTERS_READABLE.name: "the server's /metrics did not answer in time or was not "
                         "Prometheus text: check metrics_path, raise metrics_timeout_s, or "
                         "name the family the server is (arms.server_family)",
    TOKENIZER_CALIBRATED.name: "the server's tokenizer endpoint counts its text differently "
                            "from its usage: check tokenize_path, or count another way "
                            "(token_count = \"usage\" or \"logprobs\")",
    CLIENT_LAG_WITHIN_BOUND.name: "the measuring client was too busy to stamp events on "
                               "time: lower the concurrency, give the client more cores "
                               "(client_workers), or run it on a quieter machine; "
                               "max_client_lag_ms is the bound",
    STREAMS_NOT_BUFFERED.name: "answers arrived whole, not streamed: a proxy buffers them or "
                            "the server does not flush; reach the server directly "
                            "(base_url), or turn buffering off; max_burst_fraction is the "
                            "bound",
    ARRIVALS_ON_SCHEDULE.name: "the client fell behind its arrival schedule: lower rate_rps, "
                            "give the client more cores (client_workers); "
                            "max_arrival_lag_ms is the bound",
    ENERGY_READABLE.name: "a GPU's energy or power could not be read whole: check the "
                       "telemetry (nvidia-smi, the DCGM exporter) on every node",
    TOKEN_SOURCE_IS_USAGE.name: "the server reported no token counts: set token_count = "
                             "\"logprobs\" (a server that streams logprobs) or "
                             "\"server_tokenizer\", or turn on its usage reporting",
    TEMPERATURE_IS_ZERO.name: "measured requests must run at temperature 0: remove the "
                           "temperature the sweep sets",
    TTFT_NOT_ABOVE_E2E.name: _DEFECT,
    USAGE_PLAUSIBLE.name: "the server's usage counts cannot be true (more tokens than "
                       "max_tokens, fewer than its text events): count another way "
                       "(token_count = \"logprobs\") and report the server's bug",
    LOGPROBS_MATCH_USAGE.name: "the streamed logprobs and the usage disagree: count with "
                            "usage (token_count = \"usage\") and report the server's bug",
    ENTRY_HAS_VALIDATED_VALUE.name: "no window behind the entry passed every rule: the rules "
                                 "beneath it (listed with it) say what to fix",
    INCOMPLETE_RATE_LABELLED.name: _DEFECT,
    LATENCY_POPULATION_LABELLED.name: _DEFECT,
    RATE_NUMERATOR_LABELLED.name: _DEFECT,
    PREFILL_RATE_COLD_PROMPTS.name: "a prefill rate needs cold prompts: set "
                                 "prompt_cache = \"cold\" on the workload",
    ENTRY_TOKEN_SOURCE_SINGLE.name: "requests of one entry were counted two ways: give the "
                                 "arm one token_count",
    EVIDENCE_LABELLED.name: _DEFECT,
    RATE_DENOMINATOR_STATED.name: _DEFECT,
    REQUEST_COUNTS_BALANCE.name: _DEFECT,
    SERVER_LOG_KEPT_APART.name: _DEFECT,
    BURST_SHARE_BOUNDED.name: "too many answers arrived in a burst for per-request decode "
                           "timing: reach the server without a buffering proxy, or lower "
                           "the concurrency; max_burst_fraction is the bound",
    ENERGY_SOURCE_LABELLED.name: _DEFECT,
    PERCENTILE_N_SUFFICIENT.name: "a percentile needs enough requests to lie beyond it (p90 "
                               "from 10, p99 from 100): raise requests",
    AB_ARMS_DIFFER.name: "the two arms of a comparison are the same configuration: compare "
                      "arms that differ, or name the pair as the A/A control",
    AB_RESTARTS_REPLICATED.name: "a verdict needs restarts on both sides: raise restarts "
                              "(an external server cannot restart: use a command arm)",
    AB_BEYOND_CONTROL.name: "the difference is within what the A/A control shows between "
                         "identical arms: more restarts narrow both, or the effect is "
                         "not there",
    AB_BEYOND_DRIFT.name: "the machine drifted during the run as much as the difference: "
                       "interleave the arms (restart_order = \"blocked\") and run again",
    OUTPUTS_EQUIVALENT.name: "the faster arm's answers differ from the baseline's: it is "
                          "not the same computation; check its settings",
})
