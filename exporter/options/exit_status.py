"""How the tools (`report`, `advise`, `generate`) end when they cannot do their work: one line
on standard error and one exit status, the same for all three.

0: done. 2: a usage error, nothing tried: a bad flag, variable or value, a combination of
them that makes no sense, or a file one of them names that cannot be used. 1: the options
were right but the work failed: the server refused or broke off, or the output could not be
written.
"""

from __future__ import annotations

import sys

from exporter.options.values import ConfigError

DONE = 0
FAILURE = 1
USAGE_ERROR = 2


def status_of(error: Exception) -> int:
    """Return the exit status `error` calls for: USAGE_ERROR for a bad option or a file an
    option names (ValueError, ConfigError among them), FAILURE for anything else (the
    output not written, the server's refusal)."""
    if isinstance(error, OSError):
        return FAILURE
    return USAGE_ERROR if isinstance(error, ValueError) else FAILURE


def stopped(command: str, error: Exception) -> int:
    """Say in one line on standard error why `gpu-exporter COMMAND` stopped, and return its
    exit status (`status_of`). An OSError is the output file that could not be written: the
    tools open no other file once their options are checked."""
    if isinstance(error, OSError):
        why = f"error: cannot write {error.filename}: {error.strerror}"
    elif isinstance(error, ConfigError):
        why = str(error)  # names the flag or variable at fault
    else:
        why = f"error: {error}"
    print(f"gpu-exporter {command}: {why}", file=sys.stderr)
    return status_of(error)
