"""A worker writes its types' declared limits only when the store's differ (DESIGN §16):
an unchanged store costs no write lock at start."""

from __future__ import annotations

from collections.abc import Callable

import apsw
import jobcore_test_plugin as tp

from jobcore.concurrency import Limit, declaring_changes
from jobcore.operating import declare_types
from jobcore.queue import Queue

MakeQueue = Callable[..., Queue]


def _declared(scope: str, name: str, n: int) -> Limit:
    return Limit(scope, name, n, "declared")  # type: ignore[arg-type]


def test_nothing_to_write_when_the_store_already_holds_what_the_types_declare() -> None:
    stored = [_declared("type", "mail", 5), Limit("key", "charge", 1, "set")]
    assert not declaring_changes(stored, [_declared("type", "mail", 5)], ["noop"])
    # a set limit wins over a declared one: nothing to write either
    assert not declaring_changes(stored, [_declared("key", "charge", 3)], [])
    assert not declaring_changes([], [], ["noop", "mail"])


def test_a_new_changed_or_dropped_declaration_is_written() -> None:
    stored = [_declared("type", "mail", 5)]
    assert declaring_changes([], [_declared("type", "mail", 5)], [])
    assert declaring_changes(stored, [_declared("type", "mail", 6)], [])
    assert declaring_changes(stored, [], ["mail"])  # the type declares none any more
    assert declaring_changes(stored, [_declared("key", "mail", 1)], [])  # type -> per key
    assert not declaring_changes([Limit("type", "mail", 5, "set")], [], ["mail"])


def test_declaring_nothing_new_takes_no_write_lock(
    jobcore_make_queue: MakeQueue, jobcore_db: str
) -> None:
    queue = jobcore_make_queue(tp, busy_timeout=0.05)
    queue.storage.migrate()
    blocker = apsw.Connection(jobcore_db)
    blocker.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    try:
        declare_types(queue, sorted(t.name for t in queue.registry))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
