"""One restart slot from launch to stop: its steps and manifest, the deployment of its
processes on their nodes, the rate search, the recorded sweep and prepared workloads, and
the window writer (raw files only; the warehouse is loaded later)."""
