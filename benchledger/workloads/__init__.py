"""The requests of a sweep's workload: from a dataset, a trace, or made up, prepared whole.

- `spec`: the `[[workloads]]` keys that say where requests come from (`WorkloadSource`,
  the length distributions, `SharedPrefix`) and the checks between them;
- `datasets` (with `sharegpt`), `traces`: the files, read a column at a time (`jsonio`:
  pyarrow.json, and a line-by-line scan only to name a bad line);
- `lengths`: seeded length draws; `sessions`: multi-turn sessions from conversations;
- `prepare`: `prepare_workload`, a table of requests and its provenance;
- `render`: a synthetic or trace request's text, made when it is sent.

Nothing here talks to a server or imports Airflow; the sweep (benchledger.sweep.spec) holds a
WorkloadSource's keys in its Workload model, the measuring side renders and sends the rows.
"""

# Imported on first use (PEP 562), not here: the measurement client imports only
# `render`, and must not pull the sweep's types (and through them the simulator's options)
# in with it (tests/unit/simulator/test_settings.py holds the client and the simulator apart).
_WHERE = {
    "Dataset": "benchledger.workloads.datasets",
    "Distribution": "benchledger.sweep.workload",
    "Empirical": "benchledger.sweep.workload",
    "Fixed": "benchledger.sweep.workload",
    "Lognormal": "benchledger.sweep.workload",
    "Normal": "benchledger.sweep.workload",
    "PreparedWorkload": "benchledger.workloads.prepare",
    "SharedPrefix": "benchledger.sweep.workload",
    "TABLE_SCHEMA": "benchledger.workloads.prepare",
    "Trace": "benchledger.workloads.traces",
    "Uniform": "benchledger.sweep.workload",
    "WorkloadError": "benchledger.workloads.errors",
    "WorkloadSource": "benchledger.sweep.workload",
    "block_text": "benchledger.workloads.render",
    "group_prefix": "benchledger.workloads.render",
    "ids_sha256": "benchledger.workloads.prepare",
    "item_text": "benchledger.workloads.render",
    "prepare_workload": "benchledger.workloads.prepare",
    "read_dataset": "benchledger.workloads.datasets",
    "read_trace": "benchledger.workloads.traces",
    "render_messages": "benchledger.workloads.render",
    "render_prompt": "benchledger.workloads.render",
    "render_request": "benchledger.workloads.render",
}


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)


__all__ = [
    "TABLE_SCHEMA", "Dataset", "Distribution", "Empirical", "Fixed", "Lognormal", "Normal",
    "PreparedWorkload", "SharedPrefix", "Trace", "Uniform", "WorkloadError", "WorkloadSource",
    "block_text", "group_prefix", "ids_sha256", "item_text", "prepare_workload",
    "read_dataset", "read_trace", "render_messages", "render_prompt", "render_request",
]
