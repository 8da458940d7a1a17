"""Run a function as another user in a forked child of the test process.

The child has already imported everything the parent had, so it never reads the checkout
again: the test then passes wherever the repository sits, in a directory only root can
enter as well (made by `mktemp -d`, or root's home).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable

NOBODY = 65534


def run_as(uid: int, function: Callable[[], str]) -> tuple[int, str]:
    """Return the exit status and the text that `function` returns when called as `uid`.

    The child drops its groups, then its group and user ids, before it calls the function,
    so what the function reads it reads as that user. An exception in the child becomes
    exit status 1, with its traceback as the text.
    """
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child, which leaves by os._exit
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                text, status = function(), 0
            except BaseException:  # everything goes back to the parent as text
                text = traceback.format_exc()
            with os.fdopen(write_end, "w") as out:
                out.write(text)
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status), text
