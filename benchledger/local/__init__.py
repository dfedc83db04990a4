"""`benchledger run` and `demo` from this machine: the embedded Airflow run (dag.test) and
its live view in the terminal."""
