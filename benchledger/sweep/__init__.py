"""The sweep file as a model: its arms, workloads and value types, SLOs and load points,
where each process runs (topology), and the schedule Airflow keeps for it."""
