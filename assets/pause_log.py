"""Where the live watch's promotion pause lives: observations of `promotion_pause` on the Dagster instance.

Each pause and each resume (`monitoring.pause`) is one AssetObservation of the asset key
`promotion_pause`, its event as JSON metadata. `live_watch` logs its pauses in its own run (the
pause shows on the run that found the drift); `retrain resume` reports a runless observation. The
state is read back from the instance's event log, oldest first: the watch, `promotion_gate` and
the CLI all read the same record, in the same storage as the runs and decisions (sqlite locally,
Postgres in production), and the asset's page in the UI lists every pause and resume.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from monitoring.pause import PAUSE_EVENT, PauseStateError

PAUSE_ASSET = dg.AssetKey("promotion_pause")
EVENT_METADATA = "event"
_PAGE = 1000


class InstancePauseLog:
    """`monitoring.pause.PauseLog` on a Dagster instance. With `context` (inside a run), events are
    logged in that run; without it (the CLI), reported as runless events."""

    def __init__(self, instance: dg.DagsterInstance, context: dg.AssetExecutionContext | None = None) -> None:
        self.instance, self.context = instance, context

    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self.instance.fetch_observations(PAUSE_ASSET, limit=_PAGE, cursor=cursor, ascending=True)
            for record in page.records:
                entry = record.asset_observation.metadata.get(EVENT_METADATA) if record.asset_observation else None
                if entry is None:
                    raise PauseStateError(
                        f"a {PAUSE_ASSET.to_user_string()} observation (run {record.run_id or 'none'}, "
                        f"storage id {record.storage_id}) carries no {EVENT_METADATA!r} metadata"
                    )
                out.append(dict(entry.value))
            if not page.has_more:
                return out
            cursor = page.cursor

    def append(self, event: dict[str, Any]) -> None:
        observation = dg.AssetObservation(
            asset_key=PAUSE_ASSET,
            description=f"promotions {'paused' if event['event'] == PAUSE_EVENT else 'resumed'}",
            metadata={EVENT_METADATA: dg.MetadataValue.json(event)},
        )
        if self.context is not None:
            self.context.log_event(observation)
        else:
            self.instance.report_runless_asset_event(observation)
