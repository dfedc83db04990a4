"""One Airflow DAG per sweep file in dags/sweeps/ (wiring only; see operators/dag_factory)."""

from pathlib import Path

from operators.dag_factory import build_sweep_dag

SWEEPS = Path(__file__).parent / "sweeps"

for _sweep_file in sorted(SWEEPS.glob("*.toml")):
    _dag = build_sweep_dag(_sweep_file)
    globals()[_dag.dag_id] = _dag
