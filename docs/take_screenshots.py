"""Regenerate the Dagster UI screenshots in docs/screenshots/ (see docs/UI.md).

    .venv/bin/python docs/take_screenshots.py [--home DIR] [--reuse] [--out docs/screenshots]
    .venv/bin/python docs/take_screenshots.py --home .retrain --reuse   # after `make demo`: its runs

Needs Debian's headless Chromium (`apt-get install -y chromium`). Steps:
1. a fresh home (default: a temporary folder) with two weeks of simulated traffic;
2. one `weekly_retrain` run of week 2026-11-16 on the tiny model with a permissive gate policy,
   so every asset materialises and a champion gets registered (a few minutes on 2 cores);
   `--reuse` skips 1-2 when `--home` already holds such a run;
3. `dagster-webserver` on 127.0.0.1 over that home, and Chromium's `--screenshot` of the global
   asset lineage (groups), the training group's assets, the run page, the promotion gate
   asset page and raw_interactions' checks.
Chromium runs with a fresh profile and background networking off, and only ever loads
127.0.0.1 pages.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from orchestration import environment

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

WEEK = "2026-11-16"
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

LATEST_RUN = """
query { runsOrError(filter: {pipelineName: "weekly_retrain"}, limit: 1) {
  ... on Runs { results { runId status } } } }
"""


def prepare_home(root: Path) -> str:
    """Simulate traffic and run one week; return the Dagster run id."""
    import os

    os.environ["RETRAIN_HOME"] = str(root)
    from domains.retail.traffic.simulate import simulate
    from orchestration.cli.demo import PERMISSIVE_GATES, demo_run_config, permissive_floors
    from orchestration.runner import run_week

    home = environment.home().ensure()
    simulate(
        days=14,
        per_day=30,
        seed=11,
        out_dir=str(home.landing),
        start=date.fromisoformat(WEEK),
        label_share=0.6,
        n_users=80,
    )
    # CI-sized stages and permissive gates, so the screenshot shows a registered champion (the
    # real policy lives in the asset configs' defaults); the gates are this deployment's floors
    # too, since a run config may not loosen a gate below them.
    permissive_floors(home.dagster_home)
    run = run_week(WEEK, run_config=demo_run_config("ci", PERMISSIVE_GATES), home=home)
    print(f"week {run.week}: run {run.run_id} success={run.success} materialized={run.materialized}")
    return run.run_id


def hide_welcome_dialog(config: Path) -> None:
    """Turn off the UI's first-visit 'Join the Dagster community' dialog (it covers every page)."""
    text = config.read_text()
    if "\nnux:" not in text:
        config.write_text(text.rstrip("\n") + "\nnux:\n  enabled: false\n")


def screenshot(chromium: str, url: str, target: Path, budget_ms: int) -> None:
    """One PNG of `url` after `budget_ms` of virtual time (the UI renders from GraphQL fetches)."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget_ms}",
                f"--screenshot={target}",
                url,
            ],
            check=True,
            timeout=180,
            capture_output=True,
        )
    print(f"{target} ({target.stat().st_size // 1024} KiB) <- {url}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None, help="home folder (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true", help="the home already holds a weekly_retrain run")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "screenshots")
    parser.add_argument("--budget-ms", type=int, default=20000, help="Chromium virtual time per page")
    args = parser.parse_args(argv)

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        parser.error("chromium not found: apt-get install -y chromium")
    root = (args.home or Path(tempfile.mkdtemp(prefix="retrain-shots-")) / "home").resolve()
    if not args.reuse:
        prepare_home(root)

    from dataplane.home import Home
    from orchestration.instance import prepare_dagster_home
    from tests.helpers_webserver import running_servers

    dagster_home = prepare_dagster_home(Home.at(root).ensure())
    hide_welcome_dialog(dagster_home / "dagster.yaml")
    args.out.mkdir(parents=True, exist_ok=True)
    with running_servers(root, dagster_home, root / "server-logs", daemon=False) as (server, location):
        [run] = server.graphql(LATEST_RUN)["runsOrError"]["results"]
        groups = f"{server.url}/locations/{location}/asset-groups"
        pages = {
            "asset-lineage-groups.png": f"{server.url}/asset-groups",
            "training-group.png": f"{groups}/training",
            "weekly-retrain-run.png": f"{server.url}/runs/{run['runId']}",
            "promotion-gate-asset.png": f"{server.url}/assets/promotion_gate?partition={WEEK}",
            "raw-interactions-checks.png": f"{server.url}/assets/raw_interactions?view=checks",
        }
        for name, url in pages.items():
            screenshot(chromium, url, args.out / name, args.budget_ms)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
