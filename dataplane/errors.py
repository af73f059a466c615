"""The one error type of the data plane's record checks: a stable rule name plus a detail."""

from __future__ import annotations

from typing import Any


class ContractError(ValueError):
    """A record (or file) broke the contract; `.rule` is a stable snake_case name."""

    def __init__(self, rule: str, detail: str, record: Any = None):
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail
        self.record = record
