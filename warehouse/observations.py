"""Parse what the server and the node said during a window (raw file -> rows).

- /metrics text is parsed with prometheus_client's own parser (no regexes on it).
- vLLM's periodic log lines ("Avg prompt throughput: ...", "SpecDecoding metrics: ...")
  are plain text: small patterns per field, each value kept under its own name, since
  the generation line and the accepted-draft line measure different things (T3).
- Clock samples are taken as they came, one row per GPU per sample.
"""

from __future__ import annotations

import json
import re

from prometheus_client.parser import text_string_to_metric_families

LOG_FIELDS = {
    "prompt_tok_s": r"Avg prompt throughput: ([\d.]+) tokens/s",
    "generation_tok_s": r"Avg generation throughput: ([\d.]+) tokens/s",
    "accepted_tok_s": r"Accepted throughput: ([\d.]+) tokens/s",
    "drafted_tok_s": r"Drafted throughput: ([\d.]+) tokens/s",
    "mean_acceptance_length": r"Mean acceptance length: ([\d.]+)",
    "running_reqs": r"Running: (\d+) reqs",
}
_LOG_PATTERNS = {name: re.compile(pattern) for name, pattern in LOG_FIELDS.items()}


def metric_samples(text: str) -> list[tuple[str, str, float]]:
    """(sample name, labels as JSON, value) for every sample of a Prometheus text page."""
    rows = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            rows.append((sample.name, json.dumps(sample.labels, sort_keys=True),
                         float(sample.value)))
    return rows


def log_rows(lines: list[str]) -> list[dict]:
    """The throughput lines of a log slice, one dict per line that has any known field."""
    rows = []
    for line_no, line in enumerate(lines):
        values = {}
        for name, pattern in _LOG_PATTERNS.items():
            match = pattern.search(line)
            if match:
                values[name] = float(match.group(1))
        if values:
            kind = "spec_decode" if "accepted_tok_s" in values else "throughput"
            rows.append({"line_no": line_no, "kind": kind, "text": line[:1000], **values})
    return rows


def clock_rows(clocks: dict) -> list[dict]:
    """node_clocks rows from a ClockSampler result; under_load from GPU utilization."""
    rows = []
    for sample in clocks.get("samples", []):
        utilization = sample.get("utilization_gpu")
        rows.append({
            "node": clocks.get("node"), "gpu": int(sample.get("index", 0)),
            "sampled_at": sample.get("sampled_at"),
            "sm_clock_mhz": sample.get("sm_clock_mhz"),
            "max_sm_clock_mhz": sample.get("max_sm_clock_mhz"),
            "pstate": sample.get("pstate"), "throttle_reasons": sample.get("throttle_reasons"),
            "utilization_gpu": utilization,
            # Sampled inside the measured window; a GPU that reports 0% was idle then.
            "under_load": utilization is None or utilization > 0,
        })
    return rows
