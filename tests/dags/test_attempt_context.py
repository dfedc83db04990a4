"""The restart tasks hand the core their task instance's try number and worker hostname
(plain values: the core never imports Airflow). Here, where Airflow has a throwaway home."""

from __future__ import annotations

from types import SimpleNamespace

from benchledger.raw.layout import Attempt


def test_a_task_passes_its_try_number_and_worker(monkeypatch):
    from airflow.sdk.api.client import get_hostname

    from benchledger.operators import sweep_tasks

    ti = SimpleNamespace(try_number=3, hostname="edge-worker-7")
    monkeypatch.setattr(sweep_tasks, "get_current_context", lambda: {"ti": ti})
    assert sweep_tasks._attempt() == Attempt(3, "edge-worker-7")
    ti.hostname = None  # not set yet: the Task SDK's own hostname, as the TI would record it
    assert sweep_tasks._attempt() == Attempt(3, get_hostname())
