"""The report's workload section: what was sent. A few prompts of each workload, and the
lengths asked for against those delivered (input tokens requested against the prompt
tokens the server counted; max_tokens against the output tokens delivered), counted in
the warehouse (publishing/read.py) and drawn as one chart."""

from __future__ import annotations

import html

import pandas as pd

from benchledger.prompts import load_prompt_set
from benchledger.publishing.report_charts import Chart
from benchledger.publishing.report_markup import esc, figure, table

WORKLOAD_TITLE = "Workload"
SAMPLES_PER_WORKLOAD = 3
SAMPLE_CHARS = 400  # a prompt is shown up to here, then cut with an ellipsis
LENGTH_BINS = 20


def _prompt_texts(samples: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(prompt set, prompt id) -> text, for the built-in prompt sets the samples name."""
    texts = {}
    for name in sorted(set(samples["prompt_set"].dropna())):
        try:
            prompts = load_prompt_set(name)
        except ValueError:  # a set this version of the harness does not ship
            continue
        texts.update({(name, p.id): p.text for p in prompts})
    return texts


def _sample_text(row: pd.Series, texts: dict[tuple[str, str], str]) -> str:
    text = texts.get((row["prompt_set"], row["prompt_id"])) if isinstance(
        row["prompt_set"], str) else None
    if text is None:
        return (f"(text not in the warehouse: a {row['workload_kind'] or 'prepared'} workload's "
                "prompts are in its prepared file, named by sha256 in the run's workloads)")
    if isinstance(row["prompt_prefix"], str) and row["prompt_prefix"]:
        text = f"{row['prompt_prefix']} {text}"
    return text if len(text) <= SAMPLE_CHARS else text[:SAMPLE_CHARS].rstrip() + " …"


def _samples(samples: pd.DataFrame) -> str:
    texts = _prompt_texts(samples)
    items = []
    for _, row in samples.iterrows():
        numbers = (f"input requested {esc(row['requested_input_tokens']) or 'not set'}, "
                   f"prompt tokens {esc(row['prompt_tokens']) or 'not reported'}; max_tokens "
                   f"{esc(row['max_tokens'])}, output tokens "
                   f"{esc(row['output_tokens']) or 'not reported'}")
        items.append(f"<li><span class='prompt-id'>{esc(row['workload'])} / "
                     f"{esc(row['prompt_id'])}</span> <span class='note'>({numbers})</span>"
                     f"<pre class='prompt'>{html.escape(_sample_text(row, texts))}</pre></li>")
    return f"<ul class='samples'>{''.join(items)}</ul>"


def workload_section(samples: pd.DataFrame, lengths: pd.DataFrame,
                     chart: Chart | None) -> list[str]:
    """Prompt samples, then the length chart and its table (p50, p90, max per side)."""
    if samples.empty and lengths.empty:
        return [f"<section id='workload'><h2>{WORKLOAD_TITLE}</h2>",
                "<p class='none'>No measured request rests behind a published entry.</p>",
                "</section>"]
    return [f"<section id='workload'><h2>{WORKLOAD_TITLE}</h2>",
            "<p class='note'>The measured requests behind published entries (warm-up "
            "excluded). Prompts are shown as the prompt set holds them (the recorded cold "
            f"prefix first, where one was sent), cut at {SAMPLE_CHARS} characters.</p>",
            "<h3>Prompt samples</h3>", _samples(samples),
            figure(chart) if chart else "<h3>Requested and delivered lengths</h3>",
            table(lengths, ["workload", "length", "side", "requests", "missing", "min", "p50",
                            "p90", "max", "mean"]),
            "</section>"]
