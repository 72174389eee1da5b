"""Review of PostgreSQL event delivery: held-back events, pruned cursors, prepared transactions."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import psycopg
import pytest
from jobcore_postgres.event_order import events_after_sql
from jobcore_postgres.storage import PostgresStorage
from pg_testing import SERVER, with_database

Factory = Callable[..., PostgresStorage]
HOUR = 3_600_000
T0 = 1_000_000_000_000


def _insert_event(conn: psycopg.Connection[tuple[object, ...]], schema: str, kind: str) -> int:
    row = conn.execute(
        f"INSERT INTO {schema}.events (at, kind) VALUES (%s, %s) RETURNING seq", (T0, kind)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_review2_a_pruned_cursor_skips_no_event_committed_after_it(
    pg_storage_factory: Factory,
) -> None:
    now = [T0]
    reader = pg_storage_factory(clock=lambda: now[0])
    schema = reader.schema
    conninfo = reader.target.conninfo
    with psycopg.connect(conninfo) as early, psycopg.connect(conninfo) as late:
        early.execute("SELECT pg_current_xact_id()")  # the older transaction id...
        late.execute("SELECT pg_current_xact_id()")
        _insert_event(late, schema, "x:late")  # ...but the younger one appends first
        cursor = _insert_event(early, schema, "x:cursor")
        early.commit()
        assert [e.kind for e in reader.events_after(0)] == ["x:cursor"]  # 'late' runs on
        late.commit()
    assert [e.kind for e in reader.events_after(cursor)] == ["x:late"]  # no pruning: fine
    now[0] += 2 * HOUR
    reader.sweep(force=True)  # prunes the cursor's event: 'x:late' is the newest
    assert [e.kind for e in reader.events_after(cursor)] == ["x:late"]


def _rows_examined_past(storage: PostgresStorage, cursor: int) -> int:
    """Rows events_after reads and throws away for `cursor` among 20k events."""
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {storage.schema}.events (at, kind) "
            "SELECT 0, 'x:e' FROM generate_series(1, 20000)"
        )
        conn.execute(f"DELETE FROM {storage.schema}.events WHERE seq = 19990")  # pruned
        conn.execute(f"ANALYZE {storage.schema}.events")
        sql = events_after_sql(storage._d).replace("%(seq)s", "%(seq)s::bigint")
        plan = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, {"seq": cursor, "limit": 1000}
        ).fetchone()
    assert plan is not None

    def removed(node: dict[str, object]) -> int:
        own = int(node.get("Rows Removed by Filter", 0))  # type: ignore[call-overload]
        children = node.get("Plans", [])
        assert isinstance(children, list)
        return own + sum(removed(child) for child in children)

    return removed(plan[0][0]["Plan"])  # type: ignore[index]


def test_review2_a_cursor_past_every_event_does_not_walk_them(
    pg_storage_factory: Factory,
) -> None:
    # was: every event examined (~250 ms per read at 1M events) for any Last-Event-ID
    # a client sends beyond the newest seq
    assert _rows_examined_past(pg_storage_factory(), 10_000_000) < 1000


def test_review2_a_cursor_with_no_row_does_not_walk_every_event(
    pg_storage_factory: Factory,
) -> None:
    assert _rows_examined_past(pg_storage_factory(), 19_990) < 1000


def test_review2_a_prepared_transaction_of_another_database_holds_nothing_back(
    pg_storage_factory: Factory,
) -> None:
    with psycopg.connect(SERVER, autocommit=True) as admin:
        row = admin.execute("SHOW max_prepared_transactions").fetchone()
        if row is None or int(row[0]) == 0:
            pytest.skip("the server has max_prepared_transactions = 0")
        other = f"jobcore_review2_{secrets.token_hex(3)}"
        admin.execute(f"CREATE DATABASE {other}")
    gid = f"review2-{secrets.token_hex(4)}"
    storage = pg_storage_factory()
    try:
        with psycopg.connect(with_database(SERVER, other), autocommit=True) as conn:
            conn.execute("BEGIN")
            conn.execute("CREATE TABLE held (x int)")  # takes a transaction id
            conn.execute(f"PREPARE TRANSACTION '{gid}'")
        storage.add_event("x:after")
        assert [e.kind for e in storage.events_after(0)] == ["x:after"]
    finally:
        with psycopg.connect(with_database(SERVER, other), autocommit=True) as conn:
            conn.execute(f"ROLLBACK PREPARED '{gid}'")
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {other} WITH (FORCE)")
