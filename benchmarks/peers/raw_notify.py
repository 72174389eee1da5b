"""The LISTEN/NOTIFY latency floor in plain psycopg: `python -m benchmarks.peers.raw_notify`.

The producer inserts a row holding time.time() and notifies in the same
statement (one autocommit round trip); the listener waits on its LISTEN
connection and, on each notification, claims the oldest pending row with
`FOR UPDATE SKIP LOCKED` on a second connection and stamps the time it got it.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from benchmarks.peers.common import latency_spacing, main

_TABLE = """
CREATE TABLE raw_latency (id bigserial PRIMARY KEY, status text NOT NULL, t0 float8 NOT NULL);
CREATE INDEX raw_latency_pending ON raw_latency (id) WHERE status = 'pending';
"""
_CLAIM = (
    "UPDATE raw_latency SET status = 'claimed' WHERE id = (SELECT id FROM raw_latency "
    "WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING t0"
)
_PRODUCE = (
    "WITH j AS (INSERT INTO raw_latency (status, t0) VALUES ('pending', %s) RETURNING id) "
    "SELECT pg_notify('raw_latency', j.id::text) FROM j"
)


def connect(dsn: str, schema: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}")


def install(dsn: str, schema: str) -> dict[str, Any]:
    with connect(dsn, schema) as conn:
        conn.execute(_TABLE)
    return {}


def latency_worker(dsn: str, schema: str, k: str) -> dict[str, Any]:
    """Claims and stamps jobs as notifications arrive; stops after `k`."""
    values: list[float] = []
    with connect(dsn, schema) as listen, connect(dsn, schema) as work:
        listen.execute("LISTEN raw_latency")
        while len(values) < int(k):
            for _ in listen.notifies(timeout=30.0, stop_after=1):
                while row := work.execute(_CLAIM).fetchone():
                    values.append((time.time() - row[0]) * 1000)
    return {"latency_ms": values}


def latency_producer(dsn: str, schema: str, k: str) -> dict[str, Any]:
    with connect(dsn, schema) as conn:
        for i in range(int(k)):
            time.sleep(latency_spacing(i))
            conn.execute(_PRODUCE, (time.time(),))
    return {}


if __name__ == "__main__":
    main(
        {
            "install": install,
            "latency-worker": latency_worker,
            "latency-producer": latency_producer,
        }
    )
