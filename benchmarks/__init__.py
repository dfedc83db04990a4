"""Scripts that measure speed and memory at the scale users run (see README.md here)."""
