"""Logging to stderr as readable text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from jobcore.timeutil import iso

EVENT_ATTR = "jobcore_event"


class JsonFormatter(logging.Formatter):
    """Lifecycle events as their own keys; other records as {ts, level, logger, message}."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, EVENT_ATTR, None)
        ts = iso(int(record.created * 1000))
        if event is not None:
            data: dict[str, Any] = {"ts": ts, **event}
        else:
            data = {
                "ts": ts,
                "level": record.levelname.lower(),
                "logger": record.name,
                "message": record.getMessage(),
            }
            if record.exc_info:
                data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")


def configure_logging(log_format: str = "text", level: int = logging.INFO) -> None:
    """Send jobcore's logs to stderr in `log_format`; replaces an earlier call's handler."""
    root = logging.getLogger("jobcore")
    for handler in list(root.handlers):
        if getattr(handler, "_jobcore", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._jobcore = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
