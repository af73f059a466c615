"""On/off switches for what runs by itself once the code location loads, read in one place.

All default to on: a deployment retrains every week, watches and guards its champion unless an
operator says otherwise. `RETRAIN_SCHEDULE=off` leaves the Monday schedule stopped,
`RETRAIN_CHAMPION_HEALTH=off` the champion-health circuit breaker, and `RETRAIN_LIVE_WATCH=off`
the landing sensor and the daily watch schedule (any of them can still be started by hand in the UI).
"""

from __future__ import annotations

import os

SCHEDULE_SWITCH = "RETRAIN_SCHEDULE"
CHAMPION_HEALTH_SWITCH = "RETRAIN_CHAMPION_HEALTH"
LIVE_WATCH_SWITCH = "RETRAIN_LIVE_WATCH"
_ON, _OFF = ("on", "1", "true", "yes"), ("off", "0", "false", "no")


def switched_on(name: str) -> bool:
    """Whether the switch `name` is on (unset means on); any other value than on/off is an error."""
    value = os.environ.get(name, "on").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{name}={os.environ[name]!r}: use one of {_ON + _OFF}")
