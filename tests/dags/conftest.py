"""DAG tests parse DAG files in this process: give Airflow a throwaway home first."""

import os
import tempfile

os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="benchledger-airflow-")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
