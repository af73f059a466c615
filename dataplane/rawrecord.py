"""What a reader yields per record, and the error that spoils a whole file (`dataplane.readers`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dataplane.errors import ContractError

RAW_KEEP = 4096  # bytes of an oversized record kept for its quarantine row


class FileCorruptError(ContractError):
    """The file as a whole cannot be trusted; `.line_no` and `.raw` locate the damage."""

    def __init__(self, rule: str, detail: str, line_no: int | None = None, raw: str | None = None):
        super().__init__(rule, detail)
        self.line_no = line_no
        self.raw = raw


@dataclass
class RawRecord:
    line_no: int
    raw: str | dict  # the JSONL line, or the Parquet row as read
    obj: Any = None
    error: ContractError | None = None
    # Free-form fields of `obj` decoded from JSON text that holds nothing any scanner masks
    # (`pii_records.json_text_pii_free`): storing the record need not walk them.
    pii_free: frozenset[str] = frozenset()
    # Every value of `obj` is a dict, list, str, int, float, bool or None (decoded from JSON, or
    # read from Parquet columns of such types): its stored text may be written the fast way
    # (`rowtext.scrubbed_canonical`). False where a value may be of another type (a UUID, bytes).
    json_native: bool = False

    def raw_text(self) -> str:
        if isinstance(self.raw, str):
            return self.raw
        return json.dumps(self.raw, default=str, ensure_ascii=False)
