"""The house plan: one installed namespace, and layer contracts that catch a wrong import.

The contracts live in .importlinter and run in `make lint`. Here they run on a fresh
non-editable install of the project (import-linter reads the package from the file system,
where only an install puts operators/, warehouse/, ... under benchledger/), once as is and
once with a forbidden import added, which must break them.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_the_distribution_claims_only_the_benchledger_namespace():
    dist = importlib.metadata.distribution("benchledger")
    assert dist.read_text("top_level.txt").split() == ["benchledger"]
    claimed = {name for name, dists in importlib.metadata.packages_distributions().items()
               if "benchledger" in dists}
    assert claimed == {"benchledger"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("layers") / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-compile", "--target", str(target), str(REPO)],
                   check=True, capture_output=True, text=True)
    for generic in ("operators", "warehouse", "expectations", "publishing"):
        assert not (target / generic).exists(), f"{generic} installed at top level"
    return target


def lint(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), str(REPO / ".importlinter")], cwd=site,
                          capture_output=True, text=True)


def test_the_layer_contracts_hold(installed):
    result = lint(installed)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    # The protocol model reaching up to the CLI: a layer violation.
    ("sweep/spec.py", "from benchledger.cli import main", "Layers: each imports only"),
    # The warehouse importing Airflow: the core must stay Airflow-free.
    ("warehouse/db.py", "import airflow", "Only the Airflow tasks"),
    # The client reusing the simulator's SSE code: each side must check the other.
    ("client/request.py", "from benchledger.simulator import protocol", "share no code"),
    # export <-> report_html importing each other: a cycle.
    ("publishing/read.py", "from benchledger.publishing import export", "No import cycles"),
])
def test_a_forbidden_import_breaks_a_contract(installed, tmp_path, module, line, contract):
    site = tmp_path / "site"
    shutil.copytree(installed, site)
    source = site / "benchledger" / module
    source.write_text(source.read_text() + f"\n{line}  # deliberate, for this test\n")
    result = lint(site)
    assert result.returncode != 0
    broken = [text for text in result.stdout.splitlines() if text.endswith("BROKEN")]
    assert any(contract in text for text in broken), result.stdout[-3000:]
