"""Start slots (DESIGN §6, crash accounting, `jobcore.start_slots`) on a real SQLite file:
the sweep charges exactly the dead worker's claims its executors had begun."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from testenv import open_fds_to, subprocess_env

from jobcore import JobContext, JobType, Payload, Queue, Worker, hookimpl, start_slots
from jobcore.models import Lease
from jobcore.start_slots import SLOT, StartSlots
from jobcore.storage.sqlite import SQLiteStorage

LEASE_MS = 1000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def __call__(self) -> int:
        return self.ms


def claimed_pair(tmp_path: Path) -> tuple[SQLiteStorage, Clock, list[Lease]]:
    """Two jobs claimed (not marked started) by a worker that then died."""
    clock = Clock()
    storage = SQLiteStorage(str(tmp_path / "jobs.db"), clock=clock)
    storage.migrate()
    with Queue(storage.path) as queue:
        queue.enqueue_many("noop", [{}, {}])
    jobs = storage.claim(worker="dead", limit=2, lease_ms=LEASE_MS, start=0)
    assert [job.started_at for job in jobs] == [None, None]
    return storage, clock, [Lease.of(job) for job in jobs]


def test_the_sweep_charges_the_claim_a_start_slot_names_and_releases_the_other(
    tmp_path: Path,
) -> None:
    storage, clock, (ran, waited) = claimed_pair(tmp_path)
    slots = StartSlots(storage.path, "dead")  # held by this (live) process: read, not taken
    assert slots.note(ran.lease_id, clock.ms) == 0  # the worker's lease ran out in this handler
    clock.ms += LEASE_MS + 1
    swept = {item.job.id: item.action for item in storage.sweep(force=True)}
    assert swept == {ran.job_id: "reclaimed", waited.job_id: "released"}
    charged, free = storage.get(ran.job_id), storage.get(waited.job_id)
    assert charged is not None and free is not None
    assert (charged.attempts, [e["error"] for e in charged.errors]) == (1, ["lease expired"])
    assert charged.history[-1]["started_at"] == clock.ms - LEASE_MS - 1
    assert (free.attempts, free.errors) == (0, [])
    assert slots.path.exists()  # its process lives: only it deletes its file
    slots.free(0)
    slots.close()
    storage.close()


def test_without_a_start_slot_every_claim_of_a_dead_worker_is_released_uncharged(
    tmp_path: Path,
) -> None:
    storage, clock, leases = claimed_pair(tmp_path)
    clock.ms += LEASE_MS + 1
    swept = {item.job.id: item.action for item in storage.sweep(force=True)}
    assert swept == {lease.job_id: "released" for lease in leases}
    storage.close()


def test_a_slot_naming_an_older_lease_or_garbage_charges_nothing(tmp_path: Path) -> None:
    storage, clock, leases = claimed_pair(tmp_path)
    path = start_slots.folder(storage.path) / f"{start_slots.digest('dead')}-0"  # nobody's
    path.parent.mkdir()
    older = start_slots.encode("0" * 32, clock.ms)  # a previous claim's lease
    assert older is not None
    torn = leases[0].lease_id[:10].encode()  # a write cut short by the crash
    path.write_bytes(older + torn + b"\0" * (SLOT - len(torn)) + b"x y z\n".ljust(SLOT))
    clock.ms += LEASE_MS + 1
    swept = {item.job.id: item.action for item in storage.sweep(force=True)}
    assert swept == {lease.job_id: "released" for lease in leases}
    assert not path.exists()  # a dead process's file, whose claims are all handled
    storage.close()


def test_a_lease_id_that_does_not_fit_a_slot_is_refused_not_cut(tmp_path: Path) -> None:
    slots = StartSlots(str(tmp_path / "jobs.db"), "w")
    assert slots.note("x" * SLOT, 1) is None
    assert slots.note("has space", 1) is None
    assert slots.note("abc", 7) == 0
    assert start_slots.read(str(tmp_path / "jobs.db"), "w") == {"abc": 7}
    slots.free(0)
    slots.close()
    assert slots.note("abc", 8) is None  # closed: nothing written, nothing left behind
    assert not start_slots.folder(str(tmp_path / "jobs.db")).exists()


class Seen(Payload):
    pass


def test_a_handler_begins_only_once_its_slot_names_its_attempt(
    jobcore_make_queue: Callable[..., Queue], jobcore_db: str
) -> None:
    """The worker's executors write the slot before the handler runs; the file goes at exit."""
    db = jobcore_db
    seen: list[tuple[str, dict[str, int]]] = []
    worker_ids: list[str] = []

    def look(payload: Seen, ctx: JobContext) -> None:
        seen.append((ctx.job.lease_id or "", start_slots.read(db, ctx.worker)))
        worker_ids.append(ctx.worker)

    class Plugin:
        @hookimpl
        def jobcore_register_job_types(self, register: Any) -> None:
            register(JobType(name="look", payload_model=Seen, handler=look))

    queue = jobcore_make_queue(Plugin())
    queue.enqueue_many("look", [{}] * 5)
    Worker(queue, concurrency=2, until_empty=True).run()
    assert len(seen) == 5
    for lease_id, begun in seen:
        assert lease_id in begun
    for job in queue.list_jobs():  # the outcome's statement recorded when it began
        entry = job.history[-1]
        assert job.started_at is not None and entry["started_at"] == job.started_at
        assert entry["started_at"] <= entry["ended_at"]
    assert not start_slots.files_of(db, worker_ids[0])
    assert not start_slots.folder(db).exists()


def test_a_worker_whose_slots_cannot_be_made_marks_starts_in_the_database(
    jobcore_make_queue: Callable[..., Queue], jobcore_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    start_slots.folder(jobcore_db).write_text("not a folder")  # mkdir fails: the marker path
    queue = jobcore_make_queue()
    queue.enqueue_many("noop", [{}] * 3)
    worker = Worker(queue, concurrency=1, until_empty=True)
    worker.run()
    assert worker.stats["completed"] == 3
    assert "cannot create start slots" in caplog.text
    stored = [job.history[-1]["started_at"] for job in queue.list_jobs()]
    assert None not in stored


def test_a_slot_is_one_aligned_write_per_start(tmp_path: Path) -> None:
    """Concurrent executors write distinct entries; none tears another's. An entry is
    reused only once freed, so the file holds no more than the attempts not yet done."""
    db = str(tmp_path / "jobs.db")
    slots = StartSlots(db, "w")

    def write(slot: int) -> None:
        held = None
        for n in range(500):
            entry = slots.note(f"lease{slot}-{n}", n)
            assert entry is not None and entry != held
            if held is not None:
                slots.free(held)  # the previous attempt of this executor is done
            held = entry

    threads = [threading.Thread(target=write, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    begun = start_slots.read(db, "w")
    assert {f"lease{slot}-499" for slot in range(4)} <= set(begun)
    assert all(started == int(lease.split("-")[1]) for lease, started in begun.items())
    assert slots.held() == 4
    assert os.path.getsize(slots.path) <= 8 * SLOT
    slots.close()
    assert not slots.path.exists()  # a stop is no crash: what it names is charged to nobody


def test_start_slots_are_private_and_never_written_through_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "jobs.db")
    slots = StartSlots(db, "w1")
    try:
        assert (start_slots.folder(db).stat().st_mode & 0o777) == 0o700
        assert (slots.path.stat().st_mode & 0o777) == 0o600
    finally:
        slots.close()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    monkeypatch.setattr(start_slots.os, "urandom", lambda n: b"\1" * n)  # a name foreseen
    planted = start_slots.folder(db) / f"{start_slots.digest('w2')}-{'01' * 6}"
    planted.parent.mkdir()
    planted.symlink_to(victim)
    assert StartSlots.open(db, "w2") is None  # refused (logged): starts go to the database
    assert victim.read_text() == "keep me\n"


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """`immutable(folder)`: nothing in `folder` can be deleted, not even by root
    (`chattr +i`), until the test ends."""
    made: list[Path] = []

    def make(path: Path) -> None:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("chattr +i is not available on this file system")
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_dead_file_that_cannot_be_deleted_is_let_go_of_and_swept_again(
    tmp_path: Path, immutable: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep charges what a dead process's file names; a file it cannot delete is
    logged and its descriptor (and lock) let go of, so a later sweep can take it again."""
    storage, clock, (ran, waited) = claimed_pair(tmp_path)
    note = (  # a worker process that noted a start, then died without closing its file
        "import os, sys; from jobcore.start_slots import StartSlots; "
        "StartSlots(sys.argv[1], 'dead').note(sys.argv[2], int(sys.argv[3])); os._exit(0)"
    )
    subprocess.run(
        [sys.executable, "-c", note, storage.path, ran.lease_id, str(clock.ms)],
        env=subprocess_env(),
        check=True,
    )
    [dead] = list(start_slots.folder(storage.path).iterdir())
    immutable(dead.parent)
    clock.ms += LEASE_MS + 1
    swept = {item.job.id: item.action for item in storage.sweep(force=True)}
    assert swept == {ran.job_id: "reclaimed", waited.job_id: "released"}
    assert any("cannot delete" in r.getMessage() for r in caplog.records)
    assert dead.exists() and open_fds_to(str(dead)) == 0  # let go of
    [again] = start_slots.dead_files(storage.path)  # no process holds it: a sweep takes it
    again.release()
    storage.close()
