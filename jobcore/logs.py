"""Logging to stderr as readable text or one JSON object per line.

Lifecycle events (records carrying `EVENT_ATTR`) are the hot path of a busy
worker: two lines per job. Their text is built only when a formatter asks for
it, the formatters reuse the timestamp text within a second, and the stderr
handler writes event lines in batches (within 50 ms, one `write` per batch
instead of one per line). Any other record writes at once, after the event
lines queued before it, so order is kept.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import deque
from typing import IO, Any

EVENT_ATTR = "jobcore_event"
EVENT_LOGGER = "jobcore.events"


_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def one_line(text: str) -> str:
    """`text` with control characters escaped (`\\n`, `\\x1b`, …): a reason, error or job
    type from an agent or a producer cannot start a forged line of the text log (or
    recolour a terminal). The JSON log escapes them already."""
    return text if text.isprintable() else text.translate(_CONTROLS)


def event_text(fields: dict[str, Any]) -> str:
    """An event's text message: `completed noop <id> attempt=1 duration_ms=0.1`."""
    text = f"{fields['event']} {fields['type']} {fields['job_id']} attempt={fields['attempt']}"
    if "duration_ms" in fields:
        text += f" duration_ms={fields['duration_ms']}"
    if "error" in fields:
        text += f" error={fields['error']}"
    return one_line(text)


class _SecondCache:
    """Formats the whole-second part of a timestamp once per second."""

    def __init__(self, pattern: str, convert: Any) -> None:
        self._pattern = pattern
        self._convert = convert
        self._second = -1
        self._text = ""

    def text(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._text = time.strftime(self._pattern, self._convert(second))
            self._second = second
        return self._text


class JsonFormatter(logging.Formatter):
    """Lifecycle events as their own keys; other records as {ts, level, logger, message}."""

    def __init__(self) -> None:
        super().__init__()
        self._seconds = _SecondCache("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def _ts(self, created: float) -> str:
        return f"{self._seconds.text(created)}.{int((created - int(created)) * 1000):03d}Z"

    def format_event(self, created: float, fields: dict[str, Any]) -> str:
        """What `format` makes of an INFO event record on `jobcore.events`, without the record."""
        return json.dumps({"ts": self._ts(created), **fields}, default=str)

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, EVENT_ATTR, None)
        if event is not None:
            data: dict[str, Any] = {"ts": self._ts(record.created), **event}
        else:
            data = {
                "ts": self._ts(record.created),
                "level": record.levelname.lower(),
                "logger": record.name,
                "message": record.getMessage(),
            }
            if record.exc_info:
                data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class TextFormatter(logging.Formatter):
    """`2026-01-31 12:00:00,123 INFO    jobcore.events: completed noop <id> attempt=1 …`.

    A message is one line: its control characters are escaped (`one_line`); only a
    traceback or stack that follows it spans lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
        self._seconds = _SecondCache("%Y-%m-%d %H:%M:%S", time.localtime)

    def format_event(self, created: float, fields: dict[str, Any]) -> str:
        """What `format` makes of an INFO event record on `jobcore.events`, without the record."""
        return (
            f"{self._seconds.text(created)},{int((created - int(created)) * 1000):03d}"
            f" INFO    {EVENT_LOGGER}: {event_text(fields)}"
        )

    def format(self, record: logging.LogRecord) -> str:
        text = (
            f"{self._seconds.text(record.created)},{int(record.msecs):03d}"
            f" {record.levelname:<7} {record.name}: {one_line(record.getMessage())}"
        )
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text += "\n" + record.exc_text
        if record.stack_info:
            text += "\n" + self.formatStack(record.stack_info)
        return text


class BatchedStreamHandler(logging.Handler):
    """Writes lifecycle event lines in batches; any other record at once, after them.

    Event lines wait at most `delay` seconds (a writer thread wakes once per
    batch, not per line) or until `batch` of them are queued; `flush()` writes
    everything queued so far, in order, before returning.
    """

    def __init__(self, stream: IO[str], *, delay: float = 0.05, batch: int = 512) -> None:
        super().__init__()
        self.stream = stream
        self.delay = delay
        self.batch = batch
        self._pending: deque[str] = deque()
        self._write_lock = threading.Lock()
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._closed = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:
            self.handleError(record)
            return
        self._queue(line, getattr(record, EVENT_ATTR, None) is None)

    def emit_event(self, created: float, fields: dict[str, Any]) -> None:
        """Queue an INFO event for `jobcore.events` as `emit` would, without a LogRecord."""
        if self.level > logging.INFO:
            return
        formatter: Any = self.formatter
        try:
            line = formatter.format_event(created, fields) + "\n"
        except Exception:
            logging.getLogger(EVENT_LOGGER).exception("could not format a lifecycle event")
            return
        self._queue(line, False)

    def _queue(self, line: str, now: bool) -> None:
        pending = self._pending
        pending.append(line)
        if now or len(pending) >= self.batch or self._closed:
            self.flush()
        elif not self._wake.is_set():  # have the writer write this batch soon
            if self._writer is None:
                self._start_writer()
            self._wake.set()

    def _start_writer(self) -> None:
        with self.lock:  # type: ignore[union-attr]  # events may come from several threads
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_batches, name="jobcore-log-writer", daemon=True
                )
                self._writer.start()

    def flush(self) -> None:
        with self._write_lock:
            count = len(self._pending)  # lines appended meanwhile wait for the next flush
            if not count:
                return
            text = "".join([self._pending.popleft() for _ in range(count)])
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):  # stderr closed or gone: nothing useful to do
                pass

    def _write_batches(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            time.sleep(self.delay)  # let the batch fill
            self.flush()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self.flush()
        super().close()


def direct_event_handler(logger: logging.Logger) -> BatchedStreamHandler | None:
    """The handler `logger`'s records reach if it is the only one and nothing filters them.

    Then a lifecycle event can go straight to `BatchedStreamHandler.emit_event`;
    with any other handler (an application's, pytest's) or a filter, None.
    """
    found: BatchedStreamHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if found is not None or type(handler) is not BatchedStreamHandler or handler.filters:
                return None
            if not hasattr(handler.formatter, "format_event"):
                return None
            found = handler
        if not current.propagate:
            break
        current = current.parent
    return found


def configure_logging(log_format: str = "text", level: int = logging.INFO) -> None:
    """Send jobcore's logs to stderr in `log_format`; replaces an earlier call's handler.

    Inside a click command the queued lines are also written when the command ends.
    """
    root = logging.getLogger("jobcore")
    drivers = logging.getLogger("psycopg")  # psycopg's and its pool's (`psycopg.pool`) lines
    for logger in (root, drivers):
        for old in list(logger.handlers):
            if getattr(old, "_jobcore", False):
                logger.removeHandler(old)
                old.close()
    handler = BatchedStreamHandler(sys.stderr)
    handler._jobcore = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    # Their lines in the same format (with --log-format json every stderr line is JSON),
    # not through Python's last-resort handler as plain text.
    drivers.addHandler(handler)
    if drivers.level == logging.NOTSET:
        drivers.setLevel(logging.WARNING)
    click = sys.modules.get("click")
    context = click.get_current_context(silent=True) if click is not None else None
    if context is not None:
        context.call_on_close(handler.flush)
