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

    def at(self, where: str) -> ContractError:
        """The same error with `where` (e.g. "line 12") starting its detail.

        Lets a hot caller name the place only when something failed, instead of formatting a
        location string for every value it decodes.
        """
        return ContractError(self.rule, f"{where}: {self.detail}", self.record)
