"""Secrets on a shared machine (issue #39, item 7), on a real deployment: `cluster up` with
one node and a worker joined with `cluster join`, both in a folder every local user may
enter (like a home directory). As the user nobody, no file of either folder that holds a
secret (the JWT secret, the API's session key, the fernet key, the API password, a
connection's password) can be read, nor can either folder be listed; the folders, those
files, the metadata DB and the logs are private to their owner. A token forged without the
JWT secret (a wrong one, an empty one, alg "none") gets nothing from the REST API or the
benchledger page, where the same claims signed with the real secret get in: reading the
secret is what it takes. An Airflow connection's password is encrypted (fernet) in the
metadata DB. About a minute on two cores; the unit tests of the same are in
tests/unit/cluster/test_private_files.py."""

from __future__ import annotations

import base64
import configparser
import hashlib
import hmac
import json
import re
import sqlite3
import stat
import subprocess
import sys
import uuid

import httpx
import jwt
import pytest
from cryptography.fernet import Fernet

from benchledger.cluster import commands as local_cluster
from benchledger.cluster.config import api_credentials
from tests.cluster_helpers import (
    files_holding,
    open_folder,
    read_as_another_user,
    readable_by_another_user,
    require_another_user,
)
from tests.sweeps import cluster_sweep, write_sweep

pytestmark = pytest.mark.integration

CONNECTION_PASSWORD = f"planted-connection-secret-{uuid.uuid4().hex}"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchledger.cli", *args], text=True,
                          capture_output=True, timeout=timeout, check=False)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def site():
    require_another_user()
    with open_folder("bl-secrets-") as folder:
        head, worker = folder / "head", folder / "worker"
        try:
            up = cli("cluster", "up", "--home", str(head), "--nodes", "node-a")
            assert up.returncode == 0, up.stdout + up.stderr
            joined = cli("cluster", "join", "--join-file", str(head / "join.json"),
                         "--node", "node-b", "--home", str(worker))
            assert joined.returncode == 0, joined.stdout + joined.stderr
            api_url = local_cluster.Cluster.load(head).api_url
            user, password = api_credentials(head)
            token = httpx.post(f"{api_url}/auth/token", timeout=30,
                               json={"username": user, "password": password}
                               ).raise_for_status().json()["access_token"]
            # the kind of connection docs/cluster.md recommends for an object store's keys
            created = httpx.post(f"{api_url}/api/v2/connections", timeout=30,
                                 headers={"Authorization": f"Bearer {token}"},
                                 json={"connection_id": "bl_store", "conn_type": "aws",
                                       "login": "AKIAIOSFODNN7EXAMPLE",
                                       "password": CONNECTION_PASSWORD})
            assert created.status_code == 201, created.text
            cfg = configparser.ConfigParser(interpolation=None)
            cfg.read(head / "airflow.cfg")
            yield {"head": head, "worker": worker, "api_url": api_url, "token": token,
                   "cfg": cfg, "password": password}
        finally:
            for home in (worker, head):
                if (home / local_cluster.STATE_FILE).exists():
                    local_cluster.down(home)


def test_no_file_that_holds_a_secret_can_be_read_by_another_user(site):
    head, worker, cfg = site["head"], site["worker"], site["cfg"]
    secrets = [secret for secret in (cfg["api_auth"]["jwt_secret"], cfg["api"]["secret_key"],
                                     cfg["core"].get("fernet_key"), site["password"],
                                     CONNECTION_PASSWORD) if secret]
    holding = files_holding([head, worker], secrets)
    # what must be among them (else this would prove nothing)
    for path in (head / "airflow.cfg", head / "join.json", head / "api-passwords.json",
                 worker / "airflow.cfg"):
        assert path in holding, (path, holding)
    private = [*holding, *head.glob("airflow-metadata.db*"),
               *(p for home in (head, worker) for p in (home / "logs").rglob("*"))]
    assert readable_by_another_user(private) == []
    assert readable_by_another_user([head / "airflow.cfg"]) == []
    # neither can the folders be listed, and the files stay private should they be opened
    listing = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              "ls", str(head), str(worker)], capture_output=True, text=True,
                             timeout=60, check=False)
    assert listing.returncode != 0 and "Permission denied" in listing.stderr
    assert (mode(head), mode(worker)) == (0o700, 0o700)
    loose = [(str(p), oct(mode(p))) for p in private if mode(p) & 0o077]
    assert loose == []
    # the worker got the JWT secret it signs with, not the head's other secrets
    assert cfg["api_auth"]["jwt_secret"] in (worker / "airflow.cfg").read_text()
    for head_only in (cfg["api"]["secret_key"], cfg["core"]["fernet_key"]):
        assert head_only not in (worker / "airflow.cfg").read_text()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed(claims: dict, header: dict, key: str | None) -> str:
    """HS512 by hand (PyJWT refuses to sign with an empty key, a forger does not); with
    no key, an unsigned token of alg "none"."""
    head = _b64(json.dumps({**header, "alg": "HS512" if key is not None else "none"}).encode())
    body = _b64(json.dumps(claims).encode())
    if key is None:
        return f"{head}.{body}."
    mac = hmac.new(key.encode(), f"{head}.{body}".encode(), hashlib.sha512).digest()
    return f"{head}.{body}.{_b64(mac)}"


def _let_in(api_url: str, token: str) -> dict[str, int]:
    """The status of the REST API and the benchledger page for a token (as a bearer
    token and as the UI's cookie)."""
    bearer = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=api_url, timeout=30, follow_redirects=False) as http:
        got = {"api": http.get("/api/v2/dags", headers=bearer).status_code,
               "page": http.get("/benchledger/", headers=bearer).status_code}
    with httpx.Client(base_url=api_url, timeout=30, follow_redirects=False,
                      cookies={"_token": token}) as http:
        got["page_cookie"] = http.get("/benchledger/").status_code
    return got


def test_a_forged_token_is_refused_and_only_the_secret_forges_one(site):
    """The attack of issue #39: another local user reads the JWT secret where they can
    (the head's airflow.cfg, the join file, the worker's airflow.cfg) and signs an admin
    token with the claims of a real one; now they read nothing, and every token they can
    make is refused. Signed with the real secret (what a reader of it would do), the same
    claims get in: reading it is all it takes."""
    real = site["token"]
    header = jwt.get_unverified_header(real)
    claims = {**jwt.decode(real, options={"verify_signature": False}),
              "jti": uuid.uuid4().hex}
    secret = site["cfg"]["api_auth"]["jwt_secret"]
    admitted = {"api": 200, "page": 200, "page_cookie": 200}
    assert _let_in(site["api_url"], _signed(claims, header, secret)) == admitted
    stolen = "".join(read_as_another_user(path) for path in (
        site["head"] / "airflow.cfg", site["head"] / "join.json",
        site["worker"] / "airflow.cfg"))
    found = re.search(r'jwt_secret"?\s*[=:]\s*"?([A-Za-z0-9_-]+)', stolen)
    forged = {"what nobody read": _signed(claims, header, found.group(1) if found else ""),
              "wrong secret": _signed(claims, header, "not-the-secret-" + "x" * 64),
              "empty secret": _signed(claims, header, ""),
              "session key": _signed(claims, header, site["cfg"]["api"]["secret_key"]),
              "alg none": _signed(claims, header, None)}
    for what, token in forged.items():
        got = _let_in(site["api_url"], token)
        # Airflow answers an invalid token 403 ("Invalid JWT token"); the page sends a
        # visitor it does not know to the login form (303)
        assert got["api"] in (401, 403), (what, got)
        assert got["page"] in (303, 401, 403) and got["page_cookie"] in (303, 401, 403), \
            (what, got)


def test_a_connections_password_is_encrypted_in_the_metadata_db(site):
    head = site["head"]
    db = head / "airflow-metadata.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        stored, encrypted = con.execute(
            "SELECT password, is_encrypted FROM connection WHERE conn_id = 'bl_store'"
        ).fetchone()
    assert encrypted and stored != CONNECTION_PASSWORD
    keys = Fernet(site["cfg"]["core"]["fernet_key"].encode())
    assert keys.decrypt(stored.encode()).decode() == CONNECTION_PASSWORD
    for file in head.glob("airflow-metadata.db*"):  # the DB and its journals
        assert CONNECTION_PASSWORD.encode() not in file.read_bytes(), file
    # tasks still get it in clear, through the API server
    got = httpx.get(f"{site['api_url']}/api/v2/connections/bl_store", timeout=30,
                    headers={"Authorization": f"Bearer {site['token']}"}).json()
    assert got["conn_type"] == "aws" and got["login"] == "AKIAIOSFODNN7EXAMPLE"


def test_what_a_run_leaves_in_the_folders_is_private_too(site, tmp_path):
    """A sweep run on the joined worker: the task logs Airflow writes while it runs (on the
    worker, and the head's copy the API server writes), not by `up`, are private too (the
    processes' umask; Airflow chmods a task log to 0o664 unless told otherwise), and the
    run succeeds with it."""
    sweep = tmp_path / "s.toml"
    write_sweep(sweep, cluster_sweep("cl-secrets", [("on-b", "node-b")]))
    done = cli("run", str(sweep), "--warehouse", str(tmp_path / "wh.duckdb"), "--cluster",
               str(site["head"]), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    logs = {home: [p for p in (home / "logs").rglob("*") if "dag_id=benchledger_cl-secrets"
                   in str(p)] for home in (site["head"], site["worker"])}
    assert all(any(p.is_file() for p in found) for found in logs.values()), logs
    every = [p for home in (site["head"], site["worker"]) for p in home.rglob("*")
             if p.is_file() and not p.is_symlink()]
    assert [(str(p), oct(mode(p))) for found in logs.values() for p in found
            if mode(p) & 0o077] == []
    assert len(every) > 20 and readable_by_another_user(every) == []
