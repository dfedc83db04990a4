"""The embedded run's in-process Execution API serves the Task SDK's version only
(benchledger/local/execution_api.py), and serves it as the whole app does.

One fresh interpreter with its own AIRFLOW_HOME does every check (Airflow reads its
configuration at import, the in-process app is one per process, and each interpreter
costs seconds of imports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# First as an SDK speaking an older version would (the app must be left whole), then as
# the installed SDK: the app dag.test() gets, and apart the whole app as Airflow builds
# it; for each, what the newest version serves: the OpenAPI document of its routes and
# one request's answer through the in-process transport the Task SDK uses.
PROBE = textwrap.dedent("""
    import json
    import httpx
    from airflow.api_fastapi.execution_api.app import InProcessExecutionAPI
    from airflow.sdk.api.datamodels import _generated
    from airflow.sdk.execution_time.supervisor import in_process_api_server
    from fastapi.openapi.utils import get_openapi
    from benchledger.local.execution_api import serve_only_the_sdk_version

    def versions(api):
        return [str(v.value) for v in api.app.versions.versions]

    sdk_version = _generated.API_VERSION
    _generated.API_VERSION = "2025-04-28"
    older_sdk = {"trimmed": serve_only_the_sdk_version(),
                 "versions": versions(in_process_api_server())}
    _generated.API_VERSION = sdk_version
    trimmed = serve_only_the_sdk_version()

    def newest(api):
        app = api.app
        app._cadwyn_initialize()
        version = app.versions.versions[0].value
        routes = app.router.versioned_routers[version].routes
        answer = api.transport.handle_request(httpx.Request(
            "GET", "http://in-process.invalid./health/ping",
            headers={"Airflow-API-Version": version}))
        answer.read()
        return {"versions": versions(api),
                "openapi": get_openapi(title="x", version=version, routes=routes),
                "ping": [answer.status_code, answer.text]}

    print(json.dumps({"older_sdk": older_sdk, "trimmed": trimmed,
                      "served": newest(in_process_api_server()),
                      "whole": newest(InProcessExecutionAPI())}))
""")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    home = tmp_path_factory.mktemp("execution-api") / "airflow"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


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


def test_an_sdk_speaking_another_version_gets_the_whole_app(probe):
    assert probe["older_sdk"]["trimmed"] is False
    assert probe["older_sdk"]["versions"] == probe["whole"]["versions"]
