"""Read-only SQL on the store's own database, for SQLite and PostgreSQL stores.

The dashboard's aggregates are plain SQL with `:name` parameters over the
`jobs` table. `SQLiteSql` runs them on an APSW connection per thread to the
store's file; `PostgresSql` on a psycopg connection per thread whose
`search_path` is the store's schema. Each also answers a change token: a value
that differs whenever another connection changed the store (SQLite's
`data_version`; PostgreSQL's event sequence).
"""

from __future__ import annotations

import contextlib
import importlib
import re
import threading
from collections.abc import Callable
from typing import Any, Protocol

import apsw

from jobcore.errors import StorageError
from jobcore.storage.sqlite_connect import open_existing


class Sql(Protocol):
    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row of one read statement."""

    def change_token(self) -> int:
        """A number that changes whenever the store changed (cheap: called per request)."""

    def close(self) -> None: ...


class _PerThread:
    """One connection per thread, all closed by `close()`."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def get(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def drop(self) -> None:
        """Forget this thread's connection (it broke); the next `get()` opens a new one."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is None:
            return
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        with contextlib.suppress(Exception):  # already broken: nothing to give back
            conn.close()

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


class SQLiteSql:
    def __init__(self, path: str) -> None:
        self.path = path
        self._conns = _PerThread(self._open)
        self._watch = _PerThread(self._open)  # data_version counts other connections' commits
        self._watch_lock = threading.Lock()
        self._watch_conn: apsw.Connection | None = None

    def _open(self) -> apsw.Connection:
        conn = open_existing(self.path)
        conn.set_busy_timeout(5000)
        return conn

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        result: list[Any] = self._conns.get().execute(sql, params or {}).fetchall()
        return result

    def change_token(self) -> int:
        with self._watch_lock:  # one connection, so its data_version sees every other commit
            if self._watch_conn is None:
                self._watch_conn = self._open()
            rows: list[Any] = self._watch_conn.execute("PRAGMA data_version").fetchall()
            return int(rows[0][0])

    def close(self) -> None:
        self._conns.close()
        with self._watch_lock:
            if self._watch_conn is not None:
                self._watch_conn.close()
                self._watch_conn = None


_PARAM = re.compile(r"(?<!:):([a-z_][a-z0-9_]*)")


class PostgresSql:
    def __init__(self, conninfo: str, schema: str, change_token: Callable[[], int]) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self._token = change_token
        self._conns = _PerThread(self._open)

    def _open(self) -> Any:
        psycopg = importlib.import_module("psycopg")  # the postgres extra brings it
        conn = psycopg.connect(self.conninfo, autocommit=True)
        conn.execute(f'SET search_path TO "{self.schema}"')
        return conn

    @staticmethod
    def translate(sql: str) -> str:
        """`:name` parameters as psycopg's `%(name)s`; SQLite-only hints dropped."""
        return _PARAM.sub(r"%(\1)s", sql.replace(" NOT INDEXED", ""))

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Run a read; a connection lost to a server restart or a terminated backend is
        replaced and the read tried once more (reads are safe to repeat)."""
        psycopg = importlib.import_module("psycopg")
        statement = self.translate(sql)
        for tries_left in (1, 0):
            conn = self._conns.get()
            try:
                result: list[Any] = conn.execute(statement, params or {}).fetchall()
                return result
            except psycopg.OperationalError:
                if not conn.closed or tries_left == 0:
                    raise
                self._conns.drop()
        raise AssertionError("unreachable")  # pragma: no cover

    def change_token(self) -> int:
        return self._token()

    def close(self) -> None:
        self._conns.close()


def sql_for(storage: Any) -> Sql:
    """The reader for this store: its SQLite file, or its PostgreSQL database and schema."""
    path = getattr(storage, "path", None)
    if isinstance(path, str):
        return SQLiteSql(path)
    target = getattr(storage, "target", None)
    conninfo, schema = getattr(target, "conninfo", None), getattr(target, "schema", None)
    if isinstance(conninfo, str) and isinstance(schema, str):
        return PostgresSql(conninfo, schema, storage.last_event_seq)
    raise StorageError(
        f"the dashboard cannot read a {type(storage).__name__} store: it reads SQLite files and "
        "PostgreSQL databases"
    )
