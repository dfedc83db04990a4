"""The embedded run's in-process Execution API serves the Task SDK's version only
(benchledger/local/execution_api.py), and serves it as the whole app does.

Each check runs in a fresh interpreter with its own AIRFLOW_HOME: Airflow reads its
configuration at import, and the in-process app is one per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# Builds the app as dag.test() gets it and, apart, the whole app as Airflow builds it; then
# prints what the newest version serves in each: the OpenAPI document of its routes and
# one request's answer through the in-process transport the Task SDK uses.
PROBE = textwrap.dedent("""
    import json, sys
    from airflow.api_fastapi.execution_api.app import InProcessExecutionAPI
    from airflow.sdk.api.datamodels import _generated
    from airflow.sdk.execution_time.supervisor import in_process_api_server
    from fastapi.openapi.utils import get_openapi
    from benchledger.local.execution_api import serve_only_the_sdk_version

    if sys.argv[1] != "same":
        _generated.API_VERSION = sys.argv[1]
    trimmed = serve_only_the_sdk_version()
    served = in_process_api_server()
    whole = InProcessExecutionAPI()

    def newest(api):
        app = api.app
        app._cadwyn_initialize()
        version = app.versions.versions[0].value
        routes = app.router.versioned_routers[version].routes
        answer = api.transport.handle_request(__import__("httpx").Request(
            "GET", "http://in-process.invalid./health/ping",
            headers={"Airflow-API-Version": version}))
        answer.read()
        return {"versions": [str(v.value) for v in app.versions.versions],
                "openapi": get_openapi(title="x", version=version, routes=routes),
                "ping": [answer.status_code, answer.text]}

    print(json.dumps({"trimmed": trimmed, "served": newest(served),
                      "whole": newest(whole)}))
""")


def _probe(tmp_path, sdk_version: str = "same") -> dict:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    run = subprocess.run([sys.executable, "-c", PROBE, sdk_version], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return _probe(tmp_path_factory.mktemp("execution-api"))


def test_the_pinned_airflow_gets_the_one_version_bundle(probe):
    # an Airflow or Cadwyn upgrade that the trim no longer fits fails here, not silently
    # (the runs would only be slower)
    assert probe["trimmed"] is True
    assert probe["served"]["versions"] == [probe["whole"]["versions"][0]]
    assert len(probe["whole"]["versions"]) > 1


def test_the_newest_version_is_served_as_the_whole_app_serves_it(probe):
    served, whole = probe["served"], probe["whole"]
    assert served["openapi"]["paths"]  # not two empty documents
    assert served["openapi"] == whole["openapi"]
    assert served["ping"] == whole["ping"]
    assert served["ping"][0] == 200


def test_an_sdk_speaking_another_version_gets_the_whole_app(tmp_path):
    found = _probe(tmp_path, sdk_version="2025-04-28")
    assert found["trimmed"] is False
    assert found["served"]["versions"] == found["whole"]["versions"]
