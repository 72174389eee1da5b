"""A FastAPI endpoint that writes its row and enqueues its job in one async transaction.

    APP_DATABASE_URL=postgresql://app@127.0.0.1/app \\
    JOBCORE_DB=postgresql://app@127.0.0.1/app JOBCORE_PLUGINS=welcome_jobs \\
    uvicorn app:app

and the worker beside it: `JOBCORE_PLUGINS=welcome_jobs jobcore --db $JOBCORE_DB run`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from fastapi import FastAPI, HTTPException
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

from jobcore import AsyncQueue

DATABASE_URL = os.environ.get("APP_DATABASE_URL", "postgresql://127.0.0.1/app")
SCHEMA = os.environ.get("APP_SCHEMA", "public")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    pool = AsyncConnectionPool(
        DATABASE_URL, open=False, kwargs={"options": f"-c search_path={SCHEMA}"}
    )
    await pool.open()
    async with pool.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS signups (id serial PRIMARY KEY, email text UNIQUE)"
        )
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS referrals "
            "(signup int PRIMARY KEY REFERENCES signups, referrer int NOT NULL REFERENCES signups)"
        )
    async with AsyncQueue() as jobs:  # JOBCORE_DB, JOBCORE_PLUGINS: as `jobcore run` reads them
        app.state.pool, app.state.jobs = pool, jobs
        yield
    await pool.close()


app = FastAPI(lifespan=lifespan)


class Signup(BaseModel):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    referred_by: int | None = None  # an earlier signup's id


@app.post("/signups", status_code=201)
async def sign_up(signup: Signup) -> dict[str, object]:
    """The signup row and its welcome job commit together, or neither does."""
    try:
        async with app.state.pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    "INSERT INTO signups (email) VALUES (%s) RETURNING id", (signup.email,)
                )
            ).fetchone()
            job = await app.state.jobs.enqueue(
                "send_welcome", {"signup_id": row[0], "email": signup.email}, conn=conn
            )
            if signup.referred_by is not None:  # after the enqueue: a failure drops the job too
                await conn.execute(
                    "INSERT INTO referrals VALUES (%s, %s)", (row[0], signup.referred_by)
                )
    except psycopg.errors.UniqueViolation:
        raise HTTPException(409, f"{signup.email} has signed up already") from None
    except psycopg.errors.ForeignKeyViolation:
        raise HTTPException(422, f"no signup {signup.referred_by} to refer you") from None
    return {"id": row[0], "job": job.job.id}


@app.get("/signups/{signup_id}/job/{job_id}")
async def welcome_status(signup_id: int, job_id: str) -> dict[str, object]:
    job = await app.state.jobs.get(job_id)
    return {"signup": signup_id, "status": job.status.value, "result": job.result}
