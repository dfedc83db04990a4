"""benchledger core: sweep model, measurement client, simulator, statistics, CLI.

This package never imports Airflow, so it stays fast to import and easy to test.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("benchledger")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
