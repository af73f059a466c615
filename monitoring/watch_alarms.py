"""What the live watch does about a day's alarms: incidents, and the promotion pause for drift.

An action-drift alarm files a `live_watch_action_drift` incident and pauses promotions
(`monitoring.pause`, on the pause log the caller hands in) unless a person already lifted a pause covering that day; a reward-shift
alarm files a `live_watch_reward_shift` incident. Each incident is filed once per (kind, day,
champion): re-running a day does not page anyone twice.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from dataplane.home import Home
from dataplane.incidents import record_incident
from monitoring.pause import Pause, PauseLog, acknowledged_by, active_pause, pause_promotions
from monitoring.watch import DayWatch, Finding

ACTION_DRIFT_INCIDENT = "live_watch_action_drift"
REWARD_SHIFT_INCIDENT = "live_watch_reward_shift"


@dataclass(frozen=True)
class AlarmOutcome:
    """`incidents`: the incident files of the day's alarms (filed now or on an earlier run);
    `pause`: the pause in force afterwards; `acknowledged_by`: who already lifted a pause for
    this day's drift (so it did not pause again)."""

    incidents: list[str]
    pause: Pause | None
    acknowledged_by: str | None = None


def _filed(home: Home, kind: str, day: str, champion: str) -> str | None:
    for path in sorted(home.incidents.glob(f"*-{kind}.json")):
        evidence = json.loads(path.read_text()).get("evidence", {})
        if evidence.get("day") == day and evidence.get("champion") == champion:
            return str(path)
    return None


def _file_once(home: Home, kind: str, watch: DayWatch, finding: Finding, summary: str, evidence: dict[str, Any]) -> str:
    found = _filed(home, kind, watch.day, watch.champion)
    if found is not None:
        return found
    base = {"day": watch.day, "champion": watch.champion, "finding": asdict(finding)}
    return str(record_incident(home, kind, summary, {**base, **evidence}))


def sound_alarms(home: Home, watch: DayWatch, pauses: PauseLog) -> AlarmOutcome:
    """File the day's incidents and pause promotions on action drift (see the module docstring)."""
    home.incidents.mkdir(parents=True, exist_ok=True)
    filed: list[str] = []
    acknowledged = None
    drift = watch.action_drift
    if drift.status == "alarm":
        acknowledged = acknowledged_by(pauses, watch.day, watch.champion)
        if acknowledged is None:
            path = _file_once(
                home,
                ACTION_DRIFT_INCIDENT,
                watch,
                drift,
                f"{watch.champion} on {watch.day}: {drift.detail}; promotions paused until `retrain resume`",
                {"tool_mix": watch.tool_mix, "evaluated_mix": watch.evaluated_mix},
            )
            pause_promotions(pauses, watch.day, watch.champion, float(drift.value or 0.0), drift.threshold, path)
            filed.append(path)
    shift = watch.reward_shift
    if shift.status == "alarm":
        filed.append(
            _file_once(
                home,
                REWARD_SHIFT_INCIDENT,
                watch,
                shift,
                f"{watch.champion} on {watch.day}: {shift.detail}",
                {
                    "reference_day": watch.reference_day,
                    "quantiles": watch.reward_quantiles,
                    "reference_quantiles": watch.reference_quantiles,
                },
            )
        )
    return AlarmOutcome(filed, active_pause(pauses), acknowledged)
