"""`python -m benchledger.cluster.edge_worker ARGS`: Airflow's `airflow edge worker ARGS`,
with the modules benchledger's tasks import already loaded.

The Edge worker forks a process for each task it runs (edge3's fork path; Airflow's
supervisor forks once more for the task itself), and each fork imported what its task
needs afresh: Great Expectations alone takes 2.5-3 s of CPU on this project's 2-core
machine, the restart steps (client, lifecycle, raw store) about half a second more, for
every validate task and every restart's four tasks of every sweep. Imported once here,
before the worker's first fork, every task process inherits them. Only imports: nothing
here opens a connection, starts a thread or reads the sweep, so a fork inherits nothing
but loaded code (what Airflow's LocalExecutor also relies on when it forks its workers).
Measured with tests/integration/cluster/test_cluster.py on an idle 2-core machine: the task
processes took 57 s of CPU before and 26 s after, the whole module 175 s and 150 s.
"""

from __future__ import annotations

import gc
import importlib
import sys

# What the tasks of benchledger.operators.sweep_tasks import when they run (their imports are
# inside the task bodies so that parsing the DAG file stays light for the dag-processor).
PRELOADED = (
    "benchledger.operators.dag_factory",
    "benchledger.operators.sweep_tasks",
    "benchledger.restart.steps",
    "benchledger.restart.deployment",
    "benchledger.raw.store",
    "benchledger.warehouse.load",
    "benchledger.warehouse.validate",
    "benchledger.warehouse.derive",
    "benchledger.warehouse.compare",
    "benchledger.warehouse.frontier",
    "benchledger.warehouse.history",
    "benchledger.warehouse.interim",
    "benchledger.publishing.export",
    "benchledger.expectations.gate",
)


def main(argv: list[str] | None = None) -> None:
    for name in PRELOADED:
        importlib.import_module(name)
    from airflow.__main__ import main as airflow_main

    from benchledger.expectations.gate import import_gx

    import_gx()  # the gate imports GX inside its functions, not at its top

    # The forks' cyclic collections would traverse all of it again in every task process;
    # frozen, they skip it (as Airflow's LocalExecutor freezes before it forks workers).
    gc.freeze()

    sys.argv = ["airflow", "edge", "worker", *(sys.argv[1:] if argv is None else argv)]
    airflow_main()


if __name__ == "__main__":
    main()
