"""The warehouse: DuckDB tables, views and queries, and the steps that write them.

This package's own import stays light (DAG files and the cluster read the pool's name):
the modules below import DuckDB, pandas and GX.
"""

# The Airflow pool of the tasks that write the warehouse (load, validate, derive) and of
# publish, which reads it: one slot, since DuckDB allows one writer process per file and a
# reader cannot open the file while a writer holds it.
WAREHOUSE_POOL = "benchledger_warehouse"
WAREHOUSE_POOL_SLOTS = 1
POOL_DESCRIPTION = "benchledger warehouse writer (DuckDB: one writer)"
