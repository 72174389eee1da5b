"""`jobcore copy --from URL --to URL`: every job, with its error and attempt history, between stores.

Rows are copied as they are (ids, statuses, times, results, history), in
batches inside one transaction on the target (a failed copy writes nothing), so a
team moving from SQLite to PostgreSQL keeps its past. Error texts PostgreSQL
cannot hold as they are (NUL, lone surrogates) arrive shown escaped, as outcomes
store them. A target
that already holds jobs is refused unless `--force` (then rows with the same
id are overwritten). Stop the workers on the source first: a job claimed
while copying arrives claimed and is reclaimed by the target's sweep once its
lease expires.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from jobcore.cli import CliState, pass_state
from jobcore.cli.output import emit_json
from jobcore.errors import StorageError
from jobcore.models import Job, compact_json
from jobcore.queue import Queue
from jobcore.storage.base import Storage

BATCH = 1000
_JSON_FIELDS = ("payload", "errors", "result", "meta", "history")


def _sqlite_value(name: str, value: Any) -> Any:
    if name in _JSON_FIELDS:
        return None if value is None and name == "result" else compact_json(value)
    if isinstance(value, bool):
        return int(value)
    if name == "status":
        return str(value)
    return value


def _import_sqlite(storage: Any, jobs: Sequence[Job], replace: bool) -> None:
    """Write whole rows into a SQLite store (its columns that `Job` knows; the rest keep defaults)."""
    with storage.transaction() as conn:
        present = {row[1] for row in conn.execute("PRAGMA table_info(jobs)").fetchall()}
        names = [name for name in Job.__dataclass_fields__ if name in present]
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        sql = f"{verb} INTO jobs ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})"
        conn.executemany(
            sql, [tuple(_sqlite_value(n, getattr(job, n)) for n in names) for job in jobs]
        )


def import_jobs(storage: Storage, jobs: Sequence[Job], *, replace: bool) -> None:
    """Write `jobs` as whole rows into `storage` (PostgreSQL or SQLite)."""
    importer = getattr(storage, "import_jobs", None)
    if importer is not None:
        importer(jobs, replace=replace)
        return
    from jobcore.storage.sqlite import SQLiteStorage

    if isinstance(storage, SQLiteStorage):
        _import_sqlite(storage, jobs, replace)
        return
    raise StorageError(f"cannot copy into a {type(storage).__name__}: it cannot import whole rows")


def copy_jobs(source: Storage, target: Storage, *, force: bool = False) -> int:
    """Copy every job of `source` into `target`; returns how many."""
    existing = sum(target.count_by_status().values())
    if existing and not force:
        raise StorageError(
            f"the target already holds {existing} jobs; copy into an empty store, "
            "or pass --force to add to it (jobs with the same id are overwritten)"
        )
    copied = 0
    batch: list[Job] = []
    # one transaction on the target: a copy that fails (a row the target refuses, a lost
    # connection) writes nothing, so it can be run again. Rows are read and written a
    # batch at a time, so memory stays one batch whatever the size of the store.
    with target.transaction():
        for job in source.scan(batch=BATCH):
            batch.append(job)
            if len(batch) >= BATCH:
                import_jobs(target, batch, replace=force)
                copied += len(batch)
                batch = []
        if batch:
            import_jobs(target, batch, replace=force)
            copied += len(batch)
    return copied


@click.command()
@click.option("--from", "source_url", required=True, metavar="URL_OR_PATH", help="Store to read.")
@click.option("--to", "target_url", required=True, metavar="URL_OR_PATH", help="Store to write.")
@click.option("--force", is_flag=True, help="Write into a target that already holds jobs.")
@click.option("--json", "as_json", is_flag=True)
@pass_state
def copy(state: CliState, source_url: str, target_url: str, force: bool, as_json: bool) -> None:
    """Copy every job, with its history, from one store to another (e.g. SQLite to PostgreSQL).

    Hub tokens and the agents registry are not copied: make the tokens again on the
    target (`jobcore --db URL tokens create …`).
    """
    if source_url == target_url:
        raise click.UsageError("--from and --to name the same store")
    source = Queue(db=source_url, config=state.config, pm=state.pm, create=False)
    target = Queue(db=target_url, config=state.config, pm=state.pm, create=True)
    try:
        copied = copy_jobs(source.storage, target.storage, force=force)
    finally:
        source.close()
        target.close()
    if as_json:
        emit_json({"copied": copied})
    else:
        click.echo(f"copied {copied} jobs")
