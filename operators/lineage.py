"""OpenLineage for the warehouse tasks: what load, validate, derive and publish read and
write, named by OpenLineage's conventions and carried by each task's COMPLETE event.

These datasets are known only at run time (the data dir and the warehouse come from DAG
params or the environment, see sweep_tasks.run_paths), so a task body reports them
(report_load, ...) and its operator, a @task that also has the OpenLineage provider's
`get_openlineage_facets_on_complete`, hands them to the provider's listener (its
DefaultExtractor). That method, unlike the hook lineage collector, takes OpenLineage
datasets as they are, so the DuckDB tables need no Airflow asset scheme of their own.

Without an OpenLineage transport configured the provider is disabled, and report_* return
at once: no file is listed, no manifest read, nothing of OpenLineage imported.

Naming (https://openlineage.io/docs/spec/naming):

- a file: namespace "file", name its absolute path (openlineage-python's LocalFileSystem).
  It is also what Airflow's own `file://` assets translate to, so a DAG with an
  Asset("file:///...") on an export meets the same dataset.
- a warehouse table: namespace "duckdb://<absolute warehouse path>", name
  "<catalog>.main.<table>", which is what OpenLineage's dbt integration emits for dbt-duckdb:
  a dbt project over the same file names the same tables the same way.
- a view is named by the tables it reads (requests -> request_records, published_entries ->
  entries): recorded table to table, one task's outputs are the next task's inputs.

What counts: the relations whose rows flow into what the task writes. Bookkeeping is left
out: load's look-up of raw_files to skip files it has seen, the runs columns that validate
(data_docs_path) and derive (ended_at) set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk import Context, get_current_context
from airflow.sdk.bases.decorator import TaskDecorator, task_decorator_factory

from benchledger.raw import layout as raw

if TYPE_CHECKING:  # imported where lineage is reported: not at all while it is disabled
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import Dataset

# load_run_dir's tables: the run's manifests, its requests, the observations of its windows
# (server counters, log lines, node clocks) and the catalogue of the files themselves.
LOAD_WRITES = ("runs", "restarts", "windows", "request_records", "server_metrics",
               "server_log_lines", "node_clocks", "raw_files")
# A sequential run's interim looks (its _looks/ files): loaded into this table, and read
# back by validate_run for the blocks the run ran (warehouse/validate.py, restarts_run).
LOOKS = ("interim_looks",)
# validate_run: counters reconciled against the requests, the GX gate over restarts (their
# clocks), windows and measured requests, and the planned cells of the run's sweep.
VALIDATE_READS = ("runs", "restarts", "windows", "request_records", "server_metrics",
                  "node_clocks")
VALIDATE_WRITES = ("reconciliations", "validations")
# derive_entries and derive_comparisons: the validated rows and every observation an entry
# is labelled with; the entry gate's results are validations too.
DERIVE_READS = ("runs", "restarts", "windows", "request_records", "server_metrics",
                "server_log_lines", "node_clocks", "reconciliations", "validations")
DERIVE_WRITES = ("entries", "entry_blocks", "entry_lineage", "entry_restart_means",
                 "validations", "comparisons")
# export_run: published entries, comparisons and blocks, and for the report the requests
# behind each entry and the server's counts beside the client's.
PUBLISH_READS = ("runs", "windows", "request_records", "reconciliations", "entries",
                 "entry_blocks", "entry_lineage", "comparisons")

class LineageTaskOperator(_PythonDecoratedOperator):
    """What @task builds, plus the method the OpenLineage provider calls when the task
    succeeded: it returns the datasets the body reported."""

    reported_inputs: tuple[Dataset, ...] = ()
    reported_outputs: tuple[Dataset, ...] = ()

    def execute(self, context: Context) -> Any:
        # A retry in the same process (dag.test) must not inherit the last try's datasets.
        self.reported_inputs = self.reported_outputs = ()
        return super().execute(context)

    def get_openlineage_facets_on_complete(self, task_instance: object) -> OperatorLineage:
        from airflow.providers.openlineage.extractors import OperatorLineage

        return OperatorLineage(inputs=list(self.reported_inputs),
                               outputs=list(self.reported_outputs))


def lineage_task(python_callable: Callable[..., Any] | None = None,
                 multiple_outputs: bool | None = None, **kwargs: Any) -> TaskDecorator:
    """@task whose body may report the datasets it read and wrote (report_*)."""
    return task_decorator_factory(python_callable=python_callable,
                                  multiple_outputs=multiple_outputs,
                                  decorated_operator_class=LineageTaskOperator, **kwargs)


def openlineage_enabled() -> bool:
    """The provider's own test: installed, not disabled, and a transport configured."""
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:
        return False
    return not is_disabled()


def file_dataset(path: Path) -> Dataset:
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.naming.dataset import LocalFileSystem

    naming = LocalFileSystem(path=str(Path(path).resolve()))
    return Dataset(namespace=naming.get_namespace(), name=naming.get_name())


def duckdb_catalog(warehouse: Path) -> str:
    """The name DuckDB gives the database of a file it opens (`current_database()`): the
    file's name up to its first dot, leading dots aside."""
    return Path(warehouse).name.lstrip(".").split(".")[0]


def table_datasets(warehouse: Path, tables: Iterable[str]) -> list[Dataset]:
    from openlineage.client.event_v2 import Dataset

    namespace = f"duckdb://{Path(warehouse).resolve()}"
    catalog = duckdb_catalog(warehouse)
    return [Dataset(namespace=namespace, name=f"{catalog}.main.{table}") for table in tables]


def published_files(export_dir: Path) -> list[Path]:
    """The files a publication wrote, as its MANIFEST.sha256 lists them, and the manifest
    (the run's GX Data Docs stay with its data: a publication never copies them)."""
    from benchledger.publishing.export import MANIFEST

    manifest = Path(export_dir) / MANIFEST
    names = {line.split("  ", 1)[1] for line in manifest.read_text().splitlines() if line}
    return [Path(export_dir) / name for name in sorted(names | {MANIFEST})]


def _existing(*folders: Path) -> list[Path]:
    return [folder for folder in folders if folder.is_dir()]


def _report(inputs: list[Dataset], outputs: list[Dataset]) -> None:
    task = get_current_context()["task"]
    if not isinstance(task, LineageTaskOperator):
        raise TypeError(f"task {task.task_id} reports lineage but is not a @lineage_task")
    task.reported_inputs, task.reported_outputs = tuple(inputs), tuple(outputs)


def report_load(run_dir: Path, warehouse: Path) -> None:
    if openlineage_enabled():
        _report([file_dataset(p) for p in raw.loaded_files(run_dir)],
                table_datasets(warehouse, LOAD_WRITES + _looks(run_dir)))


def _looks(run_dir: Path) -> tuple[str, ...]:
    return LOOKS if raw.look_files(run_dir) else ()


def report_validate(warehouse: Path, data_docs: Path, run_dir: Path) -> None:
    """data_docs: the folder the gate's results were rendered into as GX Data Docs."""
    if openlineage_enabled():
        _report(table_datasets(warehouse, VALIDATE_READS + _looks(run_dir)),
                table_datasets(warehouse, VALIDATE_WRITES)
                + [file_dataset(d) for d in _existing(data_docs)])


def report_derive(warehouse: Path, data_docs: Path) -> None:
    """data_docs: the run's GX Data Docs, which the entry gate's results join."""
    if openlineage_enabled():
        _report(table_datasets(warehouse, DERIVE_READS),
                table_datasets(warehouse, DERIVE_WRITES)
                + [file_dataset(d) for d in _existing(data_docs)])


def report_publish(warehouse: Path, export_dir: Path) -> None:
    """The publication reads the warehouse only (the run's GX Data Docs are named in its
    report, not copied: a publication opens offline)."""
    if openlineage_enabled():
        _report(table_datasets(warehouse, PUBLISH_READS),
                [file_dataset(p) for p in published_files(export_dir)])
