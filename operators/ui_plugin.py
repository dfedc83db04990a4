"""The benchledger page in the Airflow UI: an Airflow plugin that mounts the pages of
publishing/ui_app.py in the API server (fastapi_apps, under URL_PREFIX) and puts them in
the UI's navigation (external_views: the UI shows them in an iframe, inside its own frame).

Airflow does not guard a plugin's FastAPI app, so every page requires what the DAG runs
view requires (Airflow's own `requires_access_dag("GET", RUN)`, through the deployment's
auth manager); a visitor who is not logged in is sent to the login page. The warehouses a
page may open are those `[benchledger] warehouses` of airflow.cfg lists (comma-separated
paths) and those of the sweeps `benchledger run --cluster` installed in the DAGs folder.

Airflow loads plugins in every process (workers, the scheduler, task processes), so this
module stays light: the pages and their imports (FastAPI, DuckDB, pandas) are built on the
first request, in the API server. `benchledger cluster up` installs it (docs/cluster.md,
"The Airflow UI").
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/benchledger"
NAV_ROUTE = "benchledger"
CONFIG_SECTION = "benchledger"


def _base_path() -> str:
    """The API server's path under its host ([api] base_url may carry one, behind a
    proxy): the nav entry's iframe loads the pages from there."""
    from urllib.parse import urlparse

    return urlparse(conf.get("api", "base_url", fallback="/")).path.rstrip("/")


def _warehouses() -> list[Path]:
    from benchledger.publishing.ui_app import listed_warehouses

    return listed_warehouses(conf.get(CONFIG_SECTION, "warehouses", fallback=""),
                             Path(conf.get("core", "dags_folder")))


def build_app() -> Any:
    """The pages behind Airflow's authentication."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, Request

    from benchledger.publishing.ui_app import create_app

    def login_url(request: Request) -> str:
        return get_auth_manager().get_url_login(next_url=str(request.url))

    return create_app(_warehouses,
                      dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.RUN))],
                      login_url=login_url)


class LazyApp:
    """An ASGI app that builds the real one on its first request."""

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = build_app()
        await self._app(scope, receive, send)


class BenchledgerUiPlugin(AirflowPlugin):
    name = "benchledger"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "benchledger"}]
    external_views = [{"name": "benchledger", "href": f"{_base_path()}{URL_PREFIX}/",
                       "destination": "nav", "url_route": NAV_ROUTE}]
