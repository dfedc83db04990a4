"""Sweep files for tests, built as Python dicts and written as TOML by tomli_w.

A test says what its sweep holds (`sweep(...)` of `simulator_arm(...)`, `command_arm(...)`,
`external_arm(...)`, `defaults(...)`; `cluster_sweep(...)` for the deployment tests' small
one) and derives a variant by the keys it changes (`variant`), rather than spelling TOML by
hand and editing it with `str.replace` (which silently does nothing when the text it looks
for moved). The file is what the product reads: tomli_w writes an array of tables the way
TOML allows (`workloads = [{ name = "code" }]` where a person would write `[[workloads]]`),
which parses to the same dict.

Tests about how TOML *text* is read (a bad key's message, a secret written with an
escape) keep their text: they are about the text.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import tomli_w

Doc = dict[str, Any]

SIM_MODEL = "sim-model"
# The simulator's pretend nvidia-smi page, read over HTTP: the clock check most sweeps use.
HTTP_CLOCK: Doc = {"clock_source": "http", "clock_url": "{base_url}/clocks"}
# No clock at all (a server that serves none, or a test that does not care).
NO_CLOCK: Doc = {"clock_source": "none", "require_clock_check": False}


class Delete:
    """`variant`'s value for a key to take out."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = Delete()


def simulator_arm(name: str, simulator: Mapping[str, Any] | None = None, *,
                  model: str = SIM_MODEL, **keys: Any) -> Doc:
    """A `server = "simulator"` arm; `simulator` is its [arms.simulator] table (none when
    None), `keys` any other arm keys (node, restarts, clock_url, ...)."""
    arm: Doc = {"name": name, "server": "simulator", "model": model, **keys}
    if simulator is not None:
        arm["simulator"] = dict(simulator)
    return arm


def command_arm(name: str, command: str, *, model: str = "m", **keys: Any) -> Doc:
    """A `server = "command"` arm started by `command` ({port} is the harness's)."""
    return {"name": name, "server": "command", "model": model, "command": command, **keys}


def external_arm(name: str, base_url: str, *, model: str = SIM_MODEL, **keys: Any) -> Doc:
    """A `server = "external"` arm: a server the test started itself."""
    return {"name": name, "server": "external", "base_url": base_url, "model": model, **keys}


def defaults(*, requests: int | None = 15, warmup: int | None = 1, restarts: int | None = 2,
             max_tokens: int | None = 24, clock: Mapping[str, Any] | None = HTTP_CLOCK,
             **keys: Any) -> Doc:
    """The [defaults] table most tests use: 15 requests after one warm-up, two restarts,
    24 tokens, the simulator's HTTP clock page (`clock=NO_CLOCK` for none, None to say
    nothing of clocks); `keys` add or override (concurrency, drain_timeout_s, ...). A key
    given as None is left out (the product's own default then holds)."""
    table: Doc = {"requests": requests, "warmup": warmup, "restarts": restarts,
                  "max_tokens": max_tokens, **(clock or {}), **keys}
    return {key: value for key, value in table.items() if value is not None}


def sweep(name: str, arms: Iterable[Doc], *, defaults: Doc | None = None,
          workloads: Iterable[Doc] | Iterable[str] | None = ("code",), **tables: Any) -> Doc:
    """A whole sweep. `workloads` are tables or built-in names (None: no [[workloads]] at
    all); the [sweep] table's other keys go in `sweep={...}` (retries, schedule, ...);
    `tables` are further top-level tables or arrays of tables (comparisons=[...],
    slos=[...], slo_target={...})."""
    sweep_table = {"name": name, **tables.pop("sweep", {})}
    doc: Doc = {"sweep": sweep_table}
    if defaults is not None:
        doc["defaults"] = dict(defaults)
    if workloads is not None:
        doc["workloads"] = [{"name": w} if isinstance(w, str) else dict(w) for w in workloads]
    doc["arms"] = [dict(arm) for arm in arms]
    doc.update({key: value for key, value in tables.items() if value is not None})
    return doc


def cluster_sweep(name: str, arms: Iterable[tuple[str, str]], *, step_ms: float = 2.0,
                  schedule: str = "none", workload_names: tuple[str, ...] = ("code",),
                  sweep_keys: Mapping[str, Any] | None = None, **defaults_keys: Any) -> Doc:
    """The deployment tests' small sweep (tests/cluster_helpers.py): one speculative
    simulator arm per (arm name, node), `step_ms` per decode step; 15 requests, two
    restarts unless `defaults_keys` say otherwise. Its windows last under a second, so
    the clock is sampled every 0.1 s (at the default 0.5 s a window could end before any
    sample under load: clock_under_load then left the restart out, ci43, and a run of one
    restart published nothing, which `run` now exits 1 on)."""
    return sweep(name, [simulator_arm(arm, {"speculative": True, "step_ms": step_ms},
                                      node=node) for arm, node in arms],
                 defaults=defaults(**{"clock_interval_s": 0.1, **defaults_keys}),
                 workloads=workload_names,
                 sweep={"schedule": schedule, **(sweep_keys or {})})


def variant(doc: Doc, changes: Mapping[str, Any]) -> Doc:
    """A deep copy of `doc` with `changes` merged in: a dict into a table merges key by
    key; a dict into an array of named tables (arms, workloads, slos) merges into the
    table of that name (`{"arms": {"on-b": {"simulator": {"step_ms": 3.0}}}}`); a list or
    a scalar replaces; DELETE takes the key out. `doc` is left as it was."""
    return _merge(copy.deepcopy(doc), changes, path="")


def _merge(into: Any, changes: Mapping[str, Any], path: str) -> Any:
    if isinstance(into, list):  # an array of tables, addressed by their names
        by_name = {table.get("name"): table for table in into}
        for name, change in changes.items():
            if name not in by_name:
                raise KeyError(f"{path}: no table named {name!r} (have {sorted(by_name)})")
            if change is DELETE:
                into.remove(by_name[name])
            else:
                _merge(by_name[name], change, f"{path}[{name}]")
        return into
    for key, change in changes.items():
        if change is DELETE:
            into.pop(key, None)
        elif isinstance(change, Mapping) and isinstance(into.get(key), dict | list):
            _merge(into[key], change, f"{path}.{key}")
        else:
            into[key] = copy.deepcopy(change)
    return into


def read_doc(path: Path) -> Doc:
    """A sweep file (a shipped one, say) as a dict, to derive a variant of."""
    with open(path, "rb") as file:
        return tomllib.load(file)


def toml(doc: Doc) -> str:
    """The sweep file's text."""
    return tomli_w.dumps(doc)


def write_sweep(path: Path, doc: Doc) -> Path:
    """Write `doc` as a sweep file at `path`; returns `path`."""
    path.write_text(toml(doc))
    return path
