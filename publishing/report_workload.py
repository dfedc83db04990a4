"""The report's workload section: what was sent. A few prompts of each workload, and the
lengths asked for against those delivered (input tokens requested against the prompt
tokens the server counted; max_tokens against the output tokens delivered), counted in
the warehouse (publishing/read.py) and drawn as one chart."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from markupsafe import Markup

from benchledger.prompts import load_prompt_set
from benchledger.publishing.report_charts import Chart
from benchledger.publishing.report_markup import figure, table
from benchledger.publishing.templating import fragment
from benchledger.raw.layout import run_dir_of_restart_manifest
from benchledger.raw.records import file_sha256
from benchledger.workloads.render import render_request

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


def prepared_texts(samples: pd.DataFrame, prepared: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(workload, prompt id) -> what was sent, for the sampled prompts of prepared workloads
    (datasets, synthetic lengths, sessions, traces): rendered from the run folder's prepared
    file as the client renders it (benchledger.workloads.render; a message list as
    `role: content` lines). The warehouse keeps no prompt text, so a workload whose file is
    not on this machine (an object store's run, a moved data dir) or is not the file the
    run recorded (sha256) gets none, and its samples say so."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.ipc as ipc

    texts: dict[tuple[str, str], str] = {}
    for workload in prepared.itertuples():
        ids = samples.loc[samples["workload"] == workload.workload, "prompt_id"].dropna()
        if ids.empty or not isinstance(workload.restart_manifest_path, str):
            continue
        run_dir = run_dir_of_restart_manifest(Path(workload.restart_manifest_path))
        path = run_dir / workload.prepared_file
        if not path.is_file() or file_sha256(path) != workload.prepared_sha256:
            continue
        with pa.memory_map(str(path)) as source:
            table = ipc.open_file(source).read_all()
        chosen = table.filter(pc.is_in(table["item_id"], pa.array(ids.unique().tolist())))
        prefix = (int(workload.shared_prefix_tokens)
                  if pd.notna(workload.shared_prefix_tokens) else None)
        for row in chosen.to_pylist():
            try:
                sent = render_request(row, int(workload.seed), prefix_tokens=prefix)
            except (TypeError, ValueError):  # no seed recorded, or nothing to render
                continue
            texts[(workload.workload, row["item_id"])] = (
                sent if isinstance(sent, str)
                else "\n".join(f"{m['role']}: {m['content']}" for m in sent))
    return texts


def _sample_text(row: pd.Series, texts: dict[tuple[str, str], str],
                 prepared: dict[tuple[str, str], str]) -> str:
    text = texts.get((row["prompt_set"], row["prompt_id"])) if isinstance(
        row["prompt_set"], str) else prepared.get((row["workload"], row["prompt_id"]))
    if text is None:
        return (f"(text not shown: a {row['workload_kind'] or 'prepared'} workload's prompts "
                "are in the run folder's prepared file, named by sha256 in the run's "
                "workloads, and that file is not readable here)")
    if isinstance(row["prompt_prefix"], str) and row["prompt_prefix"]:
        text = f"{row['prompt_prefix']} {text}"
    return text if len(text) <= SAMPLE_CHARS else text[:SAMPLE_CHARS].rstrip() + " …"


def _samples(samples: pd.DataFrame,
             prepared: dict[tuple[str, str], str]) -> list[tuple[pd.Series, str]]:
    """Each sampled request and the text it sent (as _sample_text shows it)."""
    texts = _prompt_texts(samples)
    return [(row, _sample_text(row, texts, prepared)) for _, row in samples.iterrows()]


def workload_section(samples: pd.DataFrame, lengths: pd.DataFrame,
                     chart: Chart | None,
                     prepared: dict[tuple[str, str], str] | None = None) -> Markup:
    """Prompt samples, then the length chart and its table (p50, p90, max per side)."""
    return fragment(
        "report_workload.html", title=WORKLOAD_TITLE,
        empty=samples.empty and lengths.empty, sample_chars=SAMPLE_CHARS,
        samples=_samples(samples, prepared or {}),
        chart=figure(chart) if chart else None,
        lengths=table(lengths, ["workload", "length", "side", "requests", "missing", "min",
                                "p50", "p90", "max", "mean"]))
