"""psycopg's exceptions mapped to the core's `StorageError` kinds (driver errors never leak)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import psycopg_pool

from jobcore.errors import (
    IllegalTransition,
    NotADatabase,
    PermanentStorageError,
    StorageBusy,
    StorageConnectionLost,
    StorageError,
    StorageFull,
    StorageIOError,
    StorageReadOnly,
    StorageUnavailable,
)

# SQLSTATE (exact, then by two-character class) -> (kind, what to do)
_EXACT: dict[str, tuple[type[StorageError], str]] = {
    "3D000": (StorageUnavailable, "create the database or fix the URL's database name"),
    "28000": (StorageUnavailable, "check the user name and the server's pg_hba.conf"),
    "28P01": (StorageUnavailable, "check the password in the URL or ~/.pgpass"),
    "25006": (StorageReadOnly, "point --db at the primary, not a read-only replica"),
    "42501": (StorageReadOnly, "grant the user rights on jobcore's schema and tables"),
    "53100": (StorageFull, "free disk space on the database server"),
    "57P01": (StorageConnectionLost, "the server is restarting; jobcore retries"),
    "57P02": (StorageConnectionLost, "the server is restarting; jobcore retries"),
    "57P03": (StorageConnectionLost, "the server is starting up; jobcore retries"),
    "57014": (StorageBusy, "a statement was cancelled (statement_timeout?); jobcore retries"),
    "55P03": (StorageBusy, "a lock was not available; jobcore retries"),
    "40001": (StorageBusy, "a serialization conflict; jobcore retries"),
    "40P01": (StorageBusy, "a deadlock was broken by the server; jobcore retries"),
    "53300": (
        StorageBusy,
        "the server has too many connections; lower pool_max or raise max_connections",
    ),
    "XX001": (NotADatabase, "the server reports corrupted data; restore from a backup"),
}
_CLASSES: dict[str, tuple[type[StorageError], str]] = {
    "08": (StorageConnectionLost, "is the server up and reachable? jobcore retries"),
    "53": (StorageBusy, "the server is short of resources; jobcore retries"),
    "58": (StorageIOError, "the server reported an I/O error; check its logs"),
}

# class 54 (program_limit_exceeded): a value too large for the server, not a lost
# connection; retrying the same value fails the same way. The index names the field.
_TOO_LARGE = "54"
_INDEXED_FIELDS = {
    "jobs_idempotency": "type and idempotency_key",
    "jobs_claim_queue": "queue",
    "jobs_claim_type": "type",
    "jobs_claim_keyed": "type and concurrency key",
    "jobs_held_keyed": "type and concurrency key",
    "jobs_parent": "parent_id",
    "jobs_claimed_by": "worker id",
}
_INDEX_NAME = re.compile(r'for index "([^"]+)"')


def _too_large(exc: BaseException, where: str) -> StorageError:
    """A class 54 error as a permanent one naming the field behind the index it names."""
    found = _INDEX_NAME.search(str(exc))
    field = _INDEXED_FIELDS.get(found.group(1)) if found else None
    what = f"the {field} of a job" if field else "a value"
    return PermanentStorageError(
        f"PostgreSQL at {where}: {what} is too large to store ({first_line(exc)}); "
        "use a shorter value (not retried)"
    )


# connection failures carry no SQLSTATE in psycopg: recognise the permanent ones by message
_CONNECT_FAILURES: tuple[tuple[str, str], ...] = (
    ("does not exist", "create the database (or role) or fix the URL"),
    ("password authentication failed", "check the password in the URL or ~/.pgpass"),
    ("no pg_hba.conf entry", "allow this client in the server's pg_hba.conf"),
    ("could not translate host name", "fix the host name in the URL"),
    ("invalid connection option", "remove the unknown parameter from the URL"),
    ("invalid dsn", "fix the URL"),
    ("unrecognized configuration parameter", "fix the URL's options (or PGOPTIONS)"),
    ("invalid value for parameter", "fix the URL's options (or PGOPTIONS)"),
)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _reason(text: str) -> str:
    """libpq's message without its `connection to server … failed:` prefix."""
    line = text.strip().splitlines()[0] if text.strip() else text
    return line.rsplit("failed: ", 1)[-1].replace("FATAL:  ", "")


def translate(exc: BaseException, where: str) -> StorageError:
    """The `StorageError` for a driver exception raised while using the store `where`."""
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return StorageConnectionLost(
            f"no connection to PostgreSQL at {where} in time ({first_line(exc)}): the server "
            "is unreachable, or all pooled connections are in use (raise [plugins.postgres] "
            "pool_max); jobcore retries"
        )
    if isinstance(exc, psycopg_pool.PoolClosed):
        return StorageError(f"the storage for {where} was closed")
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate and sqlstate.startswith(_TOO_LARGE):
        return _too_large(exc, where)
    kind_fix = None
    if sqlstate:
        kind_fix = _EXACT.get(sqlstate) or _CLASSES.get(sqlstate[:2])
    if kind_fix is None and isinstance(exc, psycopg.OperationalError):
        text = str(exc)
        for fragment, fix in _CONNECT_FAILURES:
            if fragment in text:
                return StorageUnavailable(f"PostgreSQL at {where}: {_reason(text)}; {fix}")
        kind_fix = (StorageConnectionLost, "is the server up and reachable? jobcore retries")
    if kind_fix is None:
        return StorageError(f"PostgreSQL at {where}: {first_line(exc)}")
    kind, fix = kind_fix
    return kind(f"PostgreSQL at {where}: {first_line(exc)}; {fix}")


@contextmanager
def mapped(where: str) -> Iterator[None]:
    """Re-raise psycopg and pool errors as `StorageError` kinds."""
    try:
        yield
    except (StorageError, IllegalTransition):
        raise
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise translate(exc, where) from exc
