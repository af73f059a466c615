"""The live watch on real components: files landing in `<home>/landing`, the landing sensor
ingesting them into DuckDB, the `daily_watch` job judging each day a registered champion served,
the pause a drifting day puts on promotions, and `retrain resume` lifting it.

The champion is the scripted production agent (the simulator's), registered in a sqlite MLflow
store with the tool-call mix it showed on a separate sample of conversations as its evaluated
mix. Days carry 500 interactions: the default `min_interactions` (400) needs that many for drift
and rewards to be judged at all.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import dagster as dg
import pytest

from assets import data
from assets.pause_log import InstancePauseLog
from assets.resources import DuckDBStore, HomeResource, MLflowTracking
from dataplane.hashing import model_digest
from dataplane.incidents import list_incidents
from dataplane.landing import ingest_landed
from dataplane.store import open_store
from domains.retail.traffic.simulate import simulate
from evaluation.decision import ChampionLineage
from evaluation.gates import evaluate_gates
from monitoring.health import check_champion
from monitoring.pause import active_pause, lifted_pauses
from monitoring.watch import judge_day, served_tool_mix
from monitoring.watch_alarms import ACTION_DRIFT_INCIDENT, REWARD_SHIFT_INCIDENT
from monitoring.watch_log import WATCH_EXPERIMENT
from orchestration.cli import main
from orchestration.definitions import build_definitions
from orchestration.sensors import landing_ingest
from tests.helpers_gates import gate_inputs
from tests.helpers_promotion import fake_model, run_promotion
from tests.helpers_traffic import day_files, read_records
from tracking.registry import canary_info, champion_info, mlflow_client, register_candidate

pytestmark = pytest.mark.slow

DAYS = ["2026-11-23", "2026-11-24", "2026-11-25"]  # the last one drifts
WEEK = "2026-11-23"


def _resources(home) -> dict:
    return {"home": HomeResource(root=str(home.root)), "store": DuckDBStore(), "mlflow": MLflowTracking()}


def _land(home, days: int, start: str, seed: int, **kwargs) -> None:
    simulate(
        days=days,
        per_day=kwargs.pop("per_day", 500),
        seed=seed,
        out_dir=home.landing,
        start=date.fromisoformat(start),
        policy_version="retail-agent/1",
        **kwargs,
    )


@pytest.fixture()
def champion(home, tmp_path):
    """The scripted agent as champion v1, tagged with the mix it showed on 1,500 other conversations."""
    sample = tmp_path / "evaluation-sample"
    simulate(days=1, per_day=1500, seed=99, out_dir=sample, start=date(2026, 11, 1))
    mix = served_tool_mix(judge_day(read_records(day_files(sample)))[0])
    model = fake_model(tmp_path / "champion")
    lineage = ChampionLineage(
        shadow_success=0.8, violation_rate=0.05, evaluated_tool_mix=mix, model_digest=model_digest(model)
    )
    register_candidate(
        home.mlflow_uri,
        model,
        "2026-11-16",
        lineage,
        evaluate_gates(gate_inputs("better")),
        artifact_location=home.mlflow_artifacts.as_uri(),
        moved_by="test",
    )
    return home


def _watch(instance, day: str) -> dg.ExecuteInProcessResult:
    result = build_definitions().resolve_job_def("daily_watch").execute_in_process(partition_key=day, instance=instance)
    assert result.success
    return result


def _checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _metadata(result) -> dict:
    [event] = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_the_landing_sensor_ingests_new_files_and_asks_for_their_days(home, instance):
    context = dg.build_sensor_context(instance=instance, resources=_resources(home))
    skipped = landing_ingest(context)
    assert isinstance(skipped, dg.SkipReason) and "no new files" in skipped.skip_message

    _land(home, days=2, start="2026-11-23", seed=5, per_day=20)
    result = landing_ingest(context)
    assert sorted(r.partition_key for r in result.run_requests) == ["2026-11-23", "2026-11-24"]
    con = open_store(home.duckdb_path, read_only=True)
    assert con.execute("SELECT count(*) FROM interactions").fetchone()[0] == 40
    con.close()
    # Nothing new: no second ingest, no second request.
    assert isinstance(landing_ingest(context), dg.SkipReason)

    # A file of a later day lands: only it is read, only its day is asked for.
    _land(home, days=1, start="2026-11-25", seed=6, per_day=20)
    result = landing_ingest(context)
    assert [r.partition_key for r in result.run_requests] == ["2026-11-25"]
    assert json.loads(result.cursor)["days"] == {"2026-11-25": 20}
    # Today's traffic (what of it is not yet in the future) is ingested at once, but today is
    # watched only once it is over.
    _land(home, days=1, start=datetime.now(UTC).date().isoformat(), seed=7, per_day=3)
    result = landing_ingest(context)
    assert not result.run_requests and "no finished day" in result.skip_reason.skip_message


def test_a_backlog_of_landed_files_is_ingested_a_few_files_at_a_time(home):
    _land(home, days=3, start="2026-11-23", seed=4, per_day=5)
    batches = [ingest_landed(home.duckdb_path, home.landing, max_files=2) for _ in range(3)]
    assert [len(b.files) for b in batches] == [2, 1, 0]
    assert [sorted(b.days) for b in batches] == [["2026-11-23", "2026-11-24"], ["2026-11-25"], []]
    assert sum(b.summary.accepted for b in batches) == 15


def test_rows_the_sensor_quarantined_still_count_in_the_weekly_quarantine_rate(home, instance):
    """By Monday the sensor has ingested the week: the weekly run finds nothing new, and its
    blocking quarantine-rate check must still see the bad rows of the week."""
    _land(home, days=2, start="2026-11-23", seed=10, per_day=20)
    (home.landing / "broken.jsonl").write_text("not json\n" * 10)
    landing_ingest(dg.build_sensor_context(instance=instance, resources=_resources(home)))
    result = dg.materialize(
        [data.raw_interactions, data.interaction_window],
        partition_key=WEEK,
        instance=instance,
        resources=_resources(home),
        raise_on_error=False,
    )
    assert result.output_for_node("raw_interactions").ingest.read == 0  # all ingested by the sensor
    rate = _checks(result)["window_quarantine_rate"]
    assert not rate.passed and rate.metadata["quarantined"].value == 10 and rate.metadata["read"].value == 50


def test_the_health_breaker_reads_the_day_just_ingested(champion, instance):
    home = champion
    _land(home, days=2, start="2026-11-23", seed=8, per_day=40)
    landing_ingest(dg.build_sensor_context(instance=instance, resources=_resources(home)))
    outcome = check_champion(home, str(home.duckdb_path), home.mlflow_uri, "retail-agent")
    assert outcome["latest"].startswith("2026-11-24")
    _land(home, days=1, start="2026-11-25", seed=9, per_day=40)
    landing_ingest(dg.build_sensor_context(instance=instance, resources=_resources(home)))
    outcome = check_champion(home, str(home.duckdb_path), home.mlflow_uri, "retail-agent")
    assert outcome["latest"].startswith("2026-11-25") and outcome["n"] == 120


def test_a_drifting_day_pauses_promotions_until_a_person_approves(champion, instance, tmp_path, capsys):
    home = champion
    _land(home, days=3, start=DAYS[0], seed=31, drift={"action_drift_day": 2})
    result = landing_ingest(dg.build_sensor_context(instance=instance, resources=_resources(home)))
    assert [r.partition_key for r in result.run_requests] == DAYS

    first, normal = _watch(instance, DAYS[0]), _watch(instance, DAYS[1])
    for run in (first, normal):
        meta, checks = _metadata(run), _checks(run)
        assert checks["action_drift"].passed, meta["action_drift"]
        assert meta["promotions_paused"] is False and meta["interactions"] == 500
        assert "| get_order_details |" in meta["tool_mix"] and "█" in meta["reward_histogram"]
    assert _checks(first)["reward_distribution"].metadata["status"].value == "not_measured"  # it is the reference
    assert _checks(normal)["reward_distribution"].passed and _metadata(normal)["reference_day"] == DAYS[0]
    pauses = InstancePauseLog(instance)  # where the watch records its pause and `retrain resume` lifts it
    assert list_incidents(home) == [] and active_pause(pauses) is None

    drifted = _watch(instance, DAYS[2])
    meta, checks = _metadata(drifted), _checks(drifted)
    assert not checks["action_drift"].passed and checks["action_drift"].metadata["status"].value == "alarm"
    assert checks["action_drift"].metadata["value"].value > 0.05
    assert not checks["reward_distribution"].passed  # handing half the customers over costs reward too
    assert {i["kind"] for i in list_incidents(home)} == {ACTION_DRIFT_INCIDENT, REWARD_SHIFT_INCIDENT}
    pause = active_pause(pauses)
    assert pause.since == DAYS[2] and meta["promotions_paused"] is True and meta["pause"] == pause.summary

    client = mlflow_client(home.mlflow_uri)
    [run] = client.search_runs([client.get_experiment_by_name(WATCH_EXPERIMENT).experiment_id])
    history = client.get_metric_history(run.info.run_id, "watch/action_drift_tv")
    assert len({m.step for m in history}) == 3 and max(history, key=lambda m: m.step).value == pause.value

    # The week's candidate beats the champion on every gate, yet the week is held.
    week = run_promotion(home, instance, WEEK, "better", tmp_path)
    gate = _checks(week)["gate_live_watch"]
    assert not gate.passed and gate.metadata["verdict"].value == "hold"
    assert gate.metadata["detail"].value.startswith(f"live watch paused since {DAYS[2]}: action drift TV=")
    assert champion_info(home.mlflow_uri).version == 1

    # Approving the week does not lift the pause: that is `retrain resume`'s, with who and why.
    capsys.readouterr()
    assert main(["approve", "--week", WEEK, "--by", "alice"]) == 2
    refused = capsys.readouterr().err
    assert "live_watch held" in refused and "retrain resume --by NAME --reason TEXT" in refused
    assert active_pause(pauses) == pause and champion_info(home.mlflow_uri).version == 1

    assert main(["resume", "--by", "bob", "--reason", "read the day: the queue was down, hand-overs were right"]) == 0
    resumed = json.loads(capsys.readouterr().out)["resumed"]
    assert resumed["lifted_by"] == "bob" and resumed["since"] == DAYS[2] and active_pause(pauses) is None
    assert lifted_pauses(pauses)[-1]["reason"] == "read the day: the queue was down, hand-overs were right"

    assert main(["approve", "--week", WEEK, "--by", "alice"]) == 0
    approved = json.loads(capsys.readouterr().out)
    assert approved["version"] == 2 and approved["approved_by"] == "alice"
    # Registered as the canary beside the champion, as every passing week is.
    assert canary_info(home.mlflow_uri).version == 2 and champion_info(home.mlflow_uri).version == 1
    # Nothing is paused now: resuming has nothing to lift, and says so.
    assert main(["resume", "--by", "bob", "--reason", "again"]) == 2
    assert "not paused" in capsys.readouterr().err
