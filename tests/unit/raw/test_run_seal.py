"""The run's seal (issue #39 item 14): a rebuild refuses a raw file none of the run's steps
wrote.

A hostile probe edited `server_version` in a restart.json and rebuilt a fresh warehouse
from the raw folder: it loaded silently (window files were re-hashed against their window
manifest; the manifests themselves against nothing). The run here is written by the
project's own writers (benchmarks/synthetic_run.py: the run manifest, restart manifests and
window files as the pipeline's steps write them), then loaded into fresh warehouses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchledger.raw import layout as raw
from benchledger.raw import seal
from benchledger.restart.manifest import RestartRecord
from benchledger.warehouse.db import WarehouseError, connect
from benchledger.warehouse.load import load_run_dir
from benchmarks.synthetic_run import write_scale_run


@pytest.fixture
def layout(tmp_path) -> raw.RunLayout:
    return write_scale_run(tmp_path / "raw", 80, restarts=2, arms=("a",), workloads=("code",),
                           events=5, seed=3)


def rebuild(run_dir: Path) -> dict[str, int]:
    """A fresh warehouse loaded from the raw folder: what a rebuild does."""
    with connect(":memory:") as con:
        return load_run_dir(con, run_dir)


def edit_json(path: Path, **changes) -> bytes:
    before = path.read_bytes()
    path.write_text(json.dumps({**json.loads(before), **changes}, indent=1, sort_keys=True))
    return before


def test_a_sealed_run_rebuilds(layout):
    assert json.loads(layout.run_manifest.read_text())["seal"] == seal.SEAL_VERSION
    seals = sorted(p.relative_to(layout.run_dir).as_posix()
                   for p in layout.run_dir.rglob("seal-*.jsonl"))
    # one seal file per writing process and folder: the run's, and each restart's
    assert [s.split("/")[0] for s in seals] == ["a", "a", seals[-1]]
    assert rebuild(layout.run_dir)["windows"] == 2


def test_an_edited_restart_manifest_is_refused_naming_it(layout):
    manifest = layout.restart_manifest("a", 1)
    before = edit_json(manifest, server_version="synthetic 2 (edited)")
    with pytest.raises(WarehouseError) as refused:
        rebuild(layout.run_dir)
    assert str(refused.value).startswith(
        f"{manifest}: sha256 {raw_sha(manifest)} is not a version the run's steps wrote")
    assert "refusing to load the run" in str(refused.value)
    manifest.write_bytes(before)  # the file as its step wrote it: loads again
    assert rebuild(layout.run_dir)["restarts"] == 2


def raw_sha(path: Path) -> str:
    return seal.sha256_bytes(path.read_bytes())


@pytest.mark.parametrize("what", ["window manifest", "run manifest"])
def test_every_other_manifest_is_sealed_too(layout, what):
    path = (layout.window_files("a", 0, "code", 1).manifest if what == "window manifest"
            else layout.run_manifest)
    edit_json(path, edited_by="a hand")
    with pytest.raises(WarehouseError, match=f"{path}: sha256 .* is not a version"):
        rebuild(layout.run_dir)


def test_a_window_file_swapped_with_its_manifest_rewritten_to_match_is_refused(layout):
    """The window manifest names its files' sha256: rewriting both is what an edit of a
    requests file takes, and the manifest's new content is one no step wrote."""
    files = layout.window_files("a", 0, "code", 1)
    other = layout.window_files("a", 1, "code", 1)
    files.requests.write_bytes(other.requests.read_bytes())
    edit_json(files.manifest, requests_file_sha256=raw_sha(files.requests))
    with pytest.raises(WarehouseError, match=f"{files.manifest}: sha256 .* is not a version"):
        rebuild(layout.run_dir)


def test_a_run_without_its_seal_files_is_refused(layout):
    for path in layout.run_dir.rglob("seal-*.jsonl"):
        path.unlink()
    with pytest.raises(WarehouseError, match=r"run.json: not in the run's seal"):
        rebuild(layout.run_dir)


def test_every_version_a_step_wrote_loads_and_a_cut_write_loses_nothing(layout):
    record = RestartRecord(layout, "a", 0)
    record.update(stop_status="stopped by SIGTERM (a later step)")  # a second version
    # a write cut between its seal entry and its rename: the seal knows a version that
    # never reached the folder, and the version in place still loads
    seal.record(layout.slot_dir("a", 0), [(record.path, "0" * 64)])
    # a seal line cut short by a crash (no newline) seals nothing and harms nothing
    own = next(layout.slot_dir("a", 0).glob("seal-*.jsonl"))
    with own.open("a") as cut:
        cut.write('{"file": "restart.json", "sha2')
    assert rebuild(layout.run_dir)["restarts"] == 2


def test_a_run_written_before_the_seal_loads_as_before(layout):
    """Runs recorded before issue #39 have no `seal` in their manifest and no seal files."""
    manifest = json.loads(layout.run_manifest.read_text())
    del manifest["seal"]
    layout.run_manifest.write_text(json.dumps(manifest))
    for path in layout.run_dir.rglob("seal-*.jsonl"):
        path.unlink()
    assert rebuild(layout.run_dir)["windows"] == 2
