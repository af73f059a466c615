"""The settings of ingestion, declared once: `retrain ingest` builds its options from these fields,
and every ingest (the CLI, the landing sensor, the weekly `raw_interactions`) takes its defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from dataplane.settings import setting


@dataclass(frozen=True)
class IngestSettings:
    """How large a record may be and how old, for one ingest."""

    max_record_bytes: int = setting(
        1024 * 1024,
        "largest record in bytes, for every format: a JSON Lines line (its newline included) or "
        "a Parquet row's values; a larger one is quarantined (line_too_long) before it is decoded "
        "into Python objects, and the rest of its file is read on",
    )
    max_age_days: float = setting(
        730.0,
        "a record that started more than this many days before the newest ended_at in the store "
        "(the rows of the file being read included) is quarantined (too_old), so a clock reset "
        "(1970, year 1) never reaches a window",
    )

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
                raise ValueError(f"IngestSettings.{spec.name} must be a positive finite number, got {value!r}")
        if not isinstance(self.max_record_bytes, int):
            raise ValueError(f"IngestSettings.max_record_bytes must be an integer, got {self.max_record_bytes!r}")
