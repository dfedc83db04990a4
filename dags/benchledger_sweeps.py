"""One Airflow DAG per sweep file in dags/sweeps/, plus its asset-triggered publish DAG
(wiring only; see operators/dag_factory)."""

from pathlib import Path

from benchledger.operators.dag_factory import build_publish_dag, build_sweep_dag

SWEEPS = Path(__file__).parent / "sweeps"

for _sweep_file in sorted(SWEEPS.glob("*.toml")):
    for _dag in (build_sweep_dag(_sweep_file), build_publish_dag(_sweep_file)):
        globals()[_dag.dag_id] = _dag
