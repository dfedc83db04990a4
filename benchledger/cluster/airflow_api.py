"""Airflow's stable REST API (/api/v2) as the cluster commands use it: a small client that
logs in, renews its token once, and tells a server's trouble (asked again, bounded) from a
refusal (raised at once with the server's reason). Never imports Airflow."""

from __future__ import annotations

import time
from typing import Any

import httpx


class ClusterError(RuntimeError):
    """The local cluster could not be started, reached or stopped; says why and where."""


class ApiClient:
    """Airflow's stable REST API (/api/v2), authenticated with a JWT from /auth/token.

    Every call has a timeout; a transport error or a server error (5xx) is retried for
    `retry_s` (an API server restarting, a busy metadata DB), a definite HTTP refusal (4xx)
    is raised at once with the server's reason.
    """

    def __init__(self, api_url: str, user: str, password: str, retry_s: float = 60.0,
                 transport: httpx.BaseTransport | None = None):
        self.api_url = api_url.rstrip("/")
        self._credentials = {"username": user, "password": password}
        self._token: str | None = None
        self.retry_s = retry_s
        self._http = httpx.Client(timeout=30, transport=transport)

    def _authenticate(self) -> str:
        response = self._http.post(f"{self.api_url}/auth/token", json=self._credentials)
        if response.status_code not in (200, 201):
            raise ClusterError(f"the Airflow API at {self.api_url} refused the login of "
                               f"{self._credentials['username']!r}: HTTP "
                               f"{response.status_code} {response.text[:200]}")
        return response.json()["access_token"]

    def request(self, method: str, path: str, ok_missing: bool = False,
                **kwargs: Any) -> Any:
        deadline = time.monotonic() + self.retry_s
        fresh = False  # whether the token sent was obtained by this very call
        while True:
            try:
                if self._token is None:
                    self._token, fresh = self._authenticate(), True
                response = self._http.request(
                    method, f"{self.api_url}{path}",
                    headers={"Authorization": f"Bearer {self._token}"}, **kwargs)
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    raise ClusterError(f"the Airflow API at {self.api_url} did not answer "
                                       f"for {self.retry_s:.0f}s: {exc}") from exc
                time.sleep(1)
                continue
            if response.status_code == 401:
                self._token = None
                if fresh or time.monotonic() > deadline:
                    # A token it has just issued refused: logging in again cannot help.
                    raise ClusterError(
                        f"{method} {path}: the Airflow API at {self.api_url} refused the "
                        f"token it had just issued to {self._credentials['username']!r}: "
                        f"HTTP 401 {response.text[:300]}")
                continue  # the kept token expired: log in again, once
            if response.status_code == 404 and ok_missing:
                return None
            if response.status_code >= 500 and time.monotonic() < deadline:
                # The server's trouble, not a refusal: on SQLite a busy metadata DB answers
                # 500 "Database error" while another process writes. Ask again, bounded.
                time.sleep(1)
                continue
            if response.status_code >= 400:
                raise ClusterError(f"{method} {path}: HTTP {response.status_code} "
                                   f"{response.text[:300]}")
            if not response.content:
                return {}
            try:
                return response.json()
            except ValueError as exc:  # e.g. the UI's page: that API is not served there
                raise ClusterError(
                    f"{method} {path}: the Airflow API at {self.api_url} answered HTTP "
                    f"{response.status_code} with {response.headers.get('content-type')!r}, "
                    f"not JSON: {response.text[:200]!r}") from exc

    def edge_workers(self) -> list[dict]:
        return self.request("GET", "/edge_worker/ui/worker")["workers"]

    def ensure_pool(self, name: str, slots: int, description: str) -> None:
        pool = self.request("GET", f"/api/v2/pools/{name}", ok_missing=True)
        body = {"name": name, "slots": slots, "description": description,
                "include_deferred": False}
        if pool is None:
            self.request("POST", "/api/v2/pools", json=body)
        elif pool.get("slots") != slots:
            self.request("PATCH", f"/api/v2/pools/{name}", json=body)
