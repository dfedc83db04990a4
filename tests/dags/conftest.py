"""DAG tests parse DAG files in this process: give Airflow a throwaway home first, removed
when the process ends (each xdist worker makes its own)."""

import atexit
import os
import shutil
import tempfile

_HOME = tempfile.mkdtemp(prefix="benchledger-airflow-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = _HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
