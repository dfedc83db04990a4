"""Prometheus text exposition (format 0.0.4) of the engine counters, in one server's names.

Written by hand (prometheus_client is not a dependency). `metrics_family` picks whose
names, and what they count, /metrics shows (the simulator and the warehouse share no code,
so each family's names are written out here once more, from the servers' own sources):

- vllm: vLLM's counters, counted as the engine goes. Spec-decode and prefix-cache counters
  are always exposed (0 without speculation / with the cache off) so a scraper can take
  deltas without special cases.
- sglang: SGLang's `sglang:*` counters (prompt, generation, cached tokens and requests;
  counted per finished request there), its running/queued gauges and the acceptance
  length as a gauge (SGLang exports no cumulative accepted-token counter).
- llamacpp: llama.cpp's server (`llamacpp:*`): its prompt counter counts the tokens it
  evaluated, so prefix-cache hits are left out; it has no finished-request counter.
- tgi: Text Generation Inference (`tgi_*`, no `_total` suffix): no token counters, but
  histograms of generated and input tokens per request, whose sums only grow; the
  simulator's histograms have the +Inf bucket only.

With metrics_generation_scale != 1 the generation count is deliberately wrong (true count
times the scale, rounded) in every family, modelling a server whose counters disagree with
what it delivered; usage and log lines stay true.
"""

from __future__ import annotations

from benchledger.simulator.engine import Engine

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Samples = list[tuple[dict[str, str], float]]
Family = tuple[str, str, str, Samples]  # name, kind, help, samples


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


def _family(name: str, kind: str, help_text: str, samples: Samples) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{_labels(**labels)} {float(value)!r}" for labels, value in samples]
    return lines


def _histogram(name: str, help_text: str, total: float, count: float) -> list[str]:
    """A histogram with the +Inf bucket only: its sum and count are what a scraper uses."""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} histogram",
            f'{name}_bucket{{le="+Inf"}} {float(count)!r}', f"{name}_sum {float(total)!r}",
            f"{name}_count {float(count)!r}"]


def _generation(engine: Engine) -> int:
    """The generation count /metrics reports (scaled: see the module docstring)."""
    return round(engine.counters.generation_tokens_total
                 * engine.config.metrics_generation_scale)


def _finished(engine: Engine) -> int:
    """Requests that finished with a result (stop or length; aborts are not)."""
    done = engine.counters.request_success_total
    return done["stop"] + done["length"]


def _vllm(engine: Engine) -> list[Family]:
    model = {"model_name": engine.config.model}
    c = engine.counters
    return [
        ("vllm:num_requests_running", "gauge",
         "Number of requests in model execution batches.", [(model, engine.num_running)]),
        ("vllm:num_requests_waiting", "gauge",
         "Number of requests waiting to be processed.", [(model, engine.num_waiting)]),
        ("vllm:prompt_tokens_total", "counter",
         "Number of prefill tokens processed.", [(model, c.prompt_tokens_total)]),
        ("vllm:generation_tokens_total", "counter",
         "Number of generation tokens processed.", [(model, _generation(engine))]),
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


def _sglang(engine: Engine) -> list[Family]:
    model = {"model_name": engine.config.model}
    c = engine.counters
    drafts = c.spec_decode_num_drafts_total
    accept_length = 1 + c.spec_decode_num_accepted_tokens_total / drafts if drafts else 0.0
    return [
        ("sglang:num_running_reqs", "gauge", "The number of running requests.",
         [(model, engine.num_running)]),
        ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
         [(model, engine.num_waiting)]),
        ("sglang:spec_accept_length", "gauge",
         "The average acceptance length of speculative decoding.", [(model, accept_length)]),
        ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         [(model, c.prompt_tokens_total)]),
        ("sglang:generation_tokens_total", "counter",
         "Number of generation tokens processed.", [(model, _generation(engine))]),
        ("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.",
         [(model, c.prefix_cache_hits_total)]),
        ("sglang:num_requests_total", "counter", "Number of requests processed.",
         [(model, _finished(engine))]),
    ]


def _llamacpp(engine: Engine) -> list[Family]:
    c = engine.counters
    evaluated = c.prompt_tokens_total - c.prefix_cache_hits_total
    return [
        ("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
         [({}, evaluated)]),
        ("llamacpp:tokens_predicted_total", "counter",
         "Number of generation tokens processed.", [({}, _generation(engine))]),
        ("llamacpp:requests_processing", "gauge", "Number of requests processing.",
         [({}, engine.num_running)]),
        ("llamacpp:requests_deferred", "gauge", "Number of requests deferred.",
         [({}, engine.num_waiting)]),
    ]


def _tgi_lines(engine: Engine) -> list[str]:
    c = engine.counters
    finished = _finished(engine)
    prefilled = finished + c.request_success_total["abort"] + engine.num_running
    lines = _family("tgi_request_success", "counter", "Number of successful requests",
                    [({}, finished)])
    lines += _family("tgi_queue_size", "gauge", "Current queue size", [({}, engine.num_waiting)])
    lines += _family("tgi_batch_current_size", "gauge", "Current batch size",
                     [({}, engine.num_running)])
    lines += _histogram("tgi_request_generated_tokens", "Generated tokens per request",
                        _generation(engine), finished)
    lines += _histogram("tgi_request_input_length", "Input token length per request",
                        c.prompt_tokens_total, prefilled)
    return lines


FAMILIES = {"vllm": _vllm, "sglang": _sglang, "llamacpp": _llamacpp}


def render_metrics(engine: Engine) -> str:
    """The whole /metrics body for one engine, in its config's metrics_family."""
    family = engine.config.metrics_family
    if family == "tgi":
        lines = _tgi_lines(engine)
    else:
        lines = [line for item in FAMILIES[family](engine) for line in _family(*item)]
    return "\n".join(lines) + "\n"
