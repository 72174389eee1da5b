"""The outbox with the application's own connection: psycopg and SQLAlchemy (README examples)."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from jobcore import Queue


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[str] = mapped_column(String, primary_key=True)


def orders(conninfo: str, schema: str) -> list[str]:
    with psycopg.connect(conninfo) as conn:
        return [row[0] for row in conn.execute(f"SELECT id FROM {schema}.orders ORDER BY id")]


def test_sqlalchemy_session_commits_or_rolls_back_the_order_and_its_job(
    queue: Queue, pg_database: str, pg_schema: str
) -> None:
    engine = create_engine(
        pg_database.replace("postgresql://", "postgresql+psycopg://"),
        connect_args={"options": f"-c search_path={pg_schema}"},
    )
    Base.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        session.add(Order(id="kept"))
        raw = session.connection().connection.driver_connection  # the psycopg connection
        kept = queue.enqueue("noop", {}, conn=raw).job
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        session.add(Order(id="lost"))
        session.flush()
        raw = session.connection().connection.driver_connection
        lost = queue.enqueue("noop", {}, conn=raw).job
        raise RuntimeError("payment failed")
    engine.dispose()
    assert orders(pg_database, pg_schema) == ["kept"]
    assert queue.storage.get(kept.id) is not None
    assert queue.storage.get(lost.id) is None


def test_psycopg_connection_without_autocommit_joins_its_implicit_transaction(
    queue: Queue, pg_database: str, pg_schema: str
) -> None:
    with psycopg.connect(pg_database) as conn:
        conn.execute(f"CREATE TABLE {pg_schema}.orders (id text PRIMARY KEY)")
        conn.commit()
        job = queue.enqueue("noop", {}, conn=conn).job  # psycopg begins; nothing committed
        conn.execute(f"INSERT INTO {pg_schema}.orders VALUES ('o1')")
        conn.rollback()
        assert queue.storage.get(job.id) is None
        with conn.transaction():
            conn.execute(f"INSERT INTO {pg_schema}.orders VALUES ('o2')")
            job = queue.enqueue("noop", {}, conn=conn).job
    assert orders(pg_database, pg_schema) == ["o2"]
    assert queue.storage.get(job.id) is not None
