"""Errors a user can fix. The CLI prints them as one line, with no traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or environment: the message names the problem and the fix."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
