"""`jobcore copy` into PostgreSQL: error texts SQLite holds but PostgreSQL cannot take as
they are (NUL, lone surrogates) arrive shown escaped, and a copy that fails writes
nothing, however many batches it had written (DESIGN §14)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jobcore_postgres
import pytest
from click.testing import CliRunner, Result
from jobcore_postgres.copy import BATCH

from jobcore import Queue
from jobcore.cli import cli
from jobcore.testing import make_queue

JOBS = BATCH + 500  # more than one batch: the first is written before the bad row is read


@pytest.fixture
def sqlite_source(tmp_path: Path) -> Iterator[tuple[str, Queue]]:
    path = str(tmp_path / "source.db")
    queue = make_queue(path)
    queue.enqueue_many("noop", [{}] * JOBS)
    yield path, queue
    queue.close()


def _last_id(queue: Queue) -> str:
    with queue.transaction() as conn:
        return str(conn.execute("SELECT max(id) FROM jobs").fetchone()[0])


def _copy(source: str, target: str) -> Result:
    env = {"JOBCORE_PLUGINS": ""}
    return CliRunner().invoke(
        cli, ["copy", "--from", source, "--to", target], env=env, catch_exceptions=False
    )


def _count(pg_url: str) -> int:
    queue = make_queue(pg_url, jobcore_postgres)
    try:
        return sum(queue.storage.count_by_status().values())
    finally:
        queue.close()


def test_nul_and_lone_surrogates_in_error_texts_are_copied_escaped(
    sqlite_source: tuple[str, Queue], pg_url: str
) -> None:
    path, queue = sqlite_source
    bad = _last_id(queue)
    with queue.transaction() as conn:
        conn.execute(
            "UPDATE jobs SET status = 'failed', last_error = 'bad' || char(0) || 'err', "
            "errors = json_array(json_object('error', 'bad' || char(0) || 'err')), "
            """history = '[{"outcome": "failed", "error": "x\\udcff"}]' WHERE id = ?""",
            (bad,),
        )
    result = _copy(path, pg_url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"copied {JOBS} jobs"
    target = make_queue(pg_url, jobcore_postgres)
    try:
        job: Any = target.get(bad)
        assert job.last_error == "bad\\x00err"
        assert job.errors == [{"error": "bad\\x00err"}]
        assert job.history == [{"outcome": "failed", "error": "x\\udcff"}]
    finally:
        target.close()


def test_a_failed_copy_writes_nothing_and_can_run_again(
    sqlite_source: tuple[str, Queue], pg_url: str
) -> None:
    path, queue = sqlite_source
    bad = _last_id(queue)  # read last: a batch of good rows is written before it
    with queue.transaction() as conn:  # a NUL in a name: refused, never rewritten
        conn.execute("UPDATE jobs SET queue = 'q' || char(0) WHERE id = ?", (bad,))
    failed = _copy(path, pg_url)
    assert failed.exit_code == 1
    errors = [line for line in failed.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "NUL" in errors[0], failed.stderr
    assert _count(pg_url) == 0
    with queue.transaction() as conn:
        conn.execute("UPDATE jobs SET queue = 'q' WHERE id = ?", (bad,))
    again = _copy(path, pg_url)
    assert again.exit_code == 0, again.stderr  # not "the target already holds jobs"
    assert _count(pg_url) == JOBS


def test_event_data_with_unstorable_text_is_stored_escaped(pg_url: str) -> None:
    """Event data goes to a jsonb column too (`add_event`, e.g. a hub worker event)."""
    queue = make_queue(pg_url, jobcore_postgres)
    try:
        storage: Any = queue.storage
        storage.migrate()
        seq = storage.add_event("worker:lost", worker_id="w", data={"why": "a\x00b \udcff"})
        [event] = [e for e in storage.events_after(seq - 1) if e.seq == seq]
        assert event.data == {"why": "a\\x00b \\udcff"}
    finally:
        queue.close()
