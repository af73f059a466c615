"""Start `dagster-webserver` (and optionally `dagster-daemon`) on a home folder and talk GraphQL to it.

Used by tests/test_webserver.py and docs/take_screenshots.py. Servers bind 127.0.0.1 only and run
in their own process group so that stopping them also stops the code-location subprocesses they
spawn.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


class GraphQLError(RuntimeError):
    """The webserver answered a GraphQL request with errors (the query and the errors are in the message)."""


class ServerNotReadyError(RuntimeError):
    """The webserver or its code location did not come up within the time bound."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(home_root: Path, dagster_home: Path) -> dict[str, str]:
    """The environment the servers run under: this home, offline, no telemetry."""
    env = dict(os.environ)
    env.update(
        {
            "RETRAIN_HOME": str(home_root),
            "DAGSTER_HOME": str(dagster_home),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "MLFLOW_ENABLE_TELEMETRY": "false",
            "DO_NOT_TRACK": "1",
            "DAGSTER_DISABLE_TELEMETRY": "1",
        }
    )
    return env


@dataclass
class Webserver:
    url: str
    log_path: Path

    def graphql(self, query: str, variables: dict | None = None, timeout: float = 60) -> dict[str, Any]:
        """POST one GraphQL request; raise GraphQLError when the answer carries errors."""
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
        if answer.get("errors"):
            raise GraphQLError(f"GraphQL errors {answer['errors']} for query {query[:200]!r}")
        return answer["data"]

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


LOCATIONS_QUERY = """
query {
  workspaceOrError {
    __typename
    ... on Workspace { locationEntries { name locationOrLoadError { __typename
        ... on PythonError { message } } } }
  }
}
"""


def _stop(process: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM the process group, then SIGKILL it if it has not exited after `grace` seconds."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=grace)


def wait_until_ready(server: Webserver, process: subprocess.Popen, bound_s: float) -> str:
    """Poll GraphQL until the workspace's code location has loaded; return the location's name."""
    deadline, last = time.monotonic() + bound_s, "no answer yet"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerNotReadyError(f"webserver exited with {process.returncode}:\n{server.log_tail()}")
        try:
            data = server.graphql(LOCATIONS_QUERY, timeout=10)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            last = repr(err)
        else:
            entries = data["workspaceOrError"].get("locationEntries") or []
            loaded = [e for e in entries if (e["locationOrLoadError"] or {}).get("__typename") == "RepositoryLocation"]
            failed = [e for e in entries if (e["locationOrLoadError"] or {}).get("__typename") == "PythonError"]
            if failed:
                raise ServerNotReadyError(f"code location failed to load: {failed}")
            if loaded:
                return loaded[0]["name"]
            last = f"locations still loading: {entries}"
        time.sleep(1)
    raise ServerNotReadyError(f"webserver not ready after {bound_s:.0f}s ({last}):\n{server.log_tail()}")


def initialise_storage(dagster_home: Path) -> None:
    """Create the instance's SQLite storages once, before any server starts.

    Left to the servers, the webserver's code-location process and the daemon each migrate the
    fresh databases at the same moment and can leave two alembic heads behind (seen here).
    """
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.get_runs(limit=1)
        instance.all_instigator_state()


@contextmanager
def running_servers(
    home_root: Path, dagster_home: Path, log_dir: Path, daemon: bool = True, ready_bound_s: float = 120
) -> Iterator[tuple[Webserver, str]]:
    """Run `dagster-webserver -w workspace.yaml` from the repo root on a free loopback port.

    With `daemon`, `dagster-daemon run` runs beside it: the home's dagster.yaml puts runs in a
    queue (one weekly retrain at a time), and only the daemon takes runs off that queue.
    Yields the webserver and its code location's name; always stops both process groups.
    """
    initialise_storage(dagster_home)
    env = server_env(home_root, dagster_home)
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    processes: list[subprocess.Popen] = []
    logs = []
    try:
        web_log = open(log_dir / "webserver.log", "wb")  # noqa: SIM115 - outlives this frame; closed in finally
        logs.append(web_log)
        processes.append(
            subprocess.Popen(
                [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                cwd=REPO_ROOT,
                env=env,
                stdout=web_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        server = Webserver(url=f"http://127.0.0.1:{port}", log_path=log_dir / "webserver.log")
        location = wait_until_ready(server, processes[0], ready_bound_s)
        if daemon:
            daemon_log = open(log_dir / "daemon.log", "wb")  # noqa: SIM115 - closed with the webserver's
            logs.append(daemon_log)
            processes.append(
                subprocess.Popen(
                    [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                    cwd=REPO_ROOT,
                    env=env,
                    stdout=daemon_log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        yield server, location
    finally:
        for process in reversed(processes):
            _stop(process)
        for handle in logs:
            handle.close()
