"""Errors a user can cause, reported by the CLI as one line and exit status 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """A problem with the user's input: one sentence naming what, where, and what to do."""

    exit_status = 2


class WorkloadError(UserError):
    """The workload file is missing, unreadable, or does not match the schema: one line per
    problem, every problem of the file at once."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' for the closest known name, or '' when none is close."""
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{matches[0]}'?)" if matches else ""


def first_line(error: BaseException) -> str:
    """The first line of what `error` says (its type's name when it says nothing): how a
    library's long message (a converter's, a compiler's) is quoted in one sentence."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
