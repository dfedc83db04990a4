"""`benchledger cluster`: a real Airflow 3 deployment (up, status, down, join), a sweep run
on it, its configuration folder, the supervisor of its processes and the REST API client."""
