"""Promotions paused by the live watch: state kept in `<home>/watch/pause.json`.

When the daily watch finds the champion's served actions drifting from what was evaluated, it
pauses promotions here; `promotion_gate` reads the pause as a `live_watch` hold, and only a person
lifts it, with its own command (`retrain resume --by NAME --reason TEXT`: approving a week's
candidate does not). The file holds the active pause (or null) and every lifted one with who
resumed promotions, when and why, so the history survives restarts and is readable by people:

    {"active": {"since": "2026-11-25", "champion": "retail-agent/2", ...} | null,
     "lifted": [{..., "lifted_by": "alice", "lifted_at": "...", "reason": "..."}]}

A drift found again on a day whose pause a person lifted (a re-run of that day) does not pause
again: the person already judged that day's evidence. Updates hold an exclusive lock on
`pause.lock` and replace the file atomically, so the watch and `retrain resume` never lose each
other's writes.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from dataplane.home import Home

STATE_FILE = "pause.json"


class PauseStateError(ValueError):
    """The pause file is unreadable; names the file and what is wrong, nothing is guessed."""


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


def _path(home: Home):
    return home.watch / STATE_FILE


def _read(home: Home) -> _State:
    path = _path(home)
    if not path.exists():
        return _State()
    try:
        data = json.loads(path.read_text())
        active = data.get("active")
        return _State(None if active is None else Pause.from_dict(active), list(data.get("lifted") or []))
    except (json.JSONDecodeError, AttributeError, TypeError) as err:
        raise PauseStateError(f"{path}: not a live-watch pause state ({err}); fix or remove it by hand") from err


def _write(home: Home, state: _State) -> None:
    path = _path(home)
    data = {"active": None if state.active is None else asdict(state.active), "lifted": state.lifted}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


@contextmanager
def _locked(home: Home) -> Iterator[_State]:
    home.watch.mkdir(parents=True, exist_ok=True)
    with open(home.watch / "pause.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield _read(home)


def active_pause(home: Home) -> Pause | None:
    """The pause in force, or None."""
    return _read(home).active


def lifted_pauses(home: Home) -> list[dict[str, Any]]:
    """Every lifted pause, oldest first, each with `lifted_by`, `lifted_at` and `reason`."""
    return _read(home).lifted


def last_resume(home: Home) -> dict[str, Any] | None:
    """The latest lifted pause (who resumed promotions, when, why) when none is in force now, else None."""
    state = _read(home)
    if state.active is not None or not state.lifted:
        return None
    return state.lifted[-1]


def acknowledged_by(home: Home, day: str, champion: str) -> str | None:
    """Who lifted a pause that covered `day` of `champion`'s traffic, or None."""
    for lifted in reversed(_read(home).lifted):
        if lifted.get("champion") == champion and day in lifted.get("days", ()):
            return str(lifted.get("lifted_by"))
    return None


def pause_promotions(home: Home, day: str, champion: str, value: float, threshold: float, incident: str) -> Pause:
    """Pause promotions for drift found on `day` (or add the day to the pause in force)."""
    with _locked(home) as state:
        if state.active is None:
            pause = Pause(day, champion, value, threshold, datetime.now(UTC).isoformat(), (day,), (incident,))
        else:
            current = state.active
            days = tuple(sorted({*current.days, day}))
            incidents = current.incidents + ((incident,) if incident not in current.incidents else ())
            pause = replace(current, days=days, incidents=incidents)
        state.active = pause
        _write(home, state)
    return pause


class ResumeError(ValueError):
    """A resume without the person's name or reason; names what is missing."""


def resume_promotions(home: Home, by: str, reason: str) -> dict[str, Any] | None:
    """Lift the pause in force, recording who resumed promotions, when and why; None when nothing was paused."""
    if not by.strip():
        raise ResumeError("resuming promotions needs the name of the person who resumes them (--by)")
    if not reason.strip():
        raise ResumeError("resuming promotions needs the reason: what the person read and concluded (--reason)")
    with _locked(home) as state:
        if state.active is None:
            return None
        lifted = {
            **asdict(state.active),
            "lifted_by": by,
            "lifted_at": datetime.now(UTC).isoformat(),
            "reason": reason,
        }
        state.active = None
        state.lifted.append(lifted)
        _write(home, state)
    return lifted
