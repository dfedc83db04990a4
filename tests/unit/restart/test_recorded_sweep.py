"""A run measures the sweep it recorded (issue #20): every step parses the text plan kept in
the run manifest, checked against its sha256, and the load refuses files measured under
another sweep."""

from __future__ import annotations

import hashlib
import logging
import re

import pytest

from benchledger.raw import layout as raw
from benchledger.raw.layout import RunLayout
from benchledger.restart import steps as restart
from benchledger.warehouse.db import WarehouseError, connect
from benchledger.warehouse.load import load_run_dir
from tests.sweeps import simulator_arm, sweep, toml, variant
from tests.synthetic import RUN_ID, request_row, write_as_a_step, write_synthetic_run

SWEEP_DOC = sweep("recorded", [simulator_arm("sim", model="m")],
                  defaults={"requests": 5, "restarts": 1})
SWEEP = toml(SWEEP_DOC)  # the text is what a run records; the tests below are about it


def planned(tmp_path, text: str = SWEEP) -> tuple[RunLayout, object]:
    path = tmp_path / "sweep.toml"
    path.write_bytes(text.encode())
    layout = RunLayout(tmp_path / "data", RUN_ID)
    restart.write_run_manifest(layout, path)
    return layout, path


def test_the_run_manifest_keeps_the_files_text_and_its_sha256(tmp_path):
    text = SWEEP.replace("\n", "\r\n")  # kept as it is: its sha256 is the file's
    layout, path = planned(tmp_path, text)
    manifest = raw.read_json(layout.run_manifest)
    assert manifest["sweep_toml"] == text
    assert manifest["sweep_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    sweep, sha256 = restart.recorded_sweep(layout, path)
    assert sweep.sweep.name == "recorded" and sha256 == manifest["sweep_sha256"]


def test_a_step_measures_the_recorded_sweep_even_when_the_file_changed(tmp_path, caplog):
    layout, path = planned(tmp_path)
    path.write_text(toml(variant(SWEEP_DOC, {"defaults": {"requests": 50}})))
    with caplog.at_level(logging.WARNING, logger="benchledger.restart.steps"):
        sweep, _ = restart.recorded_sweep(layout, path)
    assert sweep.arm("sim").requests == 5
    assert "changed since run" in caplog.text and "measures the planned text" in caplog.text


def test_a_recorded_text_that_does_not_match_its_sha256_is_refused(tmp_path):
    layout, _ = planned(tmp_path)
    manifest = raw.read_json(layout.run_manifest)
    write_as_a_step(layout.run_manifest,
                   {**manifest, "sweep_toml": manifest["sweep_toml"] + "# edited\n"})
    with pytest.raises(restart.RecordMismatch, match="refusing to measure a sweep other"):
        restart.recorded_sweep(layout)
    layout.run_manifest.unlink()
    with pytest.raises(restart.RecordMismatch, match="plan did not run"):
        restart.recorded_sweep(layout)


def _one_window_run(tmp_path):
    rows = [request_row(f"{RUN_ID}/sim/r0/code-c1", i) for i in range(5)]
    return write_synthetic_run(tmp_path, SWEEP, {("sim", 0, "code"): (rows, {})})


def test_the_load_refuses_a_window_measured_under_another_sweep(tmp_path):
    layout = _one_window_run(tmp_path)
    files = layout.window_files("sim", 0, "code", 1)
    write_as_a_step(files.manifest, {**raw.read_json(files.manifest), "sweep_sha256": "f" * 64})
    with connect(tmp_path / "wh.duckdb") as con, \
            pytest.raises(WarehouseError, match="measured under the sweep with sha256 f+"):
        load_run_dir(con, layout.run_dir)
    with connect(tmp_path / "wh.duckdb", read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)  # nothing loaded


def test_the_load_refuses_a_run_whose_recorded_sweep_is_not_the_one_loaded(tmp_path):
    layout = _one_window_run(tmp_path)
    with connect(tmp_path / "wh.duckdb") as con:
        load_run_dir(con, layout.run_dir)
        manifest = raw.read_json(layout.run_manifest)
        write_as_a_step(layout.run_manifest, {**manifest, "sweep_sha256": "e" * 64})
        with pytest.raises(WarehouseError, match=re.escape(f"run {RUN_ID} is in the warehouse")):
            load_run_dir(con, layout.run_dir)


def test_validation_and_derivation_refuse_a_run_whose_recorded_text_was_altered(tmp_path):
    from benchledger.warehouse.db import recorded_sweep
    from benchledger.warehouse.validate import validate_run

    layout = _one_window_run(tmp_path)
    with connect(tmp_path / "wh.duckdb") as con:
        load_run_dir(con, layout.run_dir)
        assert recorded_sweep(con, RUN_ID).sweep.name == "recorded"
        altered = toml(variant(SWEEP_DOC, {"defaults": {"requests": 50}}))
        con.execute("UPDATE runs SET sweep_toml = ? WHERE run_id = ?", [altered, RUN_ID])
        with pytest.raises(WarehouseError, match="does not have the sha256 recorded with it"):
            validate_run(con, RUN_ID)
        # a run recorded before the text was read as bytes (universal newlines) still reads
        crlf = SWEEP.replace("\n", "\r\n")
        con.execute("UPDATE runs SET sweep_toml = ?, sweep_sha256 = ? WHERE run_id = ?",
                    [SWEEP, hashlib.sha256(crlf.encode()).hexdigest(), RUN_ID])
        assert recorded_sweep(con, RUN_ID).arm("sim").requests == 5
