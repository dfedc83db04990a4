"""The Airflow side: thin tasks and the DAG factory. This package's own import is light
(no Airflow): the runner, which starts Airflow in a child process, reads FAILURES_ENV here.
"""

from benchledger.settings import variable

# Where the tasks' on_failure_callback appends one JSON line per failed task (the first
# cause of a failed run, for the terminal): set by benchledger.local.runner for the runs it starts.
FAILURES_ENV = variable("failures_file")
