"""A restart stays on one worker, however many serve its node's queue (issue #25).

A restart's launch goes to its node's queue, where any worker of that node may take it;
every later task of the restart (readiness, measurements, teardown) must run where the
server was started. Airflow fixes a task's queue when the DAG is parsed, so each restart
has a queue of its own, `<node>@<dag id>.<arm>__r<k>`, that no worker serves at first:
the launch task, as the first thing it does, adds that queue to its own Edge worker
through the Edge API (the worker takes the server's list at its next heartbeat), and the
restart's last task on that worker removes it. With one worker per queue (SQLite, the
local default) nothing needs pinning and the DAG uses the node's queue throughout.

A worker that dies holding a pin registers again without it (Edge registration resets a
worker's queues to those it was started with): the restart's remaining tasks then wait on
a queue nobody serves, which `run --cluster` reports and gives up after 10 minutes. That
is deliberate: the server under test ran on that host, and measuring a server on another
host would be a different restart (docs/cluster.md, "A restart stays on one host").
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote


def restart_queue(node: str, dag_id: str, group_id: str) -> str:
    """The queue of one restart's tasks on one node (its launch excepted)."""
    return f"{node}@{dag_id}.{group_id}"


def _update(worker: str, add: list[str] | None = None,
            remove: list[str] | None = None) -> None:
    # The Edge worker's own client: it signs the request with the deployment's shared
    # [api_auth] jwt_secret for exactly this path, as the worker signs its heartbeats.
    from airflow.providers.edge3.cli.api_client import _make_generic_request
    from airflow.providers.edge3.worker_api.datamodels import WorkerQueueUpdateBody

    body = WorkerQueueUpdateBody(new_queues=add, remove_queues=remove)
    asyncio.run(_make_generic_request("PATCH", f"worker/queues/{quote(worker)}",
                                      body.model_dump_json()))


def pin(queue: str, worker: str) -> None:
    """This worker serves the restart's queue from its next heartbeat on."""
    _update(worker, add=[queue])


def unpin(queue: str, worker: str) -> None:
    """The restart is over on this worker: its queue is served no longer."""
    _update(worker, remove=[queue])
