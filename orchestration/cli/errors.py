"""The one error type of the `retrain` command line, shared by every module that adds subcommands."""

from __future__ import annotations


class CliError(Exception):
    """An error the user can fix; printed without a traceback."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code
