"""A restart or node manifest is changed through its own keys only (issue #40).

RestartRecord.update and NodeRecord.update take the manifest's TypedDict as keyword
arguments (PEP 692), so a key the manifest does not have, or a value of the wrong type, is a
mypy error where it is written, not a field no reader ever looks at. mypy itself decides
here, on a few lines that use the package as the steps do.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import benchledger

SNIPPET = textwrap.dedent("""\
    from benchledger.restart.deployment import NodeRecord
    from benchledger.restart.manifest import RestartRecord


    def correct(record: RestartRecord, node: NodeRecord) -> None:
        record.update("crashed", error="died", crashed_in_window="w", crashed_node=None)
        record.update(status="ok", stop_status="stopped", interrupted_windows=[])
        node.update(status="stopped", ended_before_stop=False, command=["serve"])


    def wrong(record: RestartRecord, node: NodeRecord) -> None:
        record.update(nonexistent_key=1)  # wrong: key
        record.update(status="crashd")  # wrong: status
        record.update("ok", restart_index="3")  # wrong: value
        node.update(stoped_at="now")  # wrong: node key
    """)


def test_mypy_rejects_a_key_the_manifest_lacks_and_accepts_its_own(tmp_path):
    from mypy import api

    snippet = tmp_path / "uses_manifests.py"
    snippet.write_text(SNIPPET)
    # The package from this checkout, with mypy's defaults rather than the project's config
    # (whose settings are about the package, not a snippet). Only the two records and the
    # manifests' TypedDicts are read: what else they import is Any, which keeps this to
    # seconds (following all of it takes half a minute).
    config = tmp_path / "mypy.ini"
    config.write_text(textwrap.dedent(f"""\
        [mypy]
        mypy_path = {Path(benchledger.__file__).parent.parent}
        python_version = 3.11
        ignore_missing_imports = True
        follow_imports = skip
        [mypy-benchledger.restart.manifest,benchledger.restart.deployment,benchledger.raw.*]
        follow_imports = silent
        """))
    stdout, stderr, status = api.run([str(snippet), "--config-file", str(config),
                                      "--cache-dir", str(tmp_path / "cache")])

    assert status == 1, stdout + stderr
    errors = {int(line): text for line, text in
              re.findall(rf"^{re.escape(str(snippet))}:(\d+): error: (.*)$", stdout, re.M)}
    lines = SNIPPET.splitlines()
    wrong = {number for number, line in enumerate(lines, 1) if "# wrong:" in line}
    assert set(errors) == wrong, stdout
    assert "nonexistent_key" in errors[min(wrong)]
    assert "stoped_at" in errors[max(wrong)]
