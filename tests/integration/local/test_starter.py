"""Issue #43, item 1: `benchledger init URL` writes a sweep for a server that is already
running, from what the server says about itself, and `benchledger run` publishes from it on
the first try. The servers: the simulator as llama-cpp-python's server behaves (no /health,
streams without usage: counted from logprobs) and as one that streams usage (GuideLLM's
mock server, vLLM); this machine has no GPU clock, so the file says so and its entries are
labelled, not blocked."""

from __future__ import annotations

import tomllib
from pathlib import Path

import duckdb
import pytest

from benchledger.cli import main
from tests.conftest import start_simulator, stop_process_group

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def llama_like():
    """No /health, no usage in streams, an X-Request-Id refused unless a UUID, the stream in
    progress cut when another request arrives (llama-cpp-python 0.3's server)."""
    proc, base = start_simulator("--no-health", "--no-stream-usage", "--step-ms", "2",
                                 "--uuid-request-ids", "--interrupt-requests",
                                 "--model", "tiny-q4", ready_path="/v1/models")
    yield base
    stop_process_group(proc)


@pytest.fixture(scope="module")
def with_usage():
    proc, base = start_simulator("--step-ms", "2", "--model", "org/Model-7B")
    yield base
    stop_process_group(proc)


def _init(capsys, url: str, out: Path, *flags: str) -> tuple[int, str, str]:
    code = main(["init", url, "--out", str(out), *flags])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_init_then_run_publishes_on_the_first_try(tmp_path, llama_like, capsys):
    sweep = tmp_path / "mine.toml"
    code, out, err = _init(capsys, llama_like + "/v1", sweep)
    assert code == 0, err
    assert f"wrote {sweep}; run it with:" in out, out
    written = tomllib.loads(sweep.read_text())
    arm, = written["arms"]
    assert arm == {"name": "tiny-q4", "server": "external", "base_url": llama_like,
                   "model": "tiny-q4", "token_count": "logprobs", "health_path": "/v1/models",
                   "request_id_header": False}
    assert written["defaults"]["concurrency"] == [1]  # it serves one request at a time
    assert "request ids: the server refuses the X-Request-Id header" in out, out
    assert "concurrency: [1] only (two requests sent together did not both complete" in out
    assert written["defaults"]["clock_source"] == "none"
    assert written["defaults"]["require_clock_check"] is False
    assert [w["name"] for w in written["workloads"]] == ["code", "prose"]
    text = sweep.read_text()
    assert "streams no usage" in text and "No GPU clock is readable from here" in text
    warehouse = tmp_path / "bench.duckdb"
    assert main(["run", str(sweep), "--warehouse", str(warehouse)]) == 0, capsys.readouterr()
    with duckdb.connect(str(warehouse), read_only=True) as con:
        published = con.execute(
            "SELECT count(*), list(DISTINCT token_source), list(DISTINCT clock_check) "
            "FROM published_entries").fetchone()
    assert published is not None and published[0] > 0, published
    # tokens from logprobs where a count is published at all (some entries have none)
    assert set(published[1]) <= {"logprobs", None} and "logprobs" in published[1], published
    assert published[2] == ["unchecked (require_clock_check = false)"], published


def test_a_server_that_streams_usage_is_counted_from_it(tmp_path, with_usage, capsys):
    sweep = tmp_path / "usage.toml"
    code, out, err = _init(capsys, with_usage, sweep, "--name", "nightly")
    assert code == 0, err
    written = tomllib.loads(sweep.read_text())
    assert written["sweep"]["name"] == "nightly"
    arm, = written["arms"]
    assert arm["name"] == "model-7b" and arm["model"] == "org/Model-7B"
    assert arm["token_count"] == "usage" and "health_path" not in arm
    assert "request_id_header" not in arm and written["defaults"]["concurrency"] == [1, 4]
    assert "/metrics: vllm counters" in out and "readiness: /health answers 200" in out, out


def test_mistakes_are_refused_naming_them(tmp_path, with_usage, capsys):
    sweep = tmp_path / "s.toml"
    code, _, err = _init(capsys, "http://127.0.0.1:1", sweep)
    assert code == 2 and "nothing listens at 127.0.0.1:1 (connection refused)" in err, err
    code, _, err = _init(capsys, with_usage, sweep, "--model", "not-served")
    assert code == 2 and "The model `not-served` does not exist" in err, err
    code, _, err = _init(capsys, with_usage, sweep, "--name", "Bad Name")
    assert code == 2 and "--name 'Bad Name': a sweep's name is lowercase" in err, err
    assert not sweep.exists()
    sweep.write_text("# mine\n")
    code, _, err = _init(capsys, with_usage, sweep)
    assert code == 2 and f"{sweep} exists: choose another --out, or --force" in err, err
    assert sweep.read_text() == "# mine\n"
    assert _init(capsys, with_usage, sweep, "--force")[0] == 0
