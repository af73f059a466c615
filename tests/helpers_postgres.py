"""The real services of deploy/, started for one test: a database of its own on the PostgreSQL server
at 127.0.0.1:5432, an `mlflow server` on it, and a Dagster instance (deploy/dagster.yaml) with its
daemon.

Every server binds 127.0.0.1 on a free port, runs in its own process group and is stopped by the
context that started it; every database gets a fresh name and is dropped at the end, so parallel
runs never share state. Without a server answering `pg_isready`, `require_postgres` skips, saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from orchestration.cli.demo import PERMISSIVE_GATES, demo_run_config, permissive_floors
from tests.helpers_webserver import REPO_ROOT, free_port, server_env

PG_HOST, PG_PORT = "127.0.0.1", 5432
PG_USER = os.environ.get("RETRAIN_TEST_PG_USER", "postgres")
BIN = Path(sys.executable).parent
DEPLOY_DAGSTER_YAML = REPO_ROOT / "deploy" / "dagster.yaml"
MLFLOW_SERVER_SH = REPO_ROOT / "deploy" / "mlflow-server.sh"
MLFLOW_READY_BOUND_S = 120  # ~25 s on an idle machine; the bound allows for two busy shared cores


class ServiceError(RuntimeError):
    """A server did not come up, or a run did not reach the expected state, within its bound."""


def require_postgres() -> None:
    """Skip the calling test, with the reason, unless PostgreSQL answers on 127.0.0.1:5432."""
    tool = shutil.which("pg_isready")
    if tool is None:
        pytest.skip("postgres tests need `pg_isready` (PostgreSQL client tools) on PATH; not found")
    probe = subprocess.run([tool, "-h", PG_HOST, "-p", str(PG_PORT)], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"no PostgreSQL on {PG_HOST}:{PG_PORT} ({probe.stdout.strip() or probe.stderr.strip()})")


def _admin(sql: str) -> None:
    import psycopg2  # the driver dagster-postgres uses; imported only by the tests that need it

    con = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres")
    con.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    try:
        with con.cursor() as cur:
            cur.execute(sql)
    finally:
        con.close()


def query(db: str, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of one query against `db`, straight from PostgreSQL (not through Dagster or MLflow)."""
    import psycopg2  # see _admin

    con = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=db)
    try:
        with con.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        con.close()


@contextmanager
def fresh_database(prefix: str) -> Iterator[str]:
    """A new, uniquely named database; dropped afterwards even while a server still holds connections."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_uri(db: str) -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{db}"


def _stop_group(process: subprocess.Popen, grace: float = 20) -> None:
    """SIGTERM the process group this module started, then SIGKILL whatever outlived the grace."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
    try:
        os.killpg(process.pid, signal.SIGKILL)  # children (workers, code servers) that outlived the leader
    except ProcessLookupError:
        pass
    process.wait(timeout=grace)


# The admin account deploy/mlflow-server.sh creates on its first start (MLflow wants 12 characters or more).
MLFLOW_TEST_USER, MLFLOW_TEST_PASSWORD = "retrain-test", "test-only-password-not-a-secret"
CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


@contextmanager
def script_mlflow_server(backend_uri: str, artifacts: Path, log_dir: Path, **env: str) -> Iterator[str]:
    """deploy/mlflow-server.sh (basic auth, users in a sqlite file beside the logs) with its backend
    store at `backend_uri`; yields its URI. While it runs, this process's environment carries the
    admin credentials, as a deployment's pods do: MLflow clients here, and the services a test
    starts from this environment, sign in with them."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "mlflow-server.log"
    uri = f"http://127.0.0.1:{port}"
    saved = {key: os.environ.get(key) for key in CREDENTIALS}
    os.environ.update(dict(zip(CREDENTIALS, (MLFLOW_TEST_USER, MLFLOW_TEST_PASSWORD), strict=True)))
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                ["sh", str(MLFLOW_SERVER_SH)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={
                    **os.environ,
                    "MLFLOW_BIN": str(BIN / "mlflow"),
                    "MLFLOW_BACKEND_STORE_URI": backend_uri,
                    "MLFLOW_ARTIFACTS_DESTINATION": str(artifacts),
                    "MLFLOW_AUTH_DATABASE_URI": f"sqlite:///{log_dir / f'mlflow-auth-{port}.db'}",
                    "MLFLOW_FLASK_SERVER_SECRET_KEY": uuid.uuid4().hex,
                    "MLFLOW_PORT": str(port),
                    "MLFLOW_WORKERS": "1",
                    "TMPDIR": str(log_dir),  # the auth config the script writes goes with the logs
                    "MLFLOW_ENABLE_TELEMETRY": "false",
                    # No background job runner: the registry does not need it, and it multiplies processes.
                    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
                    **env,
                },
            )
            try:
                _wait_for_mlflow(process, uri, log_path)
                yield uri
            finally:
                _stop_group(process)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _wait_for_mlflow(process: subprocess.Popen, uri: str, log_path: Path) -> None:
    deadline = time.monotonic() + MLFLOW_READY_BOUND_S
    while True:
        if process.poll() is not None:
            raise ServiceError(f"mlflow server exited with {process.returncode}: {log_path.read_text()[-3000:]}")
        try:
            probe = f"{uri}/api/2.0/mlflow/experiments/search?max_results=1"
            if requests.get(probe, timeout=10, auth=(MLFLOW_TEST_USER, MLFLOW_TEST_PASSWORD)).ok:
                return
        except (requests.ConnectionError, requests.Timeout):
            pass  # not listening yet, or still creating its tables
        if time.monotonic() > deadline:
            raise ServiceError(f"mlflow server not ready after {MLFLOW_READY_BOUND_S} s; see {log_path}")
        time.sleep(0.5)


@contextmanager
def mlflow_server(db: str, artifacts: Path, log_dir: Path) -> Iterator[str]:
    """deploy/mlflow-server.sh with its backend store in PostgreSQL database `db`; yields its URI."""
    with script_mlflow_server(postgres_uri(db), artifacts, log_dir) as uri:
        yield uri


def dagster_pg_env(db: str) -> dict[str, str]:
    """The connection variables deploy/dagster.yaml reads."""
    return {
        "DAGSTER_PG_HOST": PG_HOST,
        "DAGSTER_PG_PORT": str(PG_PORT),
        "DAGSTER_PG_USERNAME": PG_USER,
        "DAGSTER_PG_PASSWORD": "",  # trust authentication on this machine
        "DAGSTER_PG_DB": db,
    }


def ci_run_config(grpo: dict | None = None) -> dict:
    """The end-to-end test's CI-sized run config with gates that let both weeks through (these tests
    are about the services, not the decision), executed in process in the run worker."""
    config = demo_run_config("ci", PERMISSIVE_GATES)
    config["execution"] = {"config": {"in_process": {}}}
    config["ops"]["grpo_candidate"]["config"].update(grpo or {})
    return config


def launched_run(instance, tag: str):
    import dagster as dg

    records = instance.get_run_records(filters=dg.RunsFilter(tags={"test/launch": tag}))
    return records[0] if records else None


@dataclass
class Deployment:
    """A Dagster instance from deploy/dagster.yaml on its own database, as the services see it."""

    db: str
    dagster_home: Path
    env: dict[str, str]
    log_dir: Path

    @contextmanager
    def instance(self):
        import dagster as dg

        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("DAGSTER_PG_")})
        try:
            with dg.DagsterInstance.from_config(str(self.dagster_home)) as instance:
                yield instance
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def launch(self, week: str, run_config: dict, tag: str) -> subprocess.Popen:
        """`dagster job launch` of `weekly_retrain` for one week: the run goes to the queue."""
        log = open(self.log_dir / f"launch-{tag}.log", "wb")  # noqa: SIM115 - the CLI writes to it until it exits
        return subprocess.Popen(
            [str(BIN / "dagster"), "job", "launch", "-w", "workspace.yaml", "-j", "weekly_retrain"]
            + ["--tags", json.dumps({"dagster/partition": week, "test/launch": tag})]
            + ["--config-json", json.dumps(run_config)],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@contextmanager
def deployment(tmp: Path, home_root: Path, extra_env: dict[str, str]) -> Iterator[Deployment]:
    """A fresh database, an instance from deploy/dagster.yaml on it, and `dagster-daemon run`.

    The daemon takes runs off the queue, launches them (one run worker process each), re-runs a
    crashed run, and runs the sensors. Storage is created once here, before any server starts, so
    no two processes migrate the fresh database at the same moment.
    """
    with fresh_database("retrain_dagster") as db:
        dagster_home = tmp / "dagster"
        dagster_home.mkdir(parents=True)
        shutil.copy(DEPLOY_DAGSTER_YAML, dagster_home / "dagster.yaml")
        # ci_run_config's gates let both weeks through (these tests are about the services, not the
        # decision); a run config cannot loosen a gate below the instance's floors, so they are the floors.
        permissive_floors(dagster_home)
        log_dir = tmp / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        env = {**server_env(home_root, dagster_home), **dagster_pg_env(db), **extra_env, "OMP_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        deploy = Deployment(db=db, dagster_home=dagster_home, env=env, log_dir=log_dir)
        with deploy.instance() as instance:
            instance.get_runs(limit=1)
            instance.all_instigator_state()
        with open(log_dir / "daemon.log", "wb") as log:
            daemon = subprocess.Popen(
                [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                yield deploy
            finally:
                _stop_group(daemon)


def wait_for(predicate, bound_s: float, what: str, interval: float = 2.0, on_timeout=lambda: ""):
    """Poll `predicate` until it returns something truthy; raise ServiceError after `bound_s`."""
    deadline = time.monotonic() + bound_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ServiceError(f"{what}: not reached within {bound_s:.0f} s. {on_timeout()}")
        time.sleep(interval)
