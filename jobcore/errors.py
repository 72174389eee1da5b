"""Exceptions: one root, plus the control exceptions handlers raise."""

from __future__ import annotations


class JobcoreError(Exception):
    """Root of every error jobcore raises on purpose."""


class ConfigError(JobcoreError):
    """A setting has a bad value; the message names the setting and its source."""


class InvalidPayload(JobcoreError):
    """A payload does not match its job type's model, or is not a JSON object."""


class UnknownJobType(JobcoreError):
    """No plugin registered a job type of this name."""


class PayloadTooLarge(JobcoreError):
    """The encoded payload exceeds `max_payload_bytes`."""


class JobNotFound(JobcoreError):
    """No job has this id."""


class IllegalTransition(JobcoreError):
    """The job is not in a state that allows the requested change."""


class StorageError(JobcoreError):
    """The job store cannot be opened or used. Backends raise only subclasses of this.

    Subclasses say whether waiting helps: `TransientStorageError` (back off and
    try again) or `PermanentStorageError` (an operator must act).
    """


class TransientStorageError(StorageError):
    """Trying again later may succeed (the worker backs off and retries)."""


class StorageBusy(TransientStorageError):
    """Another connection held the write lock (or a row lock) for longer than the wait allows."""


class StorageConnectionLost(TransientStorageError):
    """The connection to the store broke (server restart, network)."""


class StorageIOError(TransientStorageError):
    """The store reported an I/O error that may pass (file system or disk trouble)."""


class PermanentStorageError(StorageError):
    """Trying again will not help until someone changes something."""


class NotADatabase(PermanentStorageError):
    """The file or URL is not a jobcore store (not a database, or corrupt)."""


class StorageReadOnly(PermanentStorageError):
    """The store can be read but not written (permissions, read-only file system)."""


class StorageFull(PermanentStorageError):
    """The disk (or quota) is full."""


class SchemaTooNew(PermanentStorageError):
    """The store was migrated by a newer jobcore than this one."""


class StorageUnavailable(PermanentStorageError):
    """The store cannot be reached or opened (missing folder, no such file, bad location)."""


class PermanentError(JobcoreError):
    """Raised by a handler: fail the job now, without retrying."""


class RetryAfter(JobcoreError):
    """Raised by a handler: retry after exactly `seconds` (still bounded by max_attempts).

    `limit=True` (a rate-limited API said so): also hold the narrowest rate limit the job
    falls under (its key's, else its type's, else its queue's) full for that long, so no
    job of it is claimed anywhere until then (DESIGN §16; at most `max_retry_delay` and a
    day; without a rate limit it is a plain retry).
    """

    def __init__(self, seconds: float, message: str = "", *, limit: bool = False) -> None:
        if not seconds >= 0:  # NaN too: it compares false with everything
            raise ValueError(f"RetryAfter seconds must be a number >= 0, got {seconds!r}")
        self.seconds = float(seconds)
        self.limit = bool(limit)
        super().__init__(message or f"retry requested after {seconds:g}s")


class Interrupted(JobcoreError):
    """Raised by a handler that saw `ctx.should_stop` and stopped early."""


class JobTimeout(JobcoreError):
    """An attempt ran past its timeout."""
