"""Seeded length draws: a whole column at once (numpy), recorded with their parameters.

Each use of randomness in a workload draws from its own stream, numpy's generator seeded by
(seed, stream): the same seed gives the same sample order, input lengths, output lengths and
prefix groups, and changing one key (say output_length) changes no other column's draws.

An `empirical` distribution draws, with replacement, from a dataset's rows' lengths:
- input: a JSON Lines row's `input_tokens`, else the whitespace-separated words of its
  `prompt` (of all its messages' contents); a ShareGPT row's first human turn's words;
- output: a row's `output_tokens`, else its `max_tokens`, else (ShareGPT) the words of the
  answer to its first human turn; a row with none of these is an error.
Words stand in for tokens (about one each in English text); the server's usage counts the
real tokens of every request.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.sweep.workload import Distribution, Empirical, Fixed, Normal, Uniform
from benchledger.workloads.datasets import Dataset, Format, read_dataset
from benchledger.workloads.errors import WorkloadError
from benchledger.workloads.jsonio import MAX_LENGTH, word_counts

# The streams (see the module's docstring); a number, never reused for another purpose.
SAMPLING, INPUT_LENGTH, OUTPUT_LENGTH, PREFIX_GROUP = 1, 2, 3, 4
MAX_SEED = 2**64 - 1
Which = Literal["input", "output"]
DatasetReader = Callable[..., tuple[Dataset, str]]


def rng(seed: int, stream: int) -> np.random.Generator:
    if not 0 <= seed <= MAX_SEED:
        raise WorkloadError(f"seed {seed} is not an integer from 0 to 2**64 - 1")
    return np.random.default_rng([seed, stream])


def reader(base_dir: Path) -> DatasetReader:
    """Reads each dataset path (relative to base_dir) once: a workload whose dataset is
    also its empirical distribution's reads the file once."""
    cache: dict[tuple[Path, str], Dataset] = {}

    def read(written: str, dataset_format: Format = "auto") -> tuple[Dataset, str]:
        key = (base_dir / written, dataset_format)
        if key not in cache:
            cache[key] = read_dataset(key[0], dataset_format)
        return cache[key], written

    return read


def draw(dist: Distribution, n: int, seed: int, which: Which,
         read: DatasetReader) -> tuple[np.ndarray, dict[str, Any]]:
    """n lengths (int64) and their provenance: the distribution's parameters, the seed, and
    what was drawn."""
    stream = rng(seed, INPUT_LENGTH if which == "input" else OUTPUT_LENGTH)
    record: dict[str, Any] = {**dist.model_dump(exclude_none=True), "seed": seed}
    low, high = 1, MAX_LENGTH
    if isinstance(dist, Fixed):
        values = np.full(n, dist.value, dtype=np.float64)
    elif isinstance(dist, Uniform):
        values = stream.integers(dist.min, dist.max, size=n, endpoint=True).astype(np.float64)
    elif isinstance(dist, Empirical):
        dataset, written = read(dist.dataset)
        lengths, sources = empirical(dataset, which)
        values = stream.choice(lengths, size=n, replace=True).astype(np.float64)
        record.update(dataset=dataset.provenance(written), sources=sources)
    else:
        if isinstance(dist, Normal):
            values = stream.normal(dist.mean, dist.stddev, size=n)
        else:
            values = stream.lognormal(math.log(dist.median), dist.sigma, size=n)
        low, high = max(1, dist.min or 1), dist.max or MAX_LENGTH
    out = np.clip(np.rint(values), low, high).astype(np.int64)
    if n:
        record["drawn"] = {"min": int(out.min()), "max": int(out.max()),
                           "mean": round(float(out.mean()), 3)}
    return out, record


def empirical(dataset: Dataset, which: Which) -> tuple[np.ndarray, dict[str, int]]:
    """Every row's input or output length (int64), and how many came from which field."""
    t = dataset.table
    if which == "input":
        given = t["input_tokens"].combine_chunks()
        lists = t["messages"].combine_chunks()
        flat = lists.flatten()
        message_words = np.bincount(np.asarray(pc.list_parent_indices(lists)),
                                    weights=np.asarray(word_counts(pc.struct_field(flat,
                                                                                   "content"))),
                                    minlength=len(t)) if len(flat) else np.zeros(len(t))
        words = pc.coalesce(word_counts(t["prompt"].combine_chunks()),
                            pa.array(message_words.astype(np.int64)))
        values = pc.coalesce(given, words)
        sources = {"input_tokens": len(t) - given.null_count,
                   "words": given.null_count}
    else:
        given = t["output_tokens"].combine_chunks()
        target = t["max_tokens"].combine_chunks()
        answer = word_counts(t["answer"].combine_chunks())
        values = pc.coalesce(given, target, answer)
        missing = np.flatnonzero(np.asarray(pc.is_null(values)))
        if len(missing):
            raise WorkloadError(f"{dataset.where(int(missing[0]))}: no output length for an "
                                "empirical distribution (`output_tokens`, `max_tokens`, or "
                                "a ShareGPT answer)")
        from_target = int(np.count_nonzero(np.asarray(pc.is_null(given))
                                           & np.asarray(pc.is_valid(target))))
        sources = {"output_tokens": len(t) - given.null_count, "max_tokens": from_target,
                   "answer_words": given.null_count - from_target}
    return np.asarray(values, dtype=np.int64), {k: v for k, v in sources.items() if v}
