"""Log set-up: plain text for people, one JSON object per line for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
import time


class _JsonFormatter(logging.Formatter):
    """A formatter writing each record as one JSON object: its UTC time, level, logger,
    message and any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(fmt: str, level: str) -> None:
    """Send log records from `level` up to standard error, as plain text or, with `fmt`
    "json", one JSON object per line; aiohttp's access log is kept to warnings."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log costs time on every scrape and says nothing useful here.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
