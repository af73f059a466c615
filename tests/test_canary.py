"""Progressive delivery: a candidate that passed every gate serves as `canary` beside the champion,
on a seeded share of the traffic, until the health sensor's canary check promotes or drops it.

Real components throughout: a sqlite MLflow store and registry in tmp_path, traffic simulated by
`domains.retail.traffic.simulate` (scripted policies and the scripted agent) ingested into DuckDB,
incidents written to the home folder.
"""

from __future__ import annotations

import json
from datetime import date

import dagster as dg
import numpy as np
import pytest
from safetensors.numpy import save_file

from assets.resources import DuckDBStore, HomeResource, MLflowTracking
from dataplane.hashing import model_digest
from dataplane.incidents import list_incidents
from dataplane.ingest import ingest_paths
from domains.retail.traffic.serving import serves_canary
from domains.retail.traffic.simulate import DEGRADED_MISTAKE_RATES, TrafficConfigError, simulate
from evaluation.decision import ChampionLineage
from evaluation.gates import evaluate_gates
from monitoring.canary import CanaryConfigError, CanarySettings, assess_canary, check_canary
from orchestration import environment
from orchestration.sensors import champion_health
from tests.helpers_gates import gate_inputs
from tests.helpers_traffic import day_files, generated_world, read_records
from tracking.canary import CANARY_EXPERIMENT
from tracking.registry import (
    CANARY,
    CANARY_DROPPED_TAG,
    CHAMPION,
    PREVIOUS,
    NoCanaryError,
    StaleCandidateError,
    alias_moves,
    canary_info,
    drop_canary,
    mlflow_client,
    promote_canary,
    register_candidate,
)
from training.policies import ScriptedPolicy

MODEL = "retail-agent"
CHAMPION_V, CANARY_V = f"{MODEL}/1", f"{MODEL}/2"
# Small enough for a test, large enough that the day-clustered interval has days to resample.
QUICK = CanarySettings(min_conversations=60, min_days=5)


def _register(
    home, tmp_path, week: str, serve_as: str = CHAMPION, moved_by: str = "test", evaluated_tool_mix=None
) -> int:
    model = tmp_path / f"model-{week}"
    model.mkdir(parents=True, exist_ok=True)
    save_file({"w": np.arange(6, dtype=np.float32) + len(week)}, str(model / "model.safetensors"))
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    (model / "config.json").write_text("{}")  # what marks a fetched folder as a model (local_champion)
    return register_candidate(
        home.mlflow_uri,
        model,
        week,
        ChampionLineage(
            shadow_success=0.9,
            violation_rate=0.02,
            model_digest=model_digest(model),
            evaluated_tool_mix=evaluated_tool_mix,
        ),
        evaluate_gates(gate_inputs("better")),
        artifact_location=home.mlflow_artifacts.as_uri(),
        moved_by=moved_by,
        serve_as=serve_as,
    )


def _aliases(home) -> dict[str, int]:
    return {a: int(v) for a, v in mlflow_client(home.mlflow_uri).get_registered_model(MODEL).aliases.items()}


@pytest.fixture()
def champion_and_canary(home, tmp_path):
    """v1 the champion (week 2026-11-02), v2 the canary a passing week 2026-11-09 registered."""
    _register(home, tmp_path, "2026-11-02")
    _register(home, tmp_path, "2026-11-09", CANARY, moved_by="registered_model asset: gates promoted week 2026-11-09")
    return home


# ---- the registry: canary, not champion ---------------------------------------------------------


def test_a_passing_candidate_becomes_the_canary_not_the_champion(champion_and_canary, tmp_path):
    home = champion_and_canary
    assert _aliases(home) == {CHAMPION: 1, CANARY: 2}
    canary = canary_info(home.mlflow_uri)
    assert canary.version == 2 and canary.week == "2026-11-09" and canary.model_uri == f"models:/{MODEL}@canary"
    assert canary.tags["canary_set_by"].startswith("registered_model asset")
    assert "promoted" not in canary.tags  # serving beside the champion is not a promotion
    assert alias_moves(home.mlflow_uri)[-1]["alias"] == CANARY and alias_moves(home.mlflow_uri)[-1]["version"] == 2
    # Re-running the week finds its version and moves nothing.
    assert _register(home, tmp_path, "2026-11-09", CANARY) == 2 and _aliases(home) == {CHAMPION: 1, CANARY: 2}


def test_the_first_candidate_with_no_champion_becomes_champion_at_once(home, tmp_path):
    # Nothing serves to compare a canary with: the candidate serves everything.
    assert _register(home, tmp_path, "2026-11-02", CANARY) == 1
    assert _aliases(home) == {CHAMPION: 1} and canary_info(home.mlflow_uri) is None


def test_a_later_canary_replaces_an_earlier_one_never_the_reverse(champion_and_canary, tmp_path):
    home = champion_and_canary
    assert _register(home, tmp_path, "2026-11-16", CANARY) == 3
    assert _aliases(home) == {CHAMPION: 1, CANARY: 3}
    replaced = mlflow_client(home.mlflow_uri).get_model_version(MODEL, "2").tags
    assert replaced[CANARY_DROPPED_TAG] == "replaced by v3 (week 2026-11-16)"
    assert _register(home, tmp_path, "2026-11-09", CANARY) == 2 and _aliases(home)[CANARY] == 3  # not back
    with pytest.raises(StaleCandidateError, match="canary v3 is from week 2026-11-16"):
        _register(home, tmp_path, "2026-11-05", CANARY)


def test_promoting_the_canary_keeps_the_previous_champion_and_the_mover(champion_and_canary):
    home = champion_and_canary
    assert promote_canary(home.mlflow_uri, moved_by="health sensor (canary check): not worse") == 2
    assert _aliases(home) == {CHAMPION: 2, PREVIOUS: 1}
    moves = alias_moves(home.mlflow_uri)[-3:]
    assert [(m["alias"], m["version"]) for m in moves] == [(PREVIOUS, 1), (CHAMPION, 2), (CANARY, None)]
    assert {m["by"] for m in moves} == {"health sensor (canary check): not worse"}
    with pytest.raises(NoCanaryError):
        promote_canary(home.mlflow_uri, moved_by="again")


def test_a_dropped_canary_never_comes_back_when_its_week_is_rerun(champion_and_canary, tmp_path):
    home = champion_and_canary
    assert drop_canary(home.mlflow_uri, moved_by="ops", reason="worse") == 2
    assert _aliases(home) == {CHAMPION: 1}
    assert _register(home, tmp_path, "2026-11-09", CANARY) == 2 and _aliases(home) == {CHAMPION: 1}
    assert alias_moves(home.mlflow_uri)[-1] == {**alias_moves(home.mlflow_uri)[-1], "alias": CANARY, "version": None}


# ---- the traffic split ---------------------------------------------------------------------------


def test_the_canary_draw_is_seeded_and_at_the_configured_share():
    draws = [serves_canary(7, "2026-11-02", i, 0.10) for i in range(20_000)]
    assert draws == [serves_canary(7, "2026-11-02", i, 0.10) for i in range(20_000)]
    assert abs(sum(draws) / len(draws) - 0.10) < 0.01
    assert not any(serves_canary(7, "2026-11-02", i, 0.0) for i in range(1000))
    assert draws != [serves_canary(8, "2026-11-02", i, 0.10) for i in range(20_000)]  # another seed, another split
    assert sum(serves_canary(7, "2026-11-03", i, 0.30) for i in range(20_000)) / 20_000 == pytest.approx(0.3, abs=0.01)


def _transfer(summary: str) -> ScriptedPolicy:
    return ScriptedPolicy(lambda conv: {"name": "transfer_to_human_agents", "arguments": {"summary": summary}})


def _served(out, canary: bool, share: float = 0.25):
    args = {"days": 2, "per_day": 20, "seed": 5, "out_dir": out, "world": generated_world(), "start": "2026-11-02"}
    arm = {"canary": _transfer("canary"), "canary_version": CANARY_V, "canary_share": share} if canary else {}
    simulate(
        **args,
        intent_mix={"order_status": 1.0},
        level=1,
        policy=_transfer("champion"),
        policy_version=CHAMPION_V,
        **arm,
    )
    return read_records(day_files(out))


def test_served_traffic_sends_the_drawn_share_to_the_canary_and_records_who_served(tmp_path):
    records = _served(tmp_path / "a", canary=True)
    flags = [serves_canary(5, r["started_at"][:10], int(r["interaction_id"].rsplit("-", 1)[1]), 0.25) for r in records]
    assert 0 < sum(flags) < len(records)
    for record, to_canary in zip(records, flags):
        assert record["policy_version"] == (CANARY_V if to_canary else CHAMPION_V)
        # The model named in the record is the one that answered.
        assert record["messages"][2]["tool_calls"][0]["arguments"]["summary"] == ("canary" if to_canary else "champion")
    # Deterministic: the same arguments give the same bytes.
    _served(tmp_path / "b", canary=True)
    assert [p.read_bytes() for p in day_files(tmp_path / "a")] == [p.read_bytes() for p in day_files(tmp_path / "b")]
    # The champion's conversations are the ones it would have held without a canary.
    alone = {r["interaction_id"]: r for r in _served(tmp_path / "c", canary=False)}
    assert all(r == alone[r["interaction_id"]] for r, flag in zip(records, flags) if not flag)
    assert all(r["customer_id"] == alone[r["interaction_id"]]["customer_id"] for r in records)


def test_a_canary_needs_a_champion_policy_and_a_version(tmp_path):
    with pytest.raises(TrafficConfigError, match="canary_version"):
        simulate(days=1, per_day=2, out_dir=tmp_path, policy=_transfer("a"), level=1, canary=_transfer("b"))
    with pytest.raises(TrafficConfigError, match="need a canary policy"):
        simulate(days=1, per_day=2, out_dir=tmp_path, canary_share=0.1)


# ---- the assessment ------------------------------------------------------------------------------


def _traffic(home, tmp_path, version: str, degraded: bool, days: int, seed: int) -> None:
    out = tmp_path / f"traffic-{seed}"
    simulate(
        days=days,
        per_day=30,
        seed=seed,
        out_dir=str(out),
        start=date(2026, 11, 16),
        policy_version=version,
        n_users=80,
        mistake_rates=DEGRADED_MISTAKE_RATES if degraded else None,
    )
    ingest_paths(str(home.duckdb_path), [out])


def _check(home, settings=QUICK):
    return check_canary(home, str(home.duckdb_path), home.mlflow_uri, MODEL, settings, home.mlflow_artifacts.as_uri())


def test_a_better_canary_is_promoted_with_the_previous_champion_kept(champion_and_canary, tmp_path):
    home = champion_and_canary
    _traffic(home, tmp_path, CANARY_V, degraded=False, days=8, seed=1)
    _traffic(home, tmp_path, CHAMPION_V, degraded=True, days=8, seed=2)
    outcome = _check(home)
    assert outcome["action"] == "promote", outcome["reason"]
    verdict = outcome["verdict"]
    assert verdict["days"] == 8 and verdict["n_canary"] >= QUICK.min_conversations
    assert verdict["ci_low"] > -QUICK.margin and verdict["canary_success"] > verdict["champion_success"]
    assert _aliases(home) == {CHAMPION: 2, PREVIOUS: 1}
    assert alias_moves(home.mlflow_uri)[-2]["by"].startswith("health sensor (canary check): not worse")
    assert list_incidents(home) == []
    run = mlflow_client(home.mlflow_uri).get_run(outcome["mlflow_run_id"])
    assert run.data.tags["decision"] == "promote" and run.data.metrics["ci_low"] == pytest.approx(verdict["ci_low"])
    assert mlflow_client(home.mlflow_uri).get_experiment(run.info.experiment_id).name == CANARY_EXPERIMENT
    assert _check(home) == {"action": "none", "reason": "no canary"}


def test_a_worse_canary_is_dropped_with_an_incident_through_the_sensor(champion_and_canary, tmp_path, monkeypatch):
    home = champion_and_canary
    _traffic(home, tmp_path, CANARY_V, degraded=True, days=8, seed=3)
    _traffic(home, tmp_path, CHAMPION_V, degraded=False, days=8, seed=4)
    # The sensor reads the canary's settings from the environment, as a deployment sets them.
    monkeypatch.setenv(environment.CANARY_MIN_ENV, "60")
    context = dg.build_sensor_context(
        resources={"home": HomeResource(root=str(home.root)), "store": DuckDBStore(), "mlflow": MLflowTracking()}
    )
    result = champion_health(context)
    assert isinstance(result, dg.SensorResult)
    outcome = json.loads(result.skip_reason.skip_message)
    assert outcome["canary"]["action"] == "drop" and outcome["canary"]["canary"] == 2
    [observation] = result.asset_events
    assert observation.metadata["canary_decision"].value == "drop" and observation.metadata["ci_high"].value < 0
    assert _aliases(home) == {CHAMPION: 1}
    [incident] = list_incidents(home)
    assert incident["kind"] == "canary_dropped" and incident["evidence"]["verdict"]["canary"] == CANARY_V
    dropped = mlflow_client(home.mlflow_uri).get_model_version(MODEL, "2").tags
    assert dropped[CANARY_DROPPED_TAG].startswith("clearly worse") or "policy violations" in dropped[CANARY_DROPPED_TAG]
    assert alias_moves(home.mlflow_uri)[-1]["by"].startswith("health sensor (canary check)")


def test_too_few_canary_conversations_means_waiting(champion_and_canary, tmp_path):
    home = champion_and_canary
    _traffic(home, tmp_path, CANARY_V, degraded=True, days=2, seed=5)
    _traffic(home, tmp_path, CHAMPION_V, degraded=False, days=2, seed=6)
    outcome = _check(home)
    assert outcome["action"] == "wait" and "waiting for evidence" in outcome["reason"]
    assert outcome["verdict"]["ci_low"] is None  # nothing concluded, no interval computed
    assert _aliases(home) == {CHAMPION: 1, CANARY: 2} and list_incidents(home) == []
    # The same evidence judged again lands in the same MLflow run.
    assert _check(home)["mlflow_run_id"] == outcome["mlflow_run_id"]


def test_retrain_canary_shows_both_aliases_and_the_latest_decision(champion_and_canary, tmp_path, capsys):
    from orchestration.cli import main

    home = champion_and_canary
    assert main(["canary"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["champion"]["version"] == 1 and shown["canary"]["version"] == 2
    assert shown["canary"]["set_by"].startswith("registered_model asset") and shown["latest_decision"] is None
    _traffic(home, tmp_path, CANARY_V, degraded=False, days=2, seed=7)
    _traffic(home, tmp_path, CHAMPION_V, degraded=False, days=2, seed=8)
    run = _check(home)["mlflow_run_id"]
    assert main(["canary"]) == 0
    latest = json.loads(capsys.readouterr().out)["latest_decision"]
    assert latest["mlflow_run_id"] == run and latest["decision"] == "wait" and latest["canary_version"] == "2"


def test_a_busy_day_is_judged_on_an_even_spread_of_it(champion_and_canary, tmp_path):
    from monitoring.canary import canary_traffic

    home = champion_and_canary
    _traffic(home, tmp_path, CANARY_V, degraded=False, days=1, seed=9)
    _traffic(home, tmp_path, CHAMPION_V, degraded=False, days=1, seed=10)
    [(canary, champion)] = canary_traffic(str(home.duckdb_path), CANARY_V, CHAMPION_V, max_per_day=7).values()
    assert len(canary) == len(champion) == 6  # every 5th of the day's 30
    everything = canary_traffic(str(home.duckdb_path), CANARY_V, CHAMPION_V, max_per_day=200)
    [(all_canary, _)] = everything.values()
    assert canary == all_canary[::5] and len(all_canary) == 30
    assert canary_traffic(str(home.duckdb_path), "retail-agent/9", CHAMPION_V) == {}


def test_only_days_both_served_pair_up():
    verdict = assess_canary({"2026-11-16": ([], [])}, CANARY_V, CHAMPION_V, QUICK)
    assert verdict.decision == "wait" and verdict.days == 0 and verdict.n_canary == 0


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [({"share": 1.5}, "share"), ({"min_conversations": 0}, "min_conversations"), ({"margin": -0.1}, "margin")],
)
def test_canary_settings_out_of_range_are_refused(kwargs, says):
    with pytest.raises(CanaryConfigError, match=says):
        CanarySettings(**kwargs)


def test_the_canary_settings_come_from_the_environment():
    settings = environment.canary_settings({environment.CANARY_SHARE_ENV: "0.2", environment.CANARY_MIN_ENV: "80"})
    assert (settings.share, settings.min_conversations) == (0.2, 80)
    assert environment.canary_settings({}) == CanarySettings()


# ---- the demo ------------------------------------------------------------------------------------


@pytest.mark.slow  # the tiny model serves 21 conversations
def test_the_demo_serves_a_week_with_the_canary_beside_the_champion_and_judges_it(home, monkeypatch):
    from orchestration.cli.demo import _serve_week, canary_rows, judge_canary
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    # Any model folder serves here (its manifest's tokenizer format is not what this test is about).
    shipped = SHIPPED_AGENT_DIR
    for week, serve_as in (("2026-11-09", CHAMPION), ("2026-11-16", CANARY)):
        register_candidate(
            home.mlflow_uri,
            shipped,
            week,
            ChampionLineage(shadow_success=0.2, violation_rate=0.0, model_digest=model_digest(shipped)),
            evaluate_gates(gate_inputs("better")),
            artifact_location=home.mlflow_artifacts.as_uri(),
            moved_by="test",
            serve_as=serve_as,
        )
    monkeypatch.setenv(environment.CANARY_SHARE_ENV, "0.5")  # a few conversations a day, half to the canary
    served = _serve_week(home, date(2026, 11, 23), 3, home.mlflow_uri, MODEL)
    records = read_records(day_files(home.landing / "demo"))
    on_canary = [r for r in records if r["policy_version"] == CANARY_V]
    assert served["champion"] == CHAMPION_V and served["canary"] == CANARY_V
    assert len(records) == 21 and served["on_canary"] == len(on_canary) and 0 < len(on_canary) < 21
    check = judge_canary(home, home.mlflow_uri, MODEL, served)
    assert check["action"] == "wait" and _aliases(home) == {CHAMPION: 1, CANARY: 2}
    rows = "\n".join(canary_rows([served], [check]))
    assert f"champion {CHAMPION_V}, canary {CANARY_V} on {len(on_canary)} conversations" in rows
    assert "canary check: kept waiting (waiting for evidence" in rows


# ---- the week's update trains from the canary, judged against the champion ---------------------


def test_a_week_trains_from_the_canary_and_is_judged_against_the_champion(champion_and_canary, tmp_path):
    from assets.handoffs import PolicyBase
    from assets.training import GRPOTrainingConfig, PolicyConfig, _canary_start, _week_run_config
    from tracking.registry import champion_info
    from training.curriculum import WeekMix

    home = champion_and_canary
    champion = champion_info(home.mlflow_uri, MODEL)
    said = []
    path, version = _canary_start(PolicyConfig(), home.mlflow_uri, home.models, MODEL, champion, said.append)
    # The canary's registered weights, fetched like the champion's, and the log says who judges it.
    assert version == 2 and model_digest(path) == model_digest(tmp_path / "model-2026-11-09")
    assert said == [f"training from canary v2 at {path}; judged against champion v1"]
    # Switched off, or with no champion to judge against, training starts where the baseline is.
    off = PolicyConfig(start_from_canary=False)
    assert _canary_start(off, home.mlflow_uri, home.models, MODEL, champion, said.append) == (None, None)
    assert _canary_start(PolicyConfig(), home.mlflow_uri, home.models, MODEL, None, said.append) == (None, None)
    # A re-run of the canary's own week starts where that week started, not from its own output.
    rerun = _canary_start(PolicyConfig(), home.mlflow_uri, home.models, MODEL, champion, said.append, week="2026-11-09")
    assert rerun == (None, None)

    base = PolicyBase(path="/champion", source="champion", champion_version=1, start_path=path, canary_version=2)
    assert base.start == path and PolicyBase(path="/champion", source="champion").start == "/champion"
    run = _week_run_config(GRPOTrainingConfig(), base, tmp_path, [], "retail", WeekMix({"1": 1.0}, None), "by_level")
    assert run.model_path == path  # GRPO (and the supervised step before it) start at the canary


def test_with_no_canary_the_week_trains_from_the_champion(home, tmp_path):
    from assets.training import PolicyConfig, _canary_start
    from tracking.registry import champion_info

    _register(home, tmp_path, "2026-11-02")
    champion = champion_info(home.mlflow_uri, MODEL)
    assert _canary_start(PolicyConfig(), home.mlflow_uri, home.models, MODEL, champion, print) == (None, None)


def test_a_candidate_trained_from_the_canary_says_so_in_its_lineage(tmp_path):
    from assets.handoffs import GRPOCandidate, PolicyBase, ValidatedWindow, week_evidence
    from evaluation.decision import champion_lineage
    from evaluation.reports import CalibrationReport, ShadowReport
    from tests.helpers_gates import make_tasks
    from tests.helpers_promotion import fake_model, pair_report

    week = "2026-11-16"
    window = ValidatedWindow(week, week, 600, None, None, "ab" * 32, {}, {}, True, "")
    calibration = CalibrationReport(
        pair_report("better", "champion", make_tasks("cal", 20)), "v1", "cd" * 32, 20, [], [], {}, {}, ()
    )
    shadow = ShadowReport(pair_report("better", "champion", make_tasks("shadow", 20)), week, "ef" * 32, 20)
    candidate = GRPOCandidate(str(fake_model(tmp_path / "candidate")), "run", final_step=1)

    def lineage(role, start_path):
        base = PolicyBase("/champion", "champion", champion_version=1, start_path=start_path, canary_version=2)
        return champion_lineage(role, week_evidence(week, window, base, candidate, calibration, shadow), "dagster")

    assert (
        lineage("candidate", None).trained_from is None and "trained_from" not in lineage("candidate", None).to_tags()
    )
    tags = lineage("candidate", "/models/canary-v2").to_tags()
    assert tags["trained_from"] == "/models/canary-v2" and tags["base_model"] == "/champion"
    assert lineage("base", "/models/canary-v2").trained_from is None  # the baseline was not trained


# ---- behaviour: the live watch's checks, on the canary's traffic ---------------------------------


def _by_day(tmp_path, seed: int, days: int = 6) -> dict:
    """One simulated stretch of good traffic, served as both arms' records day by day."""
    out = tmp_path / f"arms-{seed}"
    simulate(days=days, per_day=20, seed=seed, out_dir=str(out), start=date(2026, 11, 16), n_users=80)
    by_day: dict[str, tuple[list, list]] = {}
    for path in day_files(out):
        records = read_records([path])
        by_day[path.parent.name] = (records[::2], records[1::2])
    return by_day


def test_a_canary_whose_tool_calls_drift_from_its_evaluation_is_dropped(tmp_path):
    from evaluation.metrics import distribution
    from monitoring.canary import _Arm
    from monitoring.watch import WatchSettings

    by_day = _by_day(tmp_path, seed=11)
    settings = CanarySettings(min_conversations=20, min_days=4, margin=0.5)
    watch = WatchSettings(min_interactions=20)
    arm = _Arm()
    for day, (ours, _) in by_day.items():
        arm.add(day, ours, [])
    served = distribution(arm.tools)
    # Evaluated as it serves: the canary acts as it was judged, and is not worse.
    same = assess_canary(by_day, CANARY_V, CHAMPION_V, settings, evaluated=served, watch=watch)
    assert same.decision == "promote", same.reason
    assert same.action_drift["status"] == "ok" and same.action_drift["value"] == pytest.approx(0.0, abs=1e-9)
    # Evaluated calling only the hand-over tool: what it serves is not what the gates judged.
    elsewhere = {"transfer_to_human_agents": 1.0}
    drifted = assess_canary(by_day, CANARY_V, CHAMPION_V, settings, evaluated=elsewhere, watch=watch)
    assert drifted.decision == "drop" and drifted.reason.startswith("the canary does not act as it was evaluated")
    assert drifted.action_drift["status"] == "alarm" and drifted.action_drift["value"] > watch.max_action_drift
    # Below the live watch's minimum the drift is not measured, so it decides nothing.
    unmeasured = assess_canary(by_day, CANARY_V, CHAMPION_V, settings, evaluated=elsewhere)
    assert unmeasured.decision == "promote" and unmeasured.action_drift["status"] == "not_measured"


def test_a_canary_is_dropped_when_its_rewards_fall_not_when_they_rise():
    from monitoring.canary import _Arm, _behaviour
    from monitoring.watch import WatchSettings

    watch = WatchSettings(min_interactions=50)
    low, high = _Arm(rewards=[0.0] * 60 + [1.0] * 20), _Arm(rewards=[0.0] * 20 + [1.0] * 60)
    _, fell = _behaviour(low, high, None, watch)
    assert fell.status == "alarm" and fell.value > watch.reward_max_ks
    _, rose = _behaviour(high, low, None, watch)
    assert rose.status == "ok" and rose.value == fell.value and "upwards" in rose.detail
    _, few = _behaviour(_Arm(rewards=[0.0] * 10), high, None, watch)
    assert few.status == "not_measured"


def test_the_canary_check_reads_the_evaluated_mix_its_version_carries(home, tmp_path):
    """check_canary compares the canary's served calls with the `evaluated_tool_mix` tag its
    registration wrote, and drops it, with an incident, when they drifted."""
    from monitoring.watch import WatchSettings

    _register(home, tmp_path, "2026-11-02")
    _register(home, tmp_path, "2026-11-09", serve_as=CANARY, evaluated_tool_mix={"transfer_to_human_agents": 1.0})
    _traffic(home, tmp_path, CANARY_V, degraded=False, days=6, seed=12)
    _traffic(home, tmp_path, CHAMPION_V, degraded=False, days=6, seed=13)
    settings = CanarySettings(min_conversations=40, min_days=5, margin=0.5)
    outcome = check_canary(
        home, str(home.duckdb_path), home.mlflow_uri, MODEL, settings, None, watch=WatchSettings(min_interactions=40)
    )
    assert outcome["action"] == "drop" and "does not act as it was evaluated" in outcome["reason"]
    [incident] = list_incidents(home)
    assert incident["kind"] == "canary_dropped" and incident["evidence"]["verdict"]["action_drift"]["status"] == "alarm"
    assert _aliases(home) == {CHAMPION: 1}
