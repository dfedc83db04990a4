"""The warehouse at the scale of real sweeps: time and peak memory of every pipeline stage.

    .venv/bin/python benchmarks/warehouse_scale.py --requests 1000000
    .venv/bin/python benchmarks/warehouse_scale.py --requests 100000 --runs 100 --dir /tmp/w

Writes K synthetic runs of about N measured requests each with the project's own writers
(benchmarks/synthetic_run.py: restart.write_window, so Parquet + manifests exactly as a
measure task writes them; one seed per run, no id rewriting: a 10^5-request run is written
in a few seconds), then runs the stages the Airflow tasks run (operators/sweep_tasks.py),
each in a fresh child process so that the peak RSS of a stage is that stage's alone:

    load      connect(W); load_run_dir(con, run_dir)
    validate  connect(W); validate_run(con, run_id, docs_dir=<the run's Data Docs>)
    derive    connect(W); derive_entries(con, run_id, docs_dir=<the run's Data Docs>)
    compare   connect(W); derive_comparisons(con, run_id); derive_frontier(con, run_id);
              mark_run_ended(con, run_id)
    export    connect(W, read_only=True); export_run(con, run_id, <the run's export dir>)

(The derive task runs derive and compare in one process; here they are two, so each has
its own peak RSS.) With --runs K the K - 1 earlier runs go through load, validate, derive
and compare first, in one child process (their per-run seconds are reported too), and only
the last run's stages are timed one process each: deriving a new run must not slow with
the runs already stored. Then every query of README.md's "Auditing with SQL" section runs
on a read-only connection (the placeholder entry id '...' bound to a real entry).

Next to load, a plain `CREATE TABLE t AS SELECT * FROM read_parquet([...])` of the same
Parquet files into a fresh DuckDB file (with --telemetry, a second one of the telemetry
files), timed the same way (connect to close), is the
yardstick: load_vs_plain = load seconds / plain seconds.

Prints one JSON line (see benchmarks/README.md for what each field is).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchledger.raw import layout as raw

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `benchmarks.` importable
    sys.path.insert(0, str(REPO))

README = REPO / "README.md"
AUDIT_SECTION = "## Auditing with SQL"
STAGES = ("load", "validate", "derive", "compare", "export")
TABLES = ("runs", "restarts", "windows", "request_records", "gpu_telemetry", "validations",
          "entries", "entry_lineage", "entry_blocks", "comparisons", "raw_files")
PLACEHOLDER = "'...'"  # the entry id the README leaves for the reader to fill in
FIRST_DAY = datetime(2026, 1, 1, tzinfo=UTC)
MIB = 1024 * 1024


def run_id_of(index: int) -> str:
    """Daily scheduled runs of one sweep, as Airflow names them."""
    return f"scheduled__{(FIRST_DAY + timedelta(days=index)).isoformat()}"


# --- the auditor queries -------------------------------------------------------------------


def audit_queries(readme: Path = README) -> list[tuple[str, str]]:
    """(label, statement) of every query in the README's "Auditing with SQL" section: the
    label is the comment line(s) above the statement."""
    text = readme.read_text()
    start = text.index(AUDIT_SECTION)
    end = text.find("\n## ", start + len(AUDIT_SECTION))
    section = text[start:end if end > 0 else None]
    queries: list[tuple[str, str]] = []
    for block in re.findall(r"```sql\n(.*?)```", section, re.S):
        comment: list[str] = []
        sql: list[str] = []
        for line in block.splitlines():
            stripped = line.strip()
            if not sql and stripped.startswith("--"):
                comment.append(stripped.removeprefix("--").strip())
            elif stripped or sql:
                sql.append(line)
            if sql and stripped.endswith(";"):
                queries.append((" ".join(comment), "\n".join(sql).strip()))
                comment, sql = [], []
        if sql:
            queries.append((" ".join(comment), "\n".join(sql).strip()))
    return queries


# --- the child processes (one per stage) ---------------------------------------------------


def _vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _vm_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _stage_load(spec: dict) -> dict:
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.load import load_run_dir

    with connect(spec["warehouse"]) as con:
        return load_run_dir(con, Path(spec["run_dir"]))


def _stage_validate(spec: dict) -> dict:
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.validate import validate_run

    with connect(spec["warehouse"]) as con:
        result = validate_run(con, spec["run_id"], docs_dir=Path(spec["docs_dir"]))
    return {k: result[k] for k in ("results", "failed")}


def _stage_derive(spec: dict) -> dict:
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.derive import derive_entries

    with connect(spec["warehouse"]) as con:
        return {"entries": derive_entries(con, spec["run_id"], docs_dir=Path(spec["docs_dir"]))}


def _stage_compare(spec: dict) -> dict:
    from benchledger.warehouse.compare import derive_comparisons
    from benchledger.warehouse.db import connect, mark_run_ended
    from benchledger.warehouse.frontier import derive_frontier

    with connect(spec["warehouse"]) as con:
        comparisons = derive_comparisons(con, spec["run_id"])
        frontier = derive_frontier(con, spec["run_id"])
        mark_run_ended(con, spec["run_id"])
    return {"comparisons": comparisons, "frontier_points": frontier}


def _stage_export(spec: dict) -> dict:
    from benchledger.publishing.export import export_run
    from benchledger.warehouse.db import connect

    with connect(spec["warehouse"], read_only=True) as con:
        out = export_run(con, spec["run_id"], Path(spec["export_dir"]))
    return {"files": sum(1 for p in out.rglob("*") if p.is_file())}


def _stage_plain(spec: dict) -> dict:
    """The yardstick: DuckDB reading the same Parquet files into a fresh file.

    The requests' files go into one table and, where the run has GPU telemetry, its files
    into a second: the load inserts both, so the yardstick does too (issue #24).
    """
    import duckdb

    path = Path(spec["plain_warehouse"])
    path.unlink(missing_ok=True)
    rows = 0
    with duckdb.connect(str(path)) as con:
        for table, files in (("t", spec["files"]), ("telemetry", spec["telemetry_files"])):
            if files:
                con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet(?)", [files])
                rows += con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    return {"rows": rows}


def _stage_prior(spec: dict) -> dict:
    """load, validate, derive and compare of every earlier run, in this one process."""
    seconds: dict[str, list[float]] = {s: [] for s in STAGES if s != "export"}
    for run in spec["runs"]:
        for stage in seconds:
            start = time.perf_counter()
            CHILD_STAGES[stage]({**spec, **run})
            seconds[stage].append(round(time.perf_counter() - start, 3))
    return {"seconds": seconds}


def _stage_audit(spec: dict) -> dict:
    from benchledger.warehouse.db import connect

    timings = []
    with connect(spec["warehouse"], read_only=True) as con:
        entry = con.execute("SELECT entry_id FROM entries ORDER BY n_requests DESC NULLS LAST, "
                            "entry_id LIMIT 1").fetchall()
        entry_id = entry[0][0] if entry else "no entry"
        for label, sql in spec["queries"]:
            params = [entry_id] * sql.count(PLACEHOLDER)
            start = time.perf_counter()
            rows = len(con.execute(sql.replace(PLACEHOLDER, "?"), params).fetchall())
            timings.append({"query": label, "seconds": round(time.perf_counter() - start, 4),
                            "rows": rows})
    return {"queries": timings, "entry_id": entry_id}


def _stage_counts(spec: dict) -> dict:
    from benchledger.warehouse.db import connect

    with connect(spec["warehouse"], read_only=True) as con:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}


# What each stage imports before its clock starts (import time is reported on its own).
STAGE_IMPORTS = {
    "load": ("benchledger.warehouse.load",),
    "validate": ("benchledger.warehouse.validate",),
    "derive": ("benchledger.warehouse.derive",),
    "compare": ("benchledger.warehouse.compare",),
    "export": ("benchledger.publishing.export",),
    "plain": ("duckdb",),
    "prior": ("benchledger.warehouse.load", "benchledger.warehouse.validate",
              "benchledger.warehouse.derive",
              "benchledger.warehouse.compare"),
    "audit": ("benchledger.warehouse.db",),
    "counts": ("benchledger.warehouse.db",),
}
CHILD_STAGES = {"load": _stage_load, "validate": _stage_validate, "derive": _stage_derive,
                "compare": _stage_compare, "export": _stage_export, "plain": _stage_plain,
                "prior": _stage_prior, "audit": _stage_audit, "counts": _stage_counts}


def child_main(spec: dict) -> int:
    """Run one stage and print what it did, how long and how much memory it took."""
    start = time.perf_counter()
    for module in STAGE_IMPORTS[spec["stage"]]:
        importlib.import_module(module)
    imports = time.perf_counter() - start
    rss_start = _vm_rss_mib()
    start = time.perf_counter()
    result = CHILD_STAGES[spec["stage"]](spec)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "import_seconds": imports, "rss_start_mib": rss_start,
                      "vm_hwm_mib": _vm_hwm_mib(), "result": result}, default=str))
    return 0


def run_child(spec: dict, log_dir: Path) -> dict:
    """One stage in a fresh interpreter; its own peak RSS and CPU (wait4's rusage)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{spec['stage']}.log"
    with log.open("ab") as err:
        wall = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                cwd=REPO)
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - wall
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"stage {spec['stage']} failed ({proc.returncode}); "
                           f"{log}:\n{tail}")
    report = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "seconds": round(report["seconds"], 3),
        "import_seconds": round(report["import_seconds"], 3),
        "process_seconds": round(wall, 3),  # interpreter start and imports included
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
        # The child's own high-water mark (VmHWM: its address space since exec). wait4's
        # ru_maxrss is no good here: Linux counts the forked copy of this parent in it.
        "peak_rss_mib": round(report["vm_hwm_mib"], 1),
        "rss_after_imports_mib": round(report["rss_start_mib"], 1),
        "result": report["result"],
    }


# --- the machine and the code measured -----------------------------------------------------


def machine() -> dict:
    from importlib.metadata import version

    import duckdb
    import pandas
    import pyarrow

    meminfo = Path("/proc/meminfo").read_text()
    mem_kib = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1))
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", cpuinfo)
    return {
        "nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
        "mem_total_gib": round(mem_kib / MIB, 1),
        "cpu": model.group(1).strip() if model else platform.processor(),
        "python": platform.python_version(), "duckdb": duckdb.__version__,
        "pandas": pandas.__version__, "pyarrow": pyarrow.__version__,
        "great_expectations": version("great_expectations"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def code_version() -> dict:
    """The commit measured, and which tracked files of the code differed from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  check=True).stdout.rstrip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    dirty = [line[3:] for line in git("status", "--porcelain", "--untracked-files=all",
                                      "--", "benchledger", "warehouse", "expectations",
                                      "publishing", "operators").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "subject": git("log", "-1", "--format=%s")[:120], "uncommitted": dirty}


# --- the parent ----------------------------------------------------------------------------


def written_counts(run_dirs: list[Path]) -> dict:
    """What the writers put on disk, counted from the files (not from the warehouse)."""
    import pyarrow.parquet as pq

    counts = {"runs": 0, "restarts": 0, "windows": 0, "request_records": 0,
              "gpu_telemetry": 0, "raw_files": 0}
    for run_dir in run_dirs:
        restarts = raw.restart_manifests(run_dir)
        manifests = raw.window_manifests(run_dir)
        parquet = raw.requests_files(run_dir)
        observed = raw.observed_files(run_dir)
        telemetry = raw.telemetry_files(run_dir)
        counts["runs"] += 1
        counts["restarts"] += len(restarts)
        counts["windows"] += len(manifests)
        counts["request_records"] += sum(pq.read_metadata(p).num_rows for p in parquet)
        counts["gpu_telemetry"] += sum(pq.read_metadata(p).num_rows for p in telemetry)
        # the run manifest, and every restart, window, requests, observations and
        # telemetry file
        counts["raw_files"] += (1 + len(restarts) + len(manifests) + len(parquet)
                                + len(observed) + len(telemetry))
    return counts


def dir_mib(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / MIB, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int,
                        help="measured requests per run (rounded down to whole windows)")
    parser.add_argument("--runs", type=int, default=1, help="runs in the warehouse (K)")
    parser.add_argument("--dir", type=Path,
                        help="where raw files and the warehouse go (kept); default: a "
                             "temporary folder, removed at the end unless --keep")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--events", type=int, default=30, help="stream events per request")
    parser.add_argument("--restarts", type=int, default=5, help="restarts per arm")
    parser.add_argument("--seed", type=int, default=7, help="seed of the first run")
    parser.add_argument("--repeat", type=int, default=3,
                        help="times load and the plain CREATE TABLE AS are measured "
                             "(alternately; the ratio takes the fastest of each)")
    parser.add_argument("--telemetry", type=_telemetry_shape, metavar="NODES,GPUS,READINGS",
                        help="GPU telemetry in every window: a deployment of NODES nodes of "
                             "GPUS GPUs each, read READINGS times per window (issue #24)")
    parser.add_argument("--slos", action="store_true",
                        help="two SLOs and a frontier comparison in the sweep (issue #27): "
                             "derive judges every request, compare makes the frontier")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(json.loads(sys.stdin.read()))
    if args.requests is None or min(args.runs, args.requests, args.repeat) < 1:
        parser.error("--requests, --runs and --repeat must be at least 1")

    from benchmarks.synthetic_run import write_scale_run

    temporary = args.dir is None
    base = Path(tempfile.mkdtemp(prefix="benchledger-scale-")) if temporary else args.dir
    base = base.resolve()
    base.mkdir(parents=True, exist_ok=True)
    warehouse = base / "warehouse.duckdb"
    for stale in (warehouse, base / "plain.duckdb"):
        stale.unlink(missing_ok=True)
        Path(f"{stale}.wal").unlink(missing_ok=True)
    for stale in ("published", "gx-data-docs", "logs"):
        shutil.rmtree(base / "data" / stale, ignore_errors=True)
    log_dir = base / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)

    try:
        # 1. the raw files of every run (kept from an earlier call on the same --dir when
        #    that call wrote the same shape: the run manifest and the sweep file say so)
        layouts, reused, start = [], 0, time.perf_counter()
        for i in range(args.runs):
            layout = _run_files(base, i, args, write_scale_run)
            reused += layout[1]
            layouts.append(layout[0])
        generate_s = time.perf_counter() - start
        last = layouts[-1]
        written = written_counts([layout.run_dir for layout in layouts])

        def spec(stage: str, layout=last, **extra) -> dict:
            return {"stage": stage, "warehouse": str(warehouse), "run_id": layout.run_id,
                    "run_dir": str(layout.run_dir), "docs_dir": str(layout.data_docs_dir),
                    "export_dir": str(layout.export_dir), **extra}

        # 2. the earlier runs, all stages, in one process
        prior = None
        if args.runs > 1:
            runs = [{"run_id": lay.run_id, "run_dir": str(lay.run_dir),
                     "docs_dir": str(lay.data_docs_dir)} for lay in layouts[:-1]]
            prior = run_child(spec("prior", runs=runs), log_dir)
            prior = {"runs": len(runs), "seconds": prior["result"]["seconds"],
                     "process_seconds": prior["process_seconds"]}

        # 3. the yardstick, then the last run's stages, one fresh process each
        #    (load and plain alternate --repeat times: on a shared machine the fastest of
        #    each is the one least disturbed; the extra loads go into a scratch copy of
        #    the warehouse as it was before the last run)
        files = [str(p) for p in raw.requests_files(last.run_dir)]
        telemetry_files = [str(p) for p in raw.telemetry_files(last.run_dir)]
        plain_spec = spec("plain", files=files, telemetry_files=telemetry_files,
                          plain_warehouse=str(base / "plain.duckdb"))
        plains, loads = [], []
        scratch = base / "scratch.duckdb"
        for _ in range(args.repeat - 1):
            plains.append(run_child(plain_spec, log_dir)["seconds"])
            scratch.unlink(missing_ok=True)
            if warehouse.exists():
                shutil.copyfile(warehouse, scratch)
            loads.append(run_child({**spec("load"), "warehouse": str(scratch)},
                                   log_dir)["seconds"])
            scratch.unlink(missing_ok=True)
        plain = run_child(plain_spec, log_dir)
        plains.append(plain["seconds"])
        stages = {stage: run_child(spec(stage), log_dir) for stage in STAGES}
        loads.append(stages["load"]["seconds"])

        # 4. the auditor's queries and the rows of every table
        queries = audit_queries()
        audit = run_child(spec("audit", queries=queries), log_dir)
        rows = run_child(spec("counts"), log_dir)["result"]
        report = {
            "benchmark": "warehouse_scale",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            **code_version(),
            "requests": written["request_records"] // args.runs, "requests_asked": args.requests,
            "runs": args.runs, "events": args.events, "telemetry": args.telemetry,
            "slos": args.slos,
            "windows_per_run": written["windows"] // args.runs,
            "warehouse": str(warehouse), "kept": not temporary or args.keep,
            "machine": machine(),
            "generate_seconds": round(generate_s, 2), "raw_runs_reused": reused,
            "raw_mib_last_run": dir_mib(last.run_dir),
            "stages": stages,
            "plain_ctas": {k: plain[k] for k in ("seconds", "process_seconds", "cpu_seconds",
                                                  "peak_rss_mib")},
            "load_seconds_all": loads, "plain_seconds_all": plains,
            "load_vs_plain": round(min(loads) / min(plains), 3),
            "peak_rss_mib_max": max(s["peak_rss_mib"] for s in stages.values()),
            "rows": rows, "written": written,
            "warehouse_mib": round(warehouse.stat().st_size / MIB, 1),
            "prior_runs": prior,
            "audit_entry_id": audit["result"]["entry_id"],
            "audit_queries": audit["result"]["queries"],
        }
    finally:
        if temporary and not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(report, sort_keys=False))
    return 0


def _telemetry_shape(text: str) -> tuple[int, int, int]:
    from benchmarks.synthetic_run import _telemetry_shape as shape

    return shape(text)


def _run_files(base: Path, index: int, args, write_scale_run):
    """The layout of run `index`, writing its raw files unless an earlier call on this
    folder left a complete run of the same shape; (layout, 1 if reused else 0)."""
    from benchledger.raw.layout import RunLayout

    layout = RunLayout(base / "data", run_id_of(index))
    shape = {"requests": args.requests, "events": args.events, "restarts": args.restarts,
             "seed": args.seed + index, "telemetry": args.telemetry, "slos": args.slos}
    stamp = base / "shapes" / f"{layout.run_dir.name}.json"
    if (stamp.exists() and layout.run_manifest.exists()
            and json.loads(stamp.read_text()) == shape):
        return layout, 1
    stamp.unlink(missing_ok=True)
    shutil.rmtree(layout.run_dir, ignore_errors=True)
    layout = write_scale_run(base, args.requests, restarts=args.restarts, events=args.events,
                             seed=args.seed + index, run_id=layout.run_id,
                             telemetry=args.telemetry, slos=args.slos)
    stamp.parent.mkdir(exist_ok=True)
    stamp.write_text(json.dumps(shape))  # written last: a half-written run is redone
    return layout, 0


if __name__ == "__main__":
    raise SystemExit(main())
