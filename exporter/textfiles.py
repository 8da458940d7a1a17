"""Reading the text files a person hands the exporter (the config file, the web config, a
collectors CSV, a PEM certificate), and naming a place in one when it is wrong.

Every such file is read the same way and, when it cannot be, refused in the same one line:
`FILE: cannot read: <reason>`. A mistake inside one is named as `FILE:LINE: key: message`,
so that a person can go straight to it.
"""

from __future__ import annotations

import os
from pathlib import Path

_ENCODING_NAMES = {"utf-8": "UTF-8", "ascii": "ASCII"}


class UnreadableFile(ValueError):
    """A file that could not be read as text; its message is one line naming the file."""


def read_text(path: str | os.PathLike[str], encoding: str = "utf-8") -> str:
    """Return the text of the file at `path`, decoded with `encoding`; UnreadableFile says
    in one line (`FILE: cannot read: <reason>`) why it could not be read or decoded."""
    try:
        return Path(path).read_text(encoding=encoding)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UnreadableFile(f"{path}: cannot read: {reason}") from None
    except UnicodeDecodeError as exc:
        shown = _ENCODING_NAMES.get(encoding, encoding)
        raise UnreadableFile(f"{path}: cannot read: not {shown} text (byte "
                             f"{exc.object[exc.start]:#04x} at offset {exc.start})") from None


def located(path: str | os.PathLike[str], line: int | None, key: str | None,
            message: str) -> str:
    """Return the one-line error `FILE:LINE: key: message`; LINE is left out where the file's
    lines are not known, and `key` where the message is about the line as a whole."""
    where = f"{path}:{line}" if line is not None else str(path)
    return f"{where}: {key}: {message}" if key else f"{where}: {message}"
