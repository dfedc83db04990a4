"""Prometheus text exposition (format 0.0.4) of the engine counters, with vLLM's names.

Written by hand (prometheus_client is not a dependency). Spec-decode and prefix-cache
counters are always exposed (0 without speculation / with the cache off) so a scraper can
take deltas without special cases.

With metrics_generation_scale != 1 the generation counter is deliberately wrong (true count
times the scale, rounded), modelling a server whose counters disagree with what it
delivered; usage and log lines stay true.
"""

from __future__ import annotations

from benchledger.simulator.engine import Engine

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


def _family(name: str, kind: str, help_text: str,
            samples: list[tuple[dict[str, str], float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{_labels(**labels)} {float(value)!r}" for labels, value in samples]
    return lines


def render_metrics(engine: Engine) -> str:
    """The whole /metrics body for one engine."""
    model = {"model_name": engine.config.model}
    c = engine.counters
    generation = round(c.generation_tokens_total * engine.config.metrics_generation_scale)
    families = [
        ("vllm:num_requests_running", "gauge",
         "Number of requests in model execution batches.", [(model, engine.num_running)]),
        ("vllm:num_requests_waiting", "gauge",
         "Number of requests waiting to be processed.", [(model, engine.num_waiting)]),
        ("vllm:prompt_tokens_total", "counter",
         "Number of prefill tokens processed.", [(model, c.prompt_tokens_total)]),
        ("vllm:generation_tokens_total", "counter",
         "Number of generation tokens processed.", [(model, generation)]),
        ("vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.",
         [(model, c.prefix_cache_queries_total)]),
        ("vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.",
         [(model, c.prefix_cache_hits_total)]),
        ("vllm:request_success_total", "counter",
         "Count of finished requests by finish reason (abort = client went away).",
         [({**model, "finished_reason": reason}, count)
          for reason, count in c.request_success_total.items()]),
        ("vllm:spec_decode_num_drafts_total", "counter",
         "Number of spec decoding drafts.", [(model, c.spec_decode_num_drafts_total)]),
        ("vllm:spec_decode_num_draft_tokens_total", "counter",
         "Number of draft tokens.", [(model, c.spec_decode_num_draft_tokens_total)]),
        ("vllm:spec_decode_num_accepted_tokens_total", "counter",
         "Number of accepted tokens.", [(model, c.spec_decode_num_accepted_tokens_total)]),
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens per draft position.",
         [({**model, "position": str(i)}, n) for i, n in enumerate(c.accepted_per_position)]),
    ]
    lines: list[str] = []
    for family in families:
        lines += _family(*family)
    return "\n".join(lines) + "\n"
