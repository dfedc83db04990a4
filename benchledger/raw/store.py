"""Raw files kept in an S3-compatible object store, for nodes that share no filesystem (#25).

`--data-dir s3://bucket/prefix` makes the object store the place a run's raw files live.
Every node still writes them to a folder of its own first (its *local copy*, under
BENCHLEDGER_LOCAL_RAW_DIR), with the all-or-nothing rule of benchledger.restart.window_write,
and then pushes them: each task pushes its restart's folder when it ends and the measure
step after every window, data files before the window manifest that names them and the
restart manifest last. An object appears whole or not at all (a PUT, or a multipart
upload, is atomic), so a window manifest in the store means every file it names was
already there: the same rule as on disk.

The head pulls a run's folder before it loads it (pyarrow's S3 filesystem), checking the
sha256 of every file a downloaded window manifest names as it is written; the loader then
checks them again, loads each file once by its sha256 (a second load adds nothing) and
records the files by their s3:// URL.

Each file of a restart's folder has one writer (the restart's own node writes its
manifest, log and windows; a further node writes nodes/<node>.*). A node remembers what it
pushed in `.stored` of the folder, and a pull never replaces such a file: what a node
wrote, its own copy has last.

Credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_REGION; the endpoint from AWS_ENDPOINT_URL_S3 or
AWS_ENDPOINT_URL) or from an Airflow connection the tasks read (operators/); they are
never part of the location, which is all that is recorded.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from pyarrow import fs as pafs

from benchledger.raw import layout as raw
from benchledger.raw.records import storage_path
from benchledger.redaction import shown_location
from benchledger.settings import settings as read_settings
from benchledger.settings import variable

LOCAL_COPY_ENV = variable("local_raw_dir")
LEDGER = ".stored"  # what this node pushed from a folder (no .json: never taken for a manifest)
_LOCK = ".stored.lock"
_CHUNK = 8 << 20
_PARALLEL = 8  # transfers at once: each is a round trip, the bytes are few


class RawStoreError(Exception):
    """The object store could not be listed, read or written (perhaps for a while)."""


class StoredFileMismatch(RawStoreError):
    """The store holds a file other than the one its window manifest names."""


@dataclass(frozen=True)
class S3Settings:
    """How to reach the store; the secrets never appear in repr, errors or records."""

    endpoint_url: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Settings:
        """From the AWS_* variables (benchledger.settings) of this process's environment,
        or of `env`."""
        current = read_settings(env)
        secret, token = current.aws_secret_access_key, current.aws_session_token
        return cls(endpoint_url=current.aws_endpoint_url,
                   access_key=current.aws_access_key_id,
                   secret_key=secret.get_secret_value() if secret else None,
                   session_token=token.get_secret_value() if token else None,
                   region=current.aws_region)


@dataclass(frozen=True)
class ObjectStore:
    """s3://bucket/prefix: where a deployment's raw folders live."""

    bucket: str
    prefix: str
    settings: S3Settings = field(default_factory=S3Settings, repr=False, compare=False)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, relative: str | Path) -> str:
        """The store's path of a file `relative` to the data dir (bucket/prefix/...)."""
        return "/".join(part for part in (self.bucket, self.prefix, str(relative)) if part)

    def url_of(self, relative: str | Path) -> str:
        return f"s3://{self.key(relative)}"

    @property
    def filesystem(self) -> pafs.S3FileSystem:
        return _filesystem(self.settings)


@functools.lru_cache(maxsize=8)
def _filesystem(settings: S3Settings) -> pafs.S3FileSystem:
    # None leaves each to the AWS SDK's own chain (environment, profile, instance role)
    return pafs.S3FileSystem(endpoint_override=settings.endpoint_url,
                             access_key=settings.access_key, secret_key=settings.secret_key,
                             session_token=settings.session_token, region=settings.region)


def is_object_store(location: str | Path) -> bool:
    return str(location).lower().startswith("s3://")


def parse_store(location: str, settings: S3Settings | None = None) -> ObjectStore:
    """An s3://bucket/prefix location, refused when it carries credentials, a query or no
    bucket; never echoed with its credentials or query (a presigned URL's signature is one:
    redaction.shown_location)."""
    parts = urlsplit(location)
    if "@" in parts.netloc or parts.password or parts.username:
        raise ValueError("raw storage: an s3:// location must not hold credentials; give "
                         "them in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) "
                         "or an Airflow connection (BENCHLEDGER_S3_CONN_ID)")
    if parts.query or parts.fragment:
        raise ValueError(f"raw storage {shown_location(location)}: expected s3://bucket/prefix "
                         "without a query or fragment (a presigned URL's signature is a "
                         "credential: give credentials in the environment, "
                         "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or an Airflow "
                         "connection, BENCHLEDGER_S3_CONN_ID)")
    if not parts.netloc:
        raise ValueError(f"raw storage {shown_location(location)}: expected "
                         "s3://bucket/prefix")
    return ObjectStore(parts.netloc, parts.path.strip("/"), settings or S3Settings.from_env())


@dataclass(frozen=True)
class RawStorage:
    """Where raw files live: this node's folder, and the object store behind it (None: the
    folder is the storage, local or a shared mount)."""

    local: Path
    store: ObjectStore | None = None

    @property
    def location(self) -> str:
        """As the run records it: the store's URL, or the folder."""
        return self.store.url if self.store else str(self.local)

    def key_of(self, path: Path) -> str:
        """The store's key (bucket/prefix/...) of a file of the local copy."""
        assert self.store is not None
        return self.store.key(Path(path).relative_to(self.local).as_posix())

    def recorded_path(self, path: Path) -> str:
        """How a raw file is named in the warehouse: its URL in the store, else its path."""
        return f"s3://{self.key_of(path)}" if self.store is not None else str(path)


def local_copy_base(env: Mapping[str, str] | None = None) -> Path:
    """This node's folder of local copies: BENCHLEDGER_LOCAL_RAW_DIR, else
    $BENCHLEDGER_HOME/object-store (of this process's environment, or of `env`)."""
    current = read_settings(env)
    return current.local_raw_dir or current.home / "object-store"


def resolve(location: str | Path, settings: S3Settings | None = None,
            local_base: Path | None = None) -> RawStorage:
    """A --data-dir as storage: a path or file:// URL (records.storage_path), or an
    s3:// location whose local copy is <local_base>/<bucket>/<prefix>."""
    if not is_object_store(location):
        return RawStorage(storage_path(location))
    store = parse_store(str(location), settings)
    base = local_base if local_base is not None else local_copy_base()
    return RawStorage((base / store.bucket / store.prefix).resolve(), store)


# --- pushing --------------------------------------------------------------------------------


def _rank(relative: str) -> int:
    """Upload order: data files, window manifests, node manifests, the restart manifest."""
    name = relative.rsplit("/", 1)[-1]
    if name in (raw.RESTART_MANIFEST, raw.RUN_MANIFEST):
        return 3
    if _is_window_manifest(relative):
        return 1
    return 2 if name.endswith(raw.MANIFEST_SUFFIX) and not name.endswith(raw.OBSERVED_SUFFIX) \
        else 0


def _pushed(name: str) -> bool:
    """Whether a file is pushed: not a writer's .tmp, an attempt's mark, a progress report
    (each rewritten every few seconds, only for the local view) or the ledger."""
    return not (name.startswith(".") or name.endswith((raw.TMP_SUFFIX, raw.STARTED_SUFFIX,
                                                        raw.PROGRESS_SUFFIX)))


@contextlib.contextmanager
def _ledger(folder: Path) -> Iterator[dict[str, list[int]]]:
    """The folder's record of what this node pushed, {relative: [size, mtime_ns]}, held
    under a lock (a node's tasks of one restart may push at once) and saved on the way
    out, also after a failed upload (what went up stays recorded)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / _LOCK).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = folder / LEDGER
        try:
            ledger = json.loads(path.read_text())
        except (OSError, ValueError):
            ledger = {}
        try:
            yield ledger
        finally:
            raw.write_json(path, ledger)


def push_folder(storage: RawStorage, folder: Path, recursive: bool = True) -> int:
    """Upload what this node wrote or changed in `folder` since its last push, in an order
    that keeps every window whole in the store; the number of files uploaded. Nothing
    happens without a store."""
    if storage.store is None:
        return 0
    files = (p for p in (folder.rglob("*") if recursive else folder.iterdir())
             if _pushed(p.name) and p.is_file())
    with _ledger(folder) as ledger:
        changed = []
        for path in files:
            st = path.stat()
            relative = path.relative_to(folder).as_posix()
            if ledger.get(relative) != [st.st_size, st.st_mtime_ns]:
                changed.append((relative, path, [st.st_size, st.st_mtime_ns]))
        for rank in range(4):  # one rank at a time: a later one never lands first
            batch = [c for c in changed if _rank(c[0]) == rank]
            _parallel(lambda c: _upload(storage, c[1]), batch)
            ledger.update({relative: signature for relative, _, signature in batch})
        return len(changed)


def _upload(storage: RawStorage, path: Path) -> None:
    assert storage.store is not None
    try:
        with path.open("rb") as source, \
                storage.store.filesystem.open_output_stream(storage.key_of(path)) as out:
            while chunk := source.read(_CHUNK):
                out.write(chunk)
    except OSError as exc:
        raise RawStoreError(f"{storage.recorded_path(path)}: could not be written from "
                            f"{path}: {exc}") from exc


def push_restart(storage: RawStorage, layout: raw.RunLayout, arm: str, k: int) -> int:
    return push_folder(storage, layout.slot_dir(arm, k))


def push_run_manifest(storage: RawStorage, layout: raw.RunLayout) -> int:
    return push_folder(storage, layout.run_dir, recursive=False)


# --- pulling --------------------------------------------------------------------------------


def _is_window_manifest(relative: str) -> bool:
    name = relative.rsplit("/", 1)[-1]
    return (name.endswith(raw.MANIFEST_SUFFIX) and not name.endswith(raw.OBSERVED_SUFFIX)
            and name not in (raw.RESTART_MANIFEST, raw.RUN_MANIFEST)
            and f"/{raw.NODES_DIR}/" not in f"/{relative}")


def _listing(storage: RawStorage, folder: Path, recursive: bool) -> dict[str, int]:
    """{path relative to `folder`: size} of the objects under it in the store."""
    assert storage.store is not None
    store = storage.store
    relative = folder.relative_to(storage.local).as_posix()
    selector = pafs.FileSelector(store.key(relative), recursive=recursive,
                                 allow_not_found=True)
    try:
        infos = store.filesystem.get_file_info(selector)
    except OSError as exc:
        raise RawStoreError(f"{store.url_of(relative)}: could not be listed: {exc}") from exc
    prefix = store.key(relative) + "/"
    return {i.path.removeprefix(prefix): i.size for i in infos if i.type == pafs.FileType.File}


def _pull(storage: RawStorage, folder: Path, objects: dict[str, int]) -> int:
    """Download into `folder` what other nodes pushed there: every manifest (small, and
    rewritten by their writers), any other file absent here or of another size (a
    window's files never change once its manifest is written; a log grows); never a
    file this node pushed itself (its ledger names it). Window manifests come last, and
    each file one of them names is checked against the sha256 it records."""
    with _ledger(folder) as ledger:
        wanted = []
        for relative, size in objects.items():
            local = folder / relative
            if relative in ledger or not _pushed(local.name):
                continue
            if _rank(relative) > 0 or not local.is_file() or local.stat().st_size != size:
                wanted.append((relative, local))
        first = [w for w in wanted if not _is_window_manifest(w[0])]
        shas = dict(_parallel(lambda w: (w[1], _download(storage, w[1])), first))
        manifests = [w[1] for w in wanted if _is_window_manifest(w[0])]
        _parallel(lambda path: _download(storage, path), manifests)
    _check_named(storage, manifests, shas)
    return len(wanted)


def _download(storage: RawStorage, local: Path) -> str:
    """Write the object of `local` there (through a .tmp renamed into place); its sha256."""
    assert storage.store is not None
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = raw.staged(local)
    digest = hashlib.sha256()
    try:
        with storage.store.filesystem.open_input_stream(storage.key_of(local)) as source, \
                tmp.open("wb") as out:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        os.replace(tmp, local)
    except OSError as exc:
        raw.remove_quietly(tmp)
        raise RawStoreError(f"{storage.recorded_path(local)}: could not be read into "
                            f"{local}: {exc}") from exc
    return digest.hexdigest()


def _check_named(storage: RawStorage, manifests: list[Path], shas: dict[Path, str]) -> None:
    """Each file a downloaded window manifest names, downloaded with it, has the sha256
    the manifest records (one that was here already, the loader checks)."""
    for manifest in manifests:
        data = raw.read_json(manifest)
        for kind in ("requests", "observed", "telemetry"):
            name, expected = data.get(f"{kind}_file"), data.get(f"{kind}_file_sha256")
            found = shas.get(manifest.parent / name) if name else None
            if found is not None and found != expected:
                raise StoredFileMismatch(
                    f"{storage.recorded_path(manifest.parent / name)}: sha256 {found} does "
                    f"not match its window manifest ({expected}); refusing it")


def pull_restart(storage: RawStorage, layout: raw.RunLayout, arm: str, k: int) -> int:
    """Before a restart's task: the run manifest, and what other nodes wrote for it."""
    if storage.store is None:
        return 0
    slot = layout.slot_dir(arm, k)
    return (_pull(storage, layout.run_dir, _listing(storage, layout.run_dir, False))
            + _pull(storage, slot, _listing(storage, slot, True)))


def pull_run(storage: RawStorage, layout: raw.RunLayout) -> int:
    """Before the load: every raw file of the run this node does not have (one listing;
    each restart's folder pulled under its own ledger)."""
    if storage.store is None:
        return 0
    objects = _listing(storage, layout.run_dir, True)
    by_folder: dict[str, dict[str, int]] = {}
    for relative, size in objects.items():
        parts = relative.split("/")
        folder, rest = ("", relative) if len(parts) < 3 else \
            ("/".join(parts[:2]), "/".join(parts[2:]))
        by_folder.setdefault(folder, {})[rest] = size
    return sum(_pull(storage, layout.run_dir / folder if folder else layout.run_dir, found)
               for folder, found in sorted(by_folder.items()))


_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def _parallel(function: Callable[[_Item], _Result], items: list[_Item]) -> list[_Result]:
    if len(items) < 2:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(len(items), _PARALLEL)) as pool:
        return list(pool.map(function, items))
