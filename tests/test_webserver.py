"""The Dagster UI's backend on a real home: `dagster-webserver -w workspace.yaml` on 127.0.0.1.

Reads the asset graph, jobs, schedules and sensors over GraphQL, then launches one partition of
`raw_interactions` (a cheap selection of `weekly_retrain`, not the training steps) and follows the
run to success over GraphQL; the DuckDB store must then hold the simulated interactions.

The home's dagster.yaml is the product's own (orchestration/instance.py): its run queue limits
weekly retrains to one at a time, so a run launched from the UI waits in the queue until
`dagster-daemon` picks it up. The daemon therefore runs beside the webserver here, which also
exercises the queue users rely on.
"""

from __future__ import annotations

import time
from datetime import date

import pytest

from orchestration import environment
from tests.helpers_webserver import running_servers

pytestmark = [pytest.mark.server, pytest.mark.slow]

WEEK = "2026-01-05"  # the first partition (RETRAIN_START_DATE default)
DAYS, PER_DAY = 7, 10
RUN_BOUND_S = 240

ASSET_GROUPS = {
    "raw_interactions": "data",
    "interaction_window": "data",
    "window_splits": "data",
    "policy_base": "training",
    "grpo_candidate": "training",
    "calibration_report": "evaluation",
    "shadow_report": "evaluation",
    "promotion_gate": "evaluation",
    "first_champion": "registry",
    "registered_model": "registry",
    "live_watch": "watch",
}
JOBS = {"live_watch": "daily_watch"}  # every other asset belongs to weekly_retrain

REPOSITORIES = """
query { repositoriesOrError { __typename ... on RepositoryConnection { nodes {
  name location { name } jobs { name } schedules { name cronSchedule } sensors { name } } } } }
"""

ASSET_NODES = """
query { assetNodes { assetKey { path } groupName jobNames isPartitioned
  assetChecksOrError { __typename ... on AssetChecks { checks { name blocking } } } } }
"""

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on Error { message }
  }
}
"""

RUN = """
query Run($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { status tags { key value }
      assetMaterializations { assetKey { path } partition
        metadataEntries { label ... on IntMetadataEntry { intValue } } } }
    ... on Error { message }
  }
}
"""

FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A home with a week of simulated traffic, and the webserver + daemon running on it."""
    from domains.retail.traffic.simulate import simulate
    from orchestration.instance import prepare_dagster_home

    root = tmp_path_factory.mktemp("webserver")
    mp = pytest.MonkeyPatch()
    mp.setenv("RETRAIN_HOME", str(root / "home"))
    # The landing sensor would ingest the landing folder before the run launched below does; this
    # module follows the weekly run's own ingest, so the live watch stays switched off here.
    mp.setenv("RETRAIN_LIVE_WATCH", "off")
    try:
        home = environment.home().ensure()
        dagster_home = prepare_dagster_home(home)  # also exports DAGSTER_HOME; undone below
        simulate(
            days=DAYS,
            per_day=PER_DAY,
            seed=5,
            out_dir=str(home.landing),
            start=date.fromisoformat(WEEK),
            label_share=0.5,
            n_users=40,
        )
        with running_servers(home.root, dagster_home, root / "logs") as (server, location):
            yield home, server, location
    finally:
        mp.undo()


def test_graphql_shows_the_asset_graph_jobs_schedules_and_sensors(served):
    _, server, location = served
    [repo] = server.graphql(REPOSITORIES)["repositoriesOrError"]["nodes"]
    assert repo["location"]["name"] == location
    assert {"weekly_retrain", "daily_watch"} <= {j["name"] for j in repo["jobs"]}
    assert {s["name"]: s["cronSchedule"] for s in repo["schedules"]} == {
        "weekly_retrain_schedule": "0 3 * * 1",
        "daily_watch_schedule": "30 0 * * *",
    }
    assert {s["name"] for s in repo["sensors"]} == {"retrain_failure_incident", "champion_health", "landing_ingest"}

    nodes = server.graphql(ASSET_NODES)["assetNodes"]
    assert {"/".join(n["assetKey"]["path"]): n["groupName"] for n in nodes} == ASSET_GROUPS
    for node in nodes:
        job = JOBS.get("/".join(node["assetKey"]["path"]), "weekly_retrain")
        assert job in node["jobNames"] and node["isPartitioned"], node
    checks = {
        "/".join(n["assetKey"]["path"]): {c["name"]: c["blocking"] for c in n["assetChecksOrError"]["checks"]}
        for n in nodes
    }
    assert checks["raw_interactions"] == {"no_row_lost": True}
    assert {"window_gx_suite", "window_no_pii"} <= set(checks["interaction_window"])


def _wait_for_run(server, run_id: str, bound_s: float) -> dict:
    deadline, seen = time.monotonic() + bound_s, []
    while time.monotonic() < deadline:
        run = server.graphql(RUN, {"runId": run_id})["runOrError"]
        assert run["__typename"] == "Run", run
        if not seen or seen[-1] != run["status"]:
            seen.append(run["status"])
        if run["status"] in FINISHED:
            return run
        time.sleep(2)
    pytest.fail(f"run {run_id} not finished after {bound_s}s; statuses seen {seen}\n{server.log_tail()}")


def test_one_partition_launched_over_graphql_ingests_into_duckdb(served):
    from dataplane.store import open_store

    home, server, location = served
    params = {
        "selector": {
            "repositoryLocationName": location,
            "repositoryName": "__repository__",
            "jobName": "weekly_retrain",
            "assetSelection": [{"path": ["raw_interactions"]}],
        },
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": WEEK}]},
        "runConfigData": {},
    }
    launched = server.graphql(LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run = _wait_for_run(server, launched["run"]["runId"], RUN_BOUND_S)
    assert run["status"] == "SUCCESS", f"{run}\n{server.log_tail()}"
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags["dagster/partition"] == WEEK and tags["agent-retrain/pipeline"] == "weekly"

    [materialization] = run["assetMaterializations"]  # only the selected asset ran
    assert materialization["assetKey"]["path"] == ["raw_interactions"] and materialization["partition"] == WEEK
    meta = {e["label"]: e.get("intValue") for e in materialization["metadataEntries"]}
    assert meta["rows_read"] == DAYS * PER_DAY

    with open_store(str(home.duckdb_path), read_only=True) as con:
        stored = con.execute("SELECT count(*) FROM interactions").fetchone()[0]
        quarantined = con.execute("SELECT count(*) FROM quarantine").fetchone()[0]
    assert stored > 0 and stored == meta["accepted"] == meta["interactions_stored"]
    assert stored + quarantined == DAYS * PER_DAY
