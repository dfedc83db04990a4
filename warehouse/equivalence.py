"""Output equivalence of two arms (issue #42; docs/protocol.md, "Output equivalence").

Speculative decoding, and any optimisation an A/B measures at temperature 0, is only an
optimisation if the answers stay the same: a configuration 2x faster that answers
differently is a bug, not a finding. Servers are not perfectly deterministic across batch
shapes, so the bar is the A/A control's own divergence, not zero.

Per comparison and workload: of the prompts both arms answered (the text actually sent,
prompt_sha256), how many got the same answer (each arm's most frequent answer to the
prompt, by the digest of its text: queries/answers_for_run.sql), and for each divergent
prompt where the answers first differ (characters, where the sweep kept the texts). The
rule `outputs_equivalent` (benchledger.rules.comparisons) holds the A/B's divergent share
to the upper end of the 95% interval of the control's (Clopper-Pearson; no control: 0).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd
from scipy.stats import binomtest

from benchledger.sweep.spec import Comparison, Sweep
from benchledger.warehouse.db import query_frame

# how many divergent prompts a comparison row names (the count is always whole), and how
# many its reason names
NAMED, SHOWN = 20, 5


@dataclass(frozen=True)
class Equivalence:
    """Two arms' answers to the prompts of one workload that both answered."""

    prompts: int
    identical: int
    divergent: list[dict[str, Any]]  # prompt_id, prompt_sha256, first_divergent_char

    @property
    def divergent_share(self) -> float | None:
        return None if not self.prompts else (self.prompts - self.identical) / self.prompts

    def bound(self) -> float:
        """The most divergent share an A/B held to this control may show: the upper end of
        the 95% interval of this one's (exact binomial)."""
        return float(binomtest(self.prompts - self.identical, self.prompts)
                     .proportion_ci(confidence_level=0.95, method="exact").high)

    def said(self, b: str, workload: str) -> str:
        """In words: 'spec-on changes the answer of 7 of 30 code prompts: code-03 from
        character 12, code-07 from character 40, ...' (the first SHOWN, by prompt id)."""
        changed = self.prompts - self.identical
        if not changed:
            return f"{b} changes the answer of 0 of {self.prompts} {workload} prompts"
        named = [f"{d['prompt_id']}" + ("" if d["first_divergent_char"] is None
                                        else f" from character {d['first_divergent_char']}")
                 for d in self.divergent[:SHOWN]]
        more = ", ..." if changed > len(named) else ""
        unknown = ("" if any(d["first_divergent_char"] is not None for d in self.divergent)
                   else " (where they part is unknown: keep_output_text is off)")
        return (f"{b} changes the answer of {changed} of {self.prompts} {workload} prompts: "
                f"{', '.join(named)}{more}{unknown}")


def applies(sweep: Sweep, comparison: Comparison) -> bool:
    """Whether the comparison checks its arms' answers: `equivalence` as set, else when both
    arms decode greedily (temperature 0), where the same prompt must give the same answer."""
    if comparison.equivalence is not None:
        return comparison.equivalence
    return all(sweep.arm(arm).temperature == 0 for arm in (comparison.a, comparison.b))


def run_answers(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Each arm's answer to each prompt of each workload (one query for the whole run)."""
    return query_frame(con, "answers_for_run", run_id=run_id)


def equivalence(answers: pd.DataFrame, a: str, b: str, workload: str) -> Equivalence:
    """How arms a and b answered the prompts of `workload` that both answered."""
    mine = answers[answers["workload"] == workload]
    pairs = mine[mine["arm"] == a].merge(mine[mine["arm"] == b], on="prompt_sha256",
                                         suffixes=("_a", "_b"))
    same = pairs["answer_sha256_a"] == pairs["answer_sha256_b"]
    divergent = [
        {"prompt_id": row.prompt_id_a, "prompt_sha256": row.prompt_sha256[:12],
         "first_divergent_char": _first_difference(row.answer_text_a, row.answer_text_b)}
        # one row per divergent prompt (never per request): a workload's prompts at most
        for row in pairs[~same].itertuples()]
    return Equivalence(len(pairs), int(same.sum()), divergent)


def _first_difference(a: Any, b: Any) -> int | None:
    """The 0-based character where two kept texts first differ (None: a text not kept)."""
    if not isinstance(a, str) or not isinstance(b, str):
        return None
    return len(os.path.commonprefix([a, b]))
