"""The outbox on async connections (PostgreSQL): psycopg `AsyncConnection` and SQLAlchemy
`AsyncSession`; commit -> the row and the job, rollback or a cancelled task -> neither."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import String, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from jobcore import AsyncQueue, Queue
from jobcore.errors import StorageError
from jobcore.testing import make_queue
from jobcore.testing.recorder import HookRecorder


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[str] = mapped_column(String, primary_key=True)


class PG:
    def __init__(self, database: str, schema: str) -> None:
        self.database, self.schema = database, schema
        self.url = f"{database}?schema={schema}"

    def orders(self) -> list[str]:
        with psycopg.connect(self.database) as conn:
            rows = conn.execute(f"SELECT id FROM {self.schema}.orders ORDER BY id")
            return [row[0] for row in rows]


@pytest.fixture
def pg(pg_server_database: str) -> Iterator[PG]:
    schema = f"o{secrets.token_hex(4)}"
    with psycopg.connect(pg_server_database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.orders (id text PRIMARY KEY)")
    yield PG(pg_server_database, schema)


@pytest.fixture
def recorder() -> HookRecorder:
    return HookRecorder()


@pytest.fixture
def queue(pg: PG, recorder: HookRecorder) -> Iterator[Queue]:
    import jobcore_postgres

    made = make_queue(pg.url, jobcore_postgres, recorder)
    made.storage.migrate()
    yield made
    made.close()


def test_psycopg_async_connection_commit_rollback_and_cancel(
    queue: Queue, pg: PG, recorder: HookRecorder
) -> None:
    started = asyncio.Event()

    async def cancelled_order(aq: AsyncQueue, conn: psycopg.AsyncConnection) -> None:
        async with conn.transaction():
            await conn.execute(f"INSERT INTO {pg.schema}.orders VALUES ('cancelled')")
            await aq.enqueue("noop", {"sleep": 3}, conn=conn)
            started.set()
            await asyncio.sleep(3600)  # cancelled here, inside the transaction

    async def main() -> tuple[str, str, str]:
        async with AsyncQueue(queue=queue) as aq:
            async with await psycopg.AsyncConnection.connect(pg.database) as conn:
                async with conn.transaction():
                    await conn.execute(f"INSERT INTO {pg.schema}.orders VALUES ('kept')")
                    kept = (await aq.enqueue("noop", {"sleep": 1}, conn=conn)).job.id
                with pytest.raises(RuntimeError):
                    async with conn.transaction():
                        await conn.execute(f"INSERT INTO {pg.schema}.orders VALUES ('lost')")
                        lost = (await aq.enqueue("noop", {"sleep": 2}, conn=conn)).job.id
                        raise RuntimeError("payment failed")
                task = asyncio.ensure_future(cancelled_order(aq, conn))
                await started.wait()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                async with conn.transaction():  # the connection is usable afterwards
                    await conn.execute(f"INSERT INTO {pg.schema}.orders VALUES ('after')")
            return kept, lost, "cancelled"

    kept, lost, _ = asyncio.run(main())
    assert pg.orders() == ["after", "kept"]
    assert queue.storage.get(kept) is not None
    assert queue.storage.get(lost) is None
    assert [j.payload["sleep"] for j in queue.storage.list_jobs(limit=10)] == [1]
    assert [call.job.id for call in recorder.of("job_enqueued")] == [kept]


def test_sqlalchemy_async_session_commit_rollback_and_cancel(queue: Queue, pg: PG) -> None:
    engine = create_async_engine(
        pg.database.replace("postgresql://", "postgresql+psycopg://"),
        connect_args={"options": f"-c search_path={pg.schema}"},
    )
    started = asyncio.Event()

    async def cancelled_order(aq: AsyncQueue) -> None:
        async with AsyncSession(engine) as session, session.begin():
            session.add(Order(id="cancelled"))
            await session.flush()
            await aq.enqueue("noop", {"sleep": 3}, conn=session)
            started.set()
            await asyncio.sleep(3600)

    async def main() -> str:
        async with AsyncQueue(queue=queue) as aq:
            async with AsyncSession(engine) as session, session.begin():
                session.add(Order(id="kept"))
                kept = (await aq.enqueue("noop", {"sleep": 1}, conn=session)).job.id
            with pytest.raises(RuntimeError):
                async with AsyncSession(engine) as session, session.begin():
                    session.add(Order(id="lost"))
                    await aq.enqueue("noop", {"sleep": 2}, conn=session)
                    raise RuntimeError("payment failed")
            async with AsyncSession(engine) as session, session.begin():  # AsyncConnection too
                await session.execute(text("INSERT INTO orders VALUES ('conn')"))
                await aq.enqueue("noop", {"sleep": 4}, conn=await session.connection())
            task = asyncio.ensure_future(cancelled_order(aq))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await engine.dispose()
        return kept

    kept = asyncio.run(main())
    assert pg.orders() == ["conn", "kept"]
    assert queue.storage.get(kept) is not None
    assert sorted(j.payload["sleep"] for j in queue.storage.list_jobs(limit=10)) == [1, 4]


def test_a_connection_without_a_transaction_is_refused(queue: Queue, pg: PG) -> None:
    async def main() -> None:
        async with AsyncQueue(queue=queue) as aq:
            conn = await psycopg.AsyncConnection.connect(pg.database, autocommit=True)
            async with conn:
                with pytest.raises(StorageError, match="no open transaction"):
                    await aq.enqueue("noop", {}, conn=conn)
            with (
                pytest.raises(StorageError, match="must be a psycopg AsyncConnection"),
                psycopg.connect(pg.database) as sync_conn,
            ):
                await aq.enqueue("noop", {}, conn=sync_conn)

    asyncio.run(main())
    assert queue.storage.count_by_status() == {}
