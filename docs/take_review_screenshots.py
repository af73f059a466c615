"""Take the browser review flow's screenshots in docs/screenshots/ (see docs/REVIEW.md), from a real run.

    .venv/bin/python docs/take_review_screenshots.py [--out docs/screenshots] [--keep DIR]

Needs Debian's headless Chromium (`apt-get install -y chromium`). Steps, each through the product:
1. a fresh home (a temporary folder) with a week of simulated traffic, ingested (`retrain ingest`);
2. `retrain review export --week 2026-11-23 --n 20 --to mlflow` into the home's sqlite store;
3. `mlflow server` on 127.0.0.1 over that store;
4. headless Chromium, driven over the DevTools protocol as a reviewer would click: one failed
   conversation's trace opened, Assess, Add feedback > Human feedback, name `task_success`, type
   Boolean, False, a rationale, Create (MLflow 3.17's form records the source id `User`);
5. captures of the experiment's trace list and of that trace with its Assessments panel;
6. `retrain review import --from-mlflow --week 2026-11-23 --by ann`, printed (`--by` names the
   reviewer of the verdicts the UI recorded as `User`).
Chromium runs with a fresh profile and background networking off, and only ever loads 127.0.0.1.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import requests

from orchestration import environment

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

WEEK = "2026-11-23"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1600,1000",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prepare_home(root: Path) -> dict:
    """Simulate and ingest a week, export its review sample to MLflow; the export's summary."""
    os.environ["RETRAIN_HOME"] = str(root)
    os.environ.pop("MLFLOW_TRACKING_URI", None)  # the home's own store, which the server will serve
    from domains.retail.traffic.simulate import simulate
    from orchestration.cli import main

    home = environment.home().ensure()
    simulate(days=7, per_day=30, seed=11, out_dir=str(home.landing), start=date.fromisoformat(WEEK), n_users=80)
    if main(["ingest", str(home.landing)]) != 0:
        raise SystemExit("ingest failed")
    from orchestration.cli.review_mlflow import export_to_mlflow

    summary = export_to_mlflow(WEEK, n=20, seed=0)
    print(json.dumps({k: summary[k] for k in ("experiment", "experiment_id", "logged", "sample_id")}))
    return summary


class MlflowServer:
    """`mlflow server` over the home's store on 127.0.0.1, in its own process group."""

    def __init__(self, root: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "mlflow-server.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{root / 'mlflow.db'}",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "MLFLOW_ENABLE_TELEMETRY": "false", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )

    def __enter__(self) -> MlflowServer:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"mlflow server exited with {self.proc.returncode}; see {self.log}")
            try:
                if requests.get(f"{self.url}/api/2.0/mlflow/experiments/search?max_results=1", timeout=10).ok:
                    return self
            except (requests.ConnectionError, requests.Timeout):  # not listening yet
                pass
            time.sleep(0.5)
        self.__exit__()
        raise SystemExit(f"mlflow server not ready after 180 s; see {self.log}")

    def __exit__(self, *exc: object) -> None:
        # The server's own process group (it and its workers), which this script started.
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=30)


class Chromium:
    """Headless Chromium driven over the DevTools protocol (websocket-client, in the venv through the kubernetes client):
    a page is loaded, the UI's first-visit pop-ups are dismissed and a panel opened by clicking
    its buttons, then the page is captured."""

    def __init__(self, binary: str):
        self.profile = tempfile.TemporaryDirectory()
        port = free_port()
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile.name}", f"--remote-debugging-port={port}"]
            + ["about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                tabs = requests.get(f"http://127.0.0.1:{port}/json", timeout=5).json()
                break
            except requests.ConnectionError:  # not listening yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        import websocket

        page = next(t for t in tabs if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=120)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: object) -> dict:
        call_id = next(self.ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def click(self, label: str) -> bool:
        """Click the first button whose text or aria-label is `label` (a label ending in `...`: starts
        with the rest, as `Assess trace (15 assessments)` does)."""
        script = (
            "(t => { const p = t.endsWith('...'); const s = p ? t.slice(0, -3) : t; "
            "const hit = v => p ? (v || '').startsWith(s) : v === s; "
            "const b = Array.from(document.querySelectorAll('button')).find(b => hit(b.innerText.trim()) "
            "|| hit(b.getAttribute('aria-label'))); if (b) { b.click(); return true } return false })"
        )
        found = self.call("Runtime.evaluate", expression=f"{script}({json.dumps(label)})", returnByValue=True)
        return bool(found.get("result", {}).get("value"))

    def run(self, script: str) -> object:
        return self.call("Runtime.evaluate", expression=script, returnByValue=True).get("result", {}).get("value")

    def open(self, url: str, clicks: tuple[str, ...], settle_s: float) -> None:
        self.call("Page.navigate", url=url)
        time.sleep(settle_s)  # the UI renders from its API fetches
        for label in ("Got it", "Close", *clicks):  # first-visit tips, the assistant panel, then ours
            self.click(label)
            time.sleep(2)

    def give_verdict(self, value: bool, rationale: str) -> None:
        """In the open trace's Assessments panel: a Human feedback `task_success` of `value`."""
        # Radix menus open on pointerdown, not on click.
        self.run(
            "document.querySelector('button[aria-haspopup=menu][data-component-id=\"shared.model-trace-explorer."
            "add-feedback\"]').dispatchEvent(new PointerEvent('pointerdown', {bubbles: true, button: 0, "
            "pointerType: 'mouse'}))"
        )
        time.sleep(2)
        self.run(
            "Array.from(document.querySelectorAll('[role=menuitem]')).find(e => e.innerText.trim() === "
            "'Human feedback').click()"
        )
        time.sleep(2)
        fields = '[data-component-id="shared.model-trace-explorer.assessment-{}"]'
        self.run(f"document.querySelector('{fields.format('name-typeahead.input')}').focus()")
        self.call("Input.insertText", text="task_success")  # typed, so React sees it
        self.run(f"document.querySelector('{fields.format('rationale-input')}').focus()")
        time.sleep(1)
        picked = self.run(
            "(() => { const r = Array.from(document.querySelectorAll('input[type=radio]')).find(r => r.value === "
            f"'{str(value).lower()}'); if (r) r.click(); return !!r }})()"
        )
        if not picked:
            raise SystemExit("the assessment form has no boolean value to pick")
        self.call("Input.insertText", text=rationale)
        time.sleep(1)
        if not self.click("Create"):
            raise SystemExit("the assessment form has no Create button")
        time.sleep(4)

    def capture(self, target: Path) -> None:
        png = self.call("Page.captureScreenshot", format="png")["data"]
        target.write_bytes(base64.b64decode(png))
        print(f"{target} ({target.stat().st_size // 1024} KiB)")

    def close(self) -> None:
        self.ws.close()
        os.killpg(self.proc.pid, signal.SIGTERM)  # the browser's own process group, started here
        self.proc.wait(timeout=30)
        self.profile.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "screenshots")
    parser.add_argument("--keep", type=Path, default=None, help="home folder to use and keep (default: temporary)")
    parser.add_argument("--settle-s", type=float, default=15.0, help="seconds a page gets to render")
    args = parser.parse_args(argv)

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        parser.error("chromium not found: apt-get install -y chromium")
    root = (args.keep or Path(tempfile.mkdtemp(prefix="retrain-review-shots-")) / "home").resolve()
    summary = prepare_home(root)
    experiment = summary["experiment_id"]

    from tracking.registry import mlflow_client

    client = mlflow_client(f"sqlite:///{root / 'mlflow.db'}")
    traces = client.search_traces(locations=[experiment], max_results=50, include_spans=False)
    # The trace to show: a failed conversation whose replay worked, so it carries the judge's numbers.
    shown = next(
        t
        for t in sorted(traces, key=lambda t: t.info.tags["interaction_id"])
        if t.info.tags.get("outcome") == "failed" and "replay_error" not in t.info.tags
    )
    args.out.mkdir(parents=True, exist_ok=True)
    with MlflowServer(root) as server:
        base = f"{server.url}/#/experiments/{experiment}/traces"
        trace_url = f"{base}?selectedEvaluationId={shown.info.trace_id}"
        browser = Chromium(chromium)
        try:
            browser.open(trace_url, ("Assess trace...",), args.settle_s)
            browser.give_verdict(False, "the agent did not do what the customer asked")
            browser.open(base, (), args.settle_s)
            browser.capture(args.out / "review-traces.png")
            browser.open(trace_url, ("Assess trace...",), args.settle_s)
            browser.capture(args.out / "review-trace.png")
        finally:
            browser.close()
    from orchestration.cli import main as retrain

    return retrain(["review", "import", "--from-mlflow", "--week", WEEK, "--by", "ann"])


if __name__ == "__main__":
    raise SystemExit(main())
