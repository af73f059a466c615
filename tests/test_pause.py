"""The live watch's promotion pause, kept as events on a real (ephemeral) Dagster instance: the
incidents and the pause a drifting day raises, `retrain resume`'s record of who and why, the
`live_watch` gate, and the same record written inside a run and read by the CLI's path."""

# No `from __future__ import annotations`: Dagster reads the context type from live annotations.
from dataclasses import replace

import dagster as dg
import pytest

from assets.pause_log import PAUSE_ASSET, InstancePauseLog
from dataplane.incidents import list_incidents
from evaluation.gates import ApprovalError, approve, evaluate_gates
from monitoring.pause import (
    PauseStateError,
    ResumeError,
    active_pause,
    last_resume,
    lifted_pauses,
    pause_promotions,
    resume_promotions,
)
from monitoring.watch import WatchSettings, watch_day
from monitoring.watch_alarms import ACTION_DRIFT_INCIDENT, REWARD_SHIFT_INCIDENT, sound_alarms
from tests.helpers_gates import gate_inputs

SMALL = WatchSettings(min_interactions=20)
MIX = {"get_order_details": 0.5, "send_message_to_customer": 0.5}


@pytest.fixture()
def dagster_instance():
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


@pytest.fixture()
def pauses(dagster_instance):
    """The pause log as the CLI uses it: runless events on the instance."""
    return InstancePauseLog(dagster_instance)


def _drifted_watch(day: str = "2026-11-25"):
    watch = watch_day(day, "retail-agent/2", [], MIX, None, [], SMALL)
    alarm = replace(watch.action_drift, status="alarm", value=0.12, detail="action drift TV=0.1200 > 0.05")
    return replace(watch, action_drift=alarm)


def test_drift_pauses_promotions_once_and_a_resume_records_who_and_why(home, dagster_instance, pauses):
    outcome = sound_alarms(home, _drifted_watch(), pauses)
    [incident] = list_incidents(home)
    assert incident["kind"] == ACTION_DRIFT_INCIDENT and incident["evidence"]["day"] == "2026-11-25"
    assert outcome.pause.since == "2026-11-25" and outcome.incidents == [str(next(home.incidents.glob("*.json")))]
    assert "live watch paused since 2026-11-25: action drift TV=0.1200 > 0.05" in outcome.pause.summary
    sound_alarms(home, _drifted_watch(), pauses)  # a re-run of the day files nothing new
    sound_alarms(home, _drifted_watch("2026-11-26"), pauses)  # a second drifting day joins the pause
    assert len(list_incidents(home)) == 2
    assert active_pause(pauses).since == "2026-11-25" and active_pause(pauses).days == ("2026-11-25", "2026-11-26")

    assert last_resume(pauses) is None  # paused: nobody has resumed promotions
    for by, reason, missing in (("", "read them", "--by"), ("alice", " ", "--reason")):
        with pytest.raises(ResumeError, match=missing):
            resume_promotions(pauses, by, reason)
    assert active_pause(pauses) is not None  # a refused resume lifts nothing
    lifted = resume_promotions(pauses, "alice", "read 40 transcripts: hand-overs were a queue outage")
    assert lifted["lifted_by"] == "alice" and active_pause(pauses) is None
    assert lifted["reason"] == "read 40 transcripts: hand-overs were a queue outage"
    assert [p["since"] for p in lifted_pauses(pauses)] == ["2026-11-25"]
    # Kept on the instance beside the pause: one observation per pause event and the resume, newest first.
    observed = dagster_instance.fetch_observations(PAUSE_ASSET, limit=10).records
    stored = observed[0].asset_observation.metadata["event"].value
    assert len(observed) == 4 and stored["event"] == "resume" and stored["by"] == "alice"
    assert last_resume(pauses) == lifted and stored["reason"] == lifted["reason"]
    # The person judged those days: re-running one does not pause again.
    again = sound_alarms(home, _drifted_watch("2026-11-26"), pauses)
    assert again.pause is None and again.acknowledged_by == "alice" and len(list_incidents(home)) == 2
    assert resume_promotions(pauses, "bob", "again") is None  # nothing paused any more
    assert len(dagster_instance.fetch_observations(PAUSE_ASSET, limit=10).records) == 4  # and nothing recorded


def test_a_reward_alarm_files_an_incident_without_pausing(home, pauses):
    watch = _drifted_watch()
    shift = replace(watch.reward_shift, status="alarm", value=0.4, detail="KS 0.4")
    outcome = sound_alarms(
        home, replace(watch, action_drift=replace(watch.action_drift, status="ok"), reward_shift=shift), pauses
    )
    assert outcome.pause is None and active_pause(pauses) is None
    assert [i["kind"] for i in list_incidents(home)] == [REWARD_SHIFT_INCIDENT]


def test_an_unreadable_pause_event_is_named(dagster_instance, pauses):
    dagster_instance.report_runless_asset_event(dg.AssetObservation(asset_key=PAUSE_ASSET, metadata={"x": 1}))
    with pytest.raises(PauseStateError, match="promotion_pause observation .* carries no 'event' metadata"):
        active_pause(pauses)
    bad = dg.MetadataValue.json({"event": "pause", "day": "2026-11-25"})  # no champion, no drift
    with dg.DagsterInstance.ephemeral() as other:
        other.report_runless_asset_event(dg.AssetObservation(asset_key=PAUSE_ASSET, metadata={"event": bad}))
        with pytest.raises(PauseStateError, match="not a live-watch pause event"):
            active_pause(InstancePauseLog(other))


def test_while_paused_every_week_holds_and_only_a_resume_lifts_the_hold(pauses):
    pause = pause_promotions(pauses, "2026-11-25", "retail-agent/2", 0.12, 0.05, "incident.json")
    report = evaluate_gates(replace(gate_inputs("better"), watch_pause=pause))
    gate = report.gate("live_watch")
    assert report.decision == "hold" and gate.verdict == "hold"
    assert gate.detail == pause.summary and "retrain resume --by NAME --reason TEXT" in report.reason
    # An approval alone does not lift the pause's hold: that is resume's, with its own who and why.
    with pytest.raises(ApprovalError, match=r"live_watch held: .*retrain resume"):
        approve(report, "alice")
    resumed = resume_promotions(pauses, "bob", "the drift was a tool outage")
    approved = approve(report, "alice", resumed=last_resume(pauses))
    assert approved.decision == "promote" and approved.approved_by == "alice"
    assert "promotions resumed by bob" in approved.gate("live_watch").detail
    assert "the drift was a tool outage" in approved.gate("live_watch").detail
    assert resumed["lifted_at"] in approved.gate("live_watch").detail
    assert evaluate_gates(gate_inputs("better")).gate("live_watch").verdict == "pass"
    with pytest.raises(ApprovalError, match="calibration_improvement"):  # a failure stays a failure
        approve(evaluate_gates(replace(gate_inputs("identical"), watch_pause=pause)), "alice")


@dg.asset
def drifting_watch(context: dg.AssetExecutionContext):
    """What live_watch does on a drifting day: the pause logged as an event of its own run."""
    pause_promotions(InstancePauseLog(context.instance, context), "2026-11-25", "retail-agent/2", 0.12, 0.05, "i.json")


def test_a_pause_logged_in_a_run_is_what_the_gate_and_the_cli_read(dagster_instance, pauses):
    result = dg.materialize([drifting_watch], instance=dagster_instance)
    assert result.success
    [record] = dagster_instance.fetch_observations(PAUSE_ASSET, limit=10).records
    assert record.run_id == result.run_id  # on the watch run that found the drift
    assert active_pause(pauses).since == "2026-11-25"
    assert resume_promotions(pauses, "bob", "read the day")["days"] == ["2026-11-25"]
    assert active_pause(InstancePauseLog(dagster_instance)) is None
