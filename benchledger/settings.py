"""Every BENCHLEDGER_* variable, declared once: its type, its default, how its text is read,
what it accepts and what it is for. The table of docs/settings.md is generated from this
model (`python -m benchledger.settings --write docs/settings.md`; a test holds the two
equal), and the code reads the variables only through settings().

settings() reads the environment at each call, so a task's own environment and a test's
monkeypatch count. Blank values count as unset. A value that is refused fails only the code
that reads it: reading that field raises SettingsError naming the variable, the value and
what it accepts, while the other fields read as usual (a bad display setting never costs a
measurement, and a bad `benchledger sql` bound never fails a load).

Besides benchledger's own variables the model reads the AWS SDK's names for an object
store's endpoint and keys, which benchledger hands to pyarrow's S3 client.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

PREFIX = "BENCHLEDGER_"

DEFAULT_PROGRESS_S = 5.0
PROGRESS_RANGE_S = (0.1, 3600.0)  # shorter floods a task log; longer is no progress report
SQL_TIMEOUT_RANGE_S = (0.1, 86_400.0)
SQL_MAX_ROWS_RANGE = (1, 10**9)
SMALLEST_SQL_MEMORY = 16 * 10**6  # below this DuckDB cannot run the door's own queries
LOCK_WAIT_RANGE_S = (0.0, 86_400.0)
# An imported file is read whole (docs/imports.md): 512 MiB of JSON is about 2.5 GB in memory.
DEFAULT_IMPORT_MAX_BYTES = 512 * 2**20

_DUCKDB_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
                 "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BINARY_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class SettingsError(ValueError):
    """An environment variable whose value a setting refuses."""


def memory_bytes(text: str) -> int:
    """Bytes of a memory size in DuckDB's notation (KB = 1000 bytes, KiB = 1024)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\s*", text, re.I)
    if match is None:
        raise ValueError(f"{text!r}: expected a size such as 1GB, 512MB or 2GiB")
    return int(float(match[1]) * _DUCKDB_UNITS[match[2].lower()])


def parse_size(text: str) -> int:
    """A byte count: 1000, or with a binary suffix 512M, 2G, 2GiB (ValueError otherwise)."""
    number = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = number[-1:] if number[-1:] in _BINARY_UNITS else ""
    try:
        value = int(number[: len(number) - len(unit)]) * _BINARY_UNITS[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not a size in bytes (e.g. 1000, 512M, 2G)") from None
    if value <= 0:
        raise ValueError(f"{text!r} is not a size in bytes above 0")
    return value


def _setting(default: Any = None, *, accepts: str, about: str, shown: str | None = None,
             factory: Callable[[], Any] | None = None, **field: Any) -> Any:
    """A field of Settings: what it accepts (said when a value is refused, and in the
    docs' table), what it is for, and its default as the table shows it where the value
    itself would not say it (a default that depends on another setting)."""
    extra: JsonDict = {"accepts": accepts}
    if shown is not None:
        extra["shown_default"] = shown
    if factory is not None:
        return Field(default_factory=factory, description=about, json_schema_extra=extra,
                     **field)
    return Field(default, description=about, json_schema_extra=extra, **field)


def _default_home() -> Path:
    return Path.home() / ".benchledger"


class Settings(BaseSettings):
    """benchledger's settings from the environment (docs/settings.md)."""

    # Not case-sensitive: pydantic-settings then matches BENCHLEDGER_PROGRESS_S to the
    # field progress_s. Empty variables are unset (an AWS alias then falls to the next).
    model_config = SettingsConfigDict(env_prefix=PREFIX, env_ignore_empty=True, frozen=True,
                                      validate_by_name=True, extra="forbid")

    # Where things are.
    home: Path = _setting(
        factory=_default_home, shown="`~/.benchledger`", accepts="a folder",
        about="benchledger's own folder: the data dir of a DAG run that names none, and "
              "`object-store/`, this node's copy of raw files kept in an object store")
    data_dir: str | None = _setting(
        shown="`$BENCHLEDGER_HOME`",
        accepts="a path, a `file://` URL, or `s3://bucket/prefix`",
        about="where a DAG run writes its raw files when its params (or run conf) name no "
              "`data_dir`; `benchledger run` passes its own as a param")
    warehouse: str | None = _setting(
        shown="`warehouse.duckdb` in the data dir", accepts="a path or a `file://` URL",
        about="the DuckDB warehouse a DAG run loads into when its params name none")
    local_raw_dir: Path | None = _setting(
        shown="`$BENCHLEDGER_HOME/object-store`", accepts="a folder",
        about="this node's copy of raw files kept in an object store, as "
              "`<folder>/<bucket>/<prefix>`; a deployment sets it for its processes")
    s3_conn_id: str | None = _setting(
        accepts="an Airflow connection id",
        about="an Airflow connection of type `aws` (login, password, extra `endpoint_url` "
              "and `region_name`) that holds the object store's endpoint and keys; the "
              "AWS_* variables fill what it leaves out, and are used alone without it")

    # The object store's endpoint and keys, by the AWS SDK's own names (the prefix does not
    # apply); unset, each is left to the SDK's chain (profile, instance role).
    aws_endpoint_url: str | None = _setting(
        validation_alias=AliasChoices("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
        accepts="a URL", about="the object store's endpoint (the S3-specific name wins)")
    aws_access_key_id: str | None = _setting(
        validation_alias="AWS_ACCESS_KEY_ID", accepts="an access key id",
        about="the object store's access key id")
    aws_secret_access_key: SecretStr | None = _setting(
        validation_alias="AWS_SECRET_ACCESS_KEY", accepts="a secret key",
        about="the object store's secret key; never logged or recorded")
    aws_session_token: SecretStr | None = _setting(
        validation_alias="AWS_SESSION_TOKEN", accepts="a session token",
        about="the object store's session token; never logged or recorded")
    aws_region: str | None = _setting(
        validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"),
        accepts="a region name", about="the object store's region (the first name wins)")

    # What people see while things run, and how long they wait.
    progress_s: float | None = _setting(
        DEFAULT_PROGRESS_S,
        accepts=f"seconds between progress reports, 0 (off) or {PROGRESS_RANGE_S[0]:g} to "
                f"{PROGRESS_RANGE_S[1]:g}",
        about="how often a running window and a readiness wait report progress (the task "
              "log, the `.progress` file, `benchledger run`'s display); a task that finds a "
              "bad value says so and reports every 5 s")
    lock_timeout_s: float = _setting(
        300.0, ge=LOCK_WAIT_RANGE_S[0], le=LOCK_WAIT_RANGE_S[1],
        accepts="a number of seconds from 0 to 86400",
        about="how long a writer of the warehouse (load, validate, derive) waits for "
              "another process's lock")
    read_lock_timeout_s: float = _setting(
        30.0, ge=LOCK_WAIT_RANGE_S[0], le=LOCK_WAIT_RANGE_S[1],
        shown="`30`; a run's own reads: its writers' wait",
        accepts="a number of seconds from 0 to 86400",
        about="how long a reader (`sql`, `publish`, `explain`) waits for another process's "
              "lock; unset, `benchledger run`'s own reads wait as long as its writers")

    # How an embedded run's runner starts (benchledger/local/warm.py).
    runner_start: Literal["auto", "warm", "fresh"] = _setting(
        "auto", accepts="`auto`, `warm` or `fresh`",
        about="`warm`: each embedded run's runner is forked from a server process that "
              "imported the heavy libraries once (a process running many sweeps pays their "
              "imports once); `fresh`: a new interpreter per run (`python -m "
              "benchledger.local.runner`); `auto`: fresh for a process's first run "
              "(`benchledger run` has one: a fork server would cost it about 2.5 s of "
              "CPU), warm from its second on")

    # The auditor's door, `benchledger sql` (its flags win).
    sql_timeout_s: float = _setting(
        30.0, ge=SQL_TIMEOUT_RANGE_S[0], le=SQL_TIMEOUT_RANGE_S[1],
        accepts="seconds from 0.1 to 86400 (like --timeout-s)",
        about="when a `benchledger sql` query is stopped")
    sql_memory_limit: str = _setting(
        "1GB", accepts="a size such as 1GB, 512MB or 2GiB, at least 16MB (like --memory-limit)",
        about="the memory a `benchledger sql` query may take (DuckDB's `memory_limit`)")
    sql_max_rows: int = _setting(
        10_000, ge=SQL_MAX_ROWS_RANGE[0], le=SQL_MAX_ROWS_RANGE[1],
        accepts="a whole number from 1 to 10^9 (like --max-rows)",
        about="the most rows `benchledger sql` fetches and shows")

    # `benchledger import` (its flag wins).
    import_max_bytes: int = _setting(
        DEFAULT_IMPORT_MAX_BYTES, shown="`512M` (512 MiB)",
        accepts="a size in bytes above 0: 1000, or with a binary suffix 512M, 2G, 2GiB "
                "(like --max-bytes)",
        about="the largest file `benchledger import` reads (it reads a file whole, about "
              "five times its size in memory); checked before a byte is read")

    # A deployment (`benchledger cluster`).
    airflow_user: str | None = _setting(
        accepts="a user name",
        about="the REST API's user for `run --cluster` on a production deployment (with "
              "`BENCHLEDGER_AIRFLOW_PASSWORD`); unset, the local cluster's password file")
    airflow_password: SecretStr | None = _setting(
        accepts="a password",
        about="that user's password; never logged or recorded")
    node_address: str | None = _setting(
        accepts="a host name or IP address",
        about="set by `benchledger cluster join --address` for its worker: the address the "
              "servers it starts listen on, so the head's node can reach them")
    cluster_home: Path | None = _setting(
        accepts="a folder",
        about="set by `benchledger cluster up` in the environment of every process of a "
              "deployment (and so of what they start): `down` finds them by it")

    # Set by benchledger for processes it starts, never by hand.
    server_mark: str | None = _setting(
        accepts="a uuid",
        about="set in each server under test's environment (a fresh uuid, recorded in "
              "`restart.json`): its teardown finds every process the server started by it")
    failures_file: Path | None = _setting(
        accepts="a file",
        about="set by `benchledger run` for the Airflow it starts: each failed task appends "
              "one JSON line to it, and `run` prints the first cause")

    # Fields whose value was refused (settings()): reading one raises its SettingsError.
    _refused: dict[str, str] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # settings()'s given values, then the environment: no .env file, no secrets folder
        # (and half the cost of a read).
        return init_settings, env_settings

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        # A variable set to spaces is as unset as an empty one; values are read stripped.
        if not isinstance(data, dict):
            return data
        return {key: value.strip() if isinstance(value, str) else value
                for key, value in data.items()
                if not (isinstance(value, str) and not value.strip())}

    @field_validator("progress_s")
    @classmethod
    def _progress(cls, value: float | None) -> float | None:
        if value == 0:
            return None  # progress off
        if value is not None and not PROGRESS_RANGE_S[0] <= value <= PROGRESS_RANGE_S[1]:
            raise ValueError("out of range")  # also for nan
        return value

    @field_validator("sql_memory_limit")
    @classmethod
    def _memory(cls, value: str) -> str:
        if memory_bytes(value) < SMALLEST_SQL_MEMORY:
            raise ValueError("below 16MB")
        return value

    @field_validator("import_max_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return parse_size(value) if isinstance(value, str) else value

    if not TYPE_CHECKING:  # mypy still flags a misspelt field
        def __getattr__(self, name: str) -> Any:
            # Only a refused field is missing from an instance (settings() removed it).
            if name in type(self).model_fields:
                raise SettingsError(self._refused.get(name, f"{name} was not read"))
            return super().__getattr__(name)


def variables(name: str) -> tuple[str, ...]:
    """The environment variables field `name` is read from, the first present winning."""
    alias = Settings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(str(choice) for choice in alias.choices)
    return (alias,) if isinstance(alias, str) else (PREFIX + name.upper(),)


def variable(name: str) -> str:
    """The environment variable of field `name` (its first, for an AWS alias)."""
    return variables(name)[0]


def _extra(name: str, key: str) -> str | None:
    extra = Settings.model_fields[name].json_schema_extra
    value = extra.get(key) if isinstance(extra, dict) else None
    return value if isinstance(value, str) else None


def _default(name: str) -> Any:
    return Settings.model_fields[name].get_default(call_default_factory=True)


def settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from this process's environment now, or from `environ` (then only
    from it). A field whose value is refused raises SettingsError when it is read."""
    given: dict[str, Any] = {}
    if environ is not None:
        # Every field given, so that nothing comes from this process's own environment.
        upper = {key.upper(): value for key, value in environ.items() if value.strip()}
        for name in Settings.model_fields:
            found = [upper[v] for v in variables(name) if v in upper]
            given[name] = found[0] if found else _default(name)
    try:
        return Settings(**given)
    except ValidationError as exc:
        refused = _refusals(exc)
    # Once more with the refused fields at their defaults (given values outrank the
    # environment), then without them: reading one raises (Settings.__getattr__).
    kept = Settings(**{**given, **{name: _default(name) for name in refused}})
    for name in refused:
        del kept.__dict__[name]
    kept._refused.update(refused)
    return kept


def _refusals(exc: ValidationError) -> dict[str, str]:
    """{field: what to say} for each refused value: the variable, the value, what it takes."""
    by_variable = {v: name for name in Settings.model_fields for v in variables(name)}
    refused = {}
    for error in exc.errors():
        key = str(error["loc"][0])  # a field's name, or the AWS name it was read from
        name = key if key in Settings.model_fields else by_variable[key]
        refused[name] = (f"environment variable {variables(name)[0]}={error['input']!r}: "
                         f"expected {_extra(name, 'accepts')}")
    return refused


# --- the docs' table --------------------------------------------------------------------

TABLE_BEGIN = ("<!-- settings table: generated from benchledger/settings.py by "
               "`python -m benchledger.settings --write docs/settings.md`; do not edit -->")
TABLE_END = "<!-- end of the settings table -->"


def _shown_default(name: str) -> str:
    shown = _extra(name, "shown_default")
    if shown is not None:
        return shown
    default = _default(name)
    if default is None:
        return "unset"
    return f"`{default:g}`" if isinstance(default, float) else f"`{default}`"


def settings_table_markdown() -> str:
    """The Markdown table of every variable Settings reads: name, default, what it
    accepts, what it is for."""
    rows = ["| Variable | Default | Accepts | What it is for |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        names = ", ".join(f"`{v}`" for v in variables(name))
        cells = [names, _shown_default(name), _extra(name, "accepts") or "",
                 field.description or ""]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def with_table(doc: str) -> str:
    """`doc` with the text between its table markers replaced by the generated table."""
    begin, end = doc.index(TABLE_BEGIN) + len(TABLE_BEGIN), doc.index(TABLE_END)
    return doc[:begin] + "\n" + settings_table_markdown() + doc[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchledger.settings",
                                     description="The table of benchledger's variables.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--markdown", action="store_true", help="print the table")
    group.add_argument("--write", type=Path, metavar="DOC",
                       help="replace the table between DOC's markers")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(settings_table_markdown())
    else:
        args.write.write_text(with_table(args.write.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
