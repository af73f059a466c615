"""Promotions paused by the live watch: the pause's events, and the state they add up to.

When the daily watch finds the champion's served actions drifting from what was evaluated, it
pauses promotions; `promotion_gate` reads the pause as a `live_watch` hold, and only a person
lifts it, with its own command (`retrain resume --by NAME --reason TEXT`: approving a week's
candidate does not). Each of these is one event appended to a `PauseLog`: a "pause" (the day,
champion, drift and incident) or a "resume" (who, when and why). The state is the events folded in
order: the active pause (a pause event starts one, later ones add their day to it) and every
lifted one with who resumed promotions, when and why, so the history is kept with the pause.

The log is where the orchestrator keeps events (Dagster's instance: `assets.pause_log`); this
module never touches storage itself. Appending one event per change, never rewriting a state,
means the watch and `retrain resume` cannot lose each other's writes.

A drift found again on a day whose pause a person lifted (a re-run of that day) does not pause
again: the person already judged that day's evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

PAUSE_EVENT, RESUME_EVENT = "pause", "resume"


class PauseStateError(ValueError):
    """A recorded pause event that cannot be read; names it and what is wrong, nothing is guessed."""


class PauseLog(Protocol):
    """Where the pause's events are kept, oldest first."""

    def events(self) -> list[dict[str, Any]]: ...
    def append(self, event: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Pause:
    """Promotions held since `since` because `champion`'s served actions drifted: total variation
    `value` above `threshold`. `days` lists every day that found the drift while paused."""

    since: str
    champion: str
    value: float
    threshold: float
    paused_at: str
    days: tuple[str, ...] = ()
    incidents: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """The line the `live_watch` gate shows."""
        return (
            f"live watch paused since {self.since}: action drift TV={self.value:.4f} > {self.threshold} "
            f"({self.champion}); a person resumes promotions with `retrain resume`"
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pause:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}  # a lifted one has more
        return cls(**{**values, "days": tuple(values.get("days", ())), "incidents": tuple(values.get("incidents", ()))})


@dataclass
class _State:
    active: Pause | None = None
    lifted: list[dict[str, Any]] = field(default_factory=list)


def _apply(state: _State, event: Mapping[str, Any]) -> _State:
    kind = event.get("event")
    if kind == PAUSE_EVENT:
        day, incident = event["day"], event["incident"]
        current = state.active
        if current is None:
            value, threshold = float(event["value"]), float(event["threshold"])
            current = Pause(day, event["champion"], value, threshold, event["at"], (day,), (incident,))
        else:
            incidents = current.incidents + ((incident,) if incident not in current.incidents else ())
            current = replace(current, days=tuple(sorted({*current.days, day})), incidents=incidents)
        return _State(current, state.lifted)
    if kind == RESUME_EVENT:
        if state.active is None:  # a resume with nothing paused is never recorded; nothing to lift
            return state
        # As JSON has it (lists, not tuples): the record is printed by `retrain resume` and compared as read.
        paused = {**asdict(state.active), "days": list(state.active.days), "incidents": list(state.active.incidents)}
        lifted = {**paused, "lifted_by": event["by"], "lifted_at": event["at"], "reason": event["reason"]}
        return _State(None, [*state.lifted, lifted])
    raise KeyError(f"event {kind!r}")


def _fold(events: Iterable[Mapping[str, Any]]) -> _State:
    state = _State()
    for event in events:
        try:
            state = _apply(state, event)
        except (KeyError, TypeError, ValueError) as err:
            raise PauseStateError(f"not a live-watch pause event ({err}): {dict(event)}") from err
    return state


def active_pause(log: PauseLog) -> Pause | None:
    """The pause in force, or None."""
    return _fold(log.events()).active


def lifted_pauses(log: PauseLog) -> list[dict[str, Any]]:
    """Every lifted pause, oldest first, each with `lifted_by`, `lifted_at` and `reason`."""
    return _fold(log.events()).lifted


def last_resume(log: PauseLog) -> dict[str, Any] | None:
    """The latest lifted pause (who resumed promotions, when, why) when none is in force now, else None."""
    state = _fold(log.events())
    if state.active is not None or not state.lifted:
        return None
    return state.lifted[-1]


def acknowledged_by(log: PauseLog, day: str, champion: str) -> str | None:
    """Who lifted a pause that covered `day` of `champion`'s traffic, or None."""
    for lifted in reversed(_fold(log.events()).lifted):
        if lifted.get("champion") == champion and day in lifted.get("days", ()):
            return str(lifted.get("lifted_by"))
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat()


def pause_promotions(log: PauseLog, day: str, champion: str, value: float, threshold: float, incident: str) -> Pause:
    """Pause promotions for drift found on `day` (or add the day to the pause in force); the pause after it."""
    event = {
        "event": PAUSE_EVENT,
        "day": day,
        "champion": champion,
        "value": value,
        "threshold": threshold,
        "incident": incident,
        "at": _now(),
    }
    earlier = log.events()
    log.append(event)
    return _fold([*earlier, event]).active


class ResumeError(ValueError):
    """A resume without the person's name or reason; names what is missing."""


def resume_promotions(log: PauseLog, by: str, reason: str) -> dict[str, Any] | None:
    """Lift the pause in force, recording who resumed promotions, when and why; None (and nothing
    recorded) when nothing was paused."""
    if not by.strip():
        raise ResumeError("resuming promotions needs the name of the person who resumes them (--by)")
    if not reason.strip():
        raise ResumeError("resuming promotions needs the reason: what the person read and concluded (--reason)")
    earlier = log.events()
    if _fold(earlier).active is None:
        return None
    event = {"event": RESUME_EVENT, "by": by, "reason": reason, "at": _now()}
    log.append(event)
    return _fold([*earlier, event]).lifted[-1]
