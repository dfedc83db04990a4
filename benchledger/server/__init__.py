"""A model server while it runs: start, health-wait, describe and stop it, every process it
started, what it says while a window is measured, and GPU telemetry (DCGM)."""
