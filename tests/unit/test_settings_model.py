"""The one settings model (benchledger/settings.py): every BENCHLEDGER_* variable read
through it, refused in one line naming the variable, the value and what it accepts, and
only where it is read; docs/settings.md's table generated from it.

(tests/unit/simulator/test_settings.py is about the simulator's options, declared once.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchledger import settings as model
from benchledger.settings import Settings, SettingsError, settings

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "settings.md"
CODE = ("benchledger", "operators", "publishing", "warehouse", "expectations", "dags")
_NAME = re.compile(r"\bBENCHLEDGER_[A-Z0-9_]+")
# os.environ outside settings.py: only an environment handed to (or prepared for) another
# process or the Airflow this one imports, the server environment recorded beside its
# command, and the API key an arm names by a variable of the sweep's choosing.
_ENVIRON_USE = re.compile(r"\{\*\*os\.environ\b|os\.environ\.(items|copy)\(\)|"
                          r"os\.environ\.(update\(|clear\(\))|dict\(os\.environ\)|"
                          r"os\.environ\.get\(((arm\.)?api_key_env|\"AIRFLOW_HOME\")")
_ENVIRON = re.compile(r"\bos\.environ\b|\bgetenv\(")


def variable_names(text: str) -> set[str]:
    """The BENCHLEDGER_* names a text mentions (a prefix such as BENCHLEDGER_SIM_ is none)."""
    return {name for name in _NAME.findall(text) if not name.endswith("_")}


def unknown_names(texts: dict[str, str]) -> dict[str, set[str]]:
    """{where: names} of BENCHLEDGER_* names that are no variable of the model."""
    known = {v for name in Settings.model_fields for v in model.variables(name)}
    found = {where: variable_names(text) - known for where, text in texts.items()}
    return {where: names for where, names in found.items() if names}


def environ_reads(texts: dict[str, str]) -> list[str]:
    """'where: line' of each os.environ use that reads a setting by hand."""
    return [f"{where}: {line.strip()}" for where, text in texts.items()
            for line in text.splitlines() if _ENVIRON.search(_ENVIRON_USE.sub("", line))]


def code_texts() -> dict[str, str]:
    files = [p for folder in CODE for p in (REPO / folder).rglob("*")
             if p.suffix in {".py", ".sql", ".html", ".toml"} and p.is_file()]
    return {str(p.relative_to(REPO)): p.read_text() for p in files}


def doc_texts() -> dict[str, str]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return {str(p.relative_to(REPO)): p.read_text() for p in docs}


# --- the docs and the code against the model --------------------------------------------


def test_the_docs_table_is_the_one_the_model_generates():
    text = DOC.read_text()
    assert model.with_table(text) == text, (
        "docs/settings.md's table is not the model's: run "
        "`.venv/bin/python -m benchledger.settings --write docs/settings.md`")
    for name in Settings.model_fields:
        assert f"| `{model.variable(name)}`" in text


def test_every_benchledger_name_in_the_code_and_the_docs_is_a_setting():
    assert unknown_names({**code_texts(), **doc_texts()}) == {}


def test_the_code_reads_no_setting_from_the_environment_by_hand():
    texts = {where: text for where, text in code_texts().items()
             if where != "benchledger/settings.py"}
    assert environ_reads(texts) == []


def test_the_checks_find_what_they_look_for():
    assert unknown_names({"a.md": "set `BENCHLEDGER_NOPE=1`, not BENCHLEDGER_SIM_* or "
                                  "BENCHLEDGER_PROGRESS_S"}) == {"a.md": {"BENCHLEDGER_NOPE"}}
    assert environ_reads({"a.py": 'x = os.environ.get("BENCHLEDGER_HOME")\n'
                                  "env = {**os.environ, MARK: mark}\n"
                                  "key = os.environ.get(arm.api_key_env)\n"
                                  'y = os.environ["BENCHLEDGER_WAREHOUSE"]\n'
                                  "env = os.environ if env is None else env\n"}) == [
        'a.py: x = os.environ.get("BENCHLEDGER_HOME")',
        'a.py: y = os.environ["BENCHLEDGER_WAREHOUSE"]',
        "a.py: env = os.environ if env is None else env"]
    broken = DOC.read_text().replace("| `BENCHLEDGER_HOME` |", "| `BENCHLEDGER_HOMES` |")
    assert model.with_table(broken) != broken


def test_the_command_prints_the_table(capsys):
    assert model.main(["--markdown"]) == 0
    assert capsys.readouterr().out == model.settings_table_markdown()


# --- reading ------------------------------------------------------------------------------


def test_defaults_blanks_and_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("BENCHLEDGER_HOME", "BENCHLEDGER_SQL_TIMEOUT_S",
                 "BENCHLEDGER_READ_LOCK_TIMEOUT_S", "BENCHLEDGER_IMPORT_MAX_BYTES"):
        monkeypatch.delenv(name, raising=False)
    current = settings()
    assert current.home == tmp_path / ".benchledger"
    assert (current.sql_timeout_s, current.sql_memory_limit, current.sql_max_rows) == (
        30.0, "1GB", 10_000)
    assert current.import_max_bytes == 512 * 2**20
    monkeypatch.setenv("BENCHLEDGER_SQL_TIMEOUT_S", " 600 ")
    monkeypatch.setenv("BENCHLEDGER_READ_LOCK_TIMEOUT_S", "   ")  # blank: unset
    monkeypatch.setenv("BENCHLEDGER_IMPORT_MAX_BYTES", "2G")
    current = settings()  # read again at each call
    assert current.sql_timeout_s == 600.0 and current.import_max_bytes == 2 * 2**30
    assert current.read_lock_timeout_s == 30.0
    assert "read_lock_timeout_s" not in current.model_fields_set
    assert "sql_timeout_s" in current.model_fields_set


def test_a_given_environment_is_read_alone(monkeypatch):
    monkeypatch.setenv("BENCHLEDGER_PROGRESS_S", "2")
    assert settings().progress_s == 2.0
    assert settings({}).progress_s == model.DEFAULT_PROGRESS_S
    assert settings({"BENCHLEDGER_PROGRESS_S": "0"}).progress_s is None  # off


def test_the_aws_names_are_read_as_the_sdk_reads_them():
    current = settings({"AWS_ENDPOINT_URL": "http://any:9000", "AWS_REGION": "",
                        "AWS_ENDPOINT_URL_S3": "http://s3:9000", "AWS_DEFAULT_REGION": "eu",
                        "AWS_SECRET_ACCESS_KEY": "SK"})
    assert current.aws_endpoint_url == "http://s3:9000" and current.aws_region == "eu"
    assert current.aws_secret_access_key is not None
    assert current.aws_secret_access_key.get_secret_value() == "SK"
    assert "SK" not in repr(current)


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("BENCHLEDGER_PROGRESS_S", "often", "seconds between progress reports"),
    ("BENCHLEDGER_LOCK_TIMEOUT_S", "nan", "a number of seconds from 0 to 86400"),
    ("BENCHLEDGER_SQL_TIMEOUT_S", "0", "seconds from 0.1 to 86400 (like --timeout-s)"),
    ("BENCHLEDGER_SQL_MEMORY_LIMIT", "8MB", "at least 16MB"),
    ("BENCHLEDGER_SQL_MAX_ROWS", "1e3", "a whole number from 1 to 10^9"),
    ("BENCHLEDGER_IMPORT_MAX_BYTES", "-5", "a size in bytes above 0"),
])
def test_a_refused_value_is_said_where_it_is_read_and_only_there(variable, value, expected):
    current = settings({variable: value, "BENCHLEDGER_WAREHOUSE": "/data/wh.duckdb"})
    field = variable.removeprefix(model.PREFIX).lower()
    with pytest.raises(SettingsError) as refused:
        getattr(current, field)
    assert str(refused.value) == (f"environment variable {variable}={value!r}: expected "
                                  f"{model._extra(field, 'accepts')}")
    assert expected in str(refused.value)
    assert isinstance(refused.value, ValueError)  # callers that caught ValueError still do
    assert current.warehouse == "/data/wh.duckdb"  # the other settings read as usual
    with pytest.raises(AttributeError):
        current.no_such_setting  # noqa: B018 (only a refused field raises SettingsError)
