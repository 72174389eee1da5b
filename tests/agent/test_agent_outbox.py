"""The agent's local outbox: durable, first outcome per claim wins, per-worker delivery."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest
from jobcore_agent import outbox
from jobcore_agent.outbox import Outbox
from together import at_once

from jobcore.errors import JobcoreError


def test_outcomes_survive_a_restart_until_deleted(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    assert box.add(lease_id="L1", job_id="j1", worker_id="a", kind="result", body={"result": 1})
    assert box.add(lease_id="L2", job_id="j2", worker_id="a", kind="fail", body={"reason": "x"})
    assert not box.add(lease_id="L1", job_id="j1", worker_id="a", kind="fail", body={})
    box.close()
    # a separate process (a restarted agent) sees both, in order, the first outcome of L1 kept
    script = (
        "import sys; from jobcore_agent.outbox import Outbox; b = Outbox(sys.argv[1]);"
        "print([(p.lease_id, p.kind, p.body) for p in b.pending('a')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[('L1', 'result', {'result': 1}), ('L2', 'fail', {'reason': 'x'})]"
    box = Outbox(tmp_path)
    box.delete("L1")
    assert [p.lease_id for p in box.pending("a")] == ["L2"]
    box.close()


def test_each_worker_sees_only_its_own_outcomes(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.add(lease_id="L1", job_id="j1", worker_id="a", kind="result", body={})
    box.add(lease_id="L2", job_id="j2", worker_id="b", kind="result", body={})
    assert [p.lease_id for p in box.pending("b")] == ["L2"]
    assert box.count("a") == 1 and box.count() == 2
    box.replace("L2", kind="fail", body={"reason": "rejected"})
    assert box.pending("b")[0].kind == "fail"
    box.close()


def test_reconnect_backoff_grows_with_jitter_up_to_its_cap() -> None:
    from jobcore_agent.client import Backoff

    backoff = Backoff(cap=4.0, base=0.25)
    delays = [backoff.next() for _ in range(8)]
    for n, delay in enumerate(delays):
        ceiling = min(4.0, 0.25 * 2**n)
        assert ceiling / 2 <= delay <= ceiling
    assert len({round(d, 6) for d in delays[-3:]}) == 3  # jittered, not in lockstep
    backoff.reset()
    assert backoff.next() <= 0.25


def test_a_batch_is_added_and_deleted_whole_and_survives_a_killed_writer(tmp_path: Path) -> None:
    """A batch commits in one transaction; what committed survives its process being killed
    (synchronous=NORMAL in WAL: the commit is in the OS's cache, not lost with the process)."""
    script = (
        "import os, sys; from jobcore_agent.outbox import Outbox, Pending; b = Outbox(sys.argv[1]);"
        "rows = [Pending(f'L{i}', f'j{i}', 'a', 'result', {'result': i}, i, 0) for i in range(50)];"
        "added = b.add_many(rows + [Pending('L0', 'j0', 'a', 'fail', {}, 99, 0)]);"
        "print(len(added), flush=True); os.kill(os.getpid(), 9)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == -9 and done.stdout.strip() == "50", done.stderr
    box = Outbox(tmp_path)
    pending = box.pending("a")
    assert [p.lease_id for p in pending] == [f"L{i}" for i in range(50)]
    assert pending[0].kind == "result"  # the first outcome of a claim wins
    box.delete_many([f"L{i}" for i in range(0, 50, 2)])
    assert [p.lease_id for p in box.pending("a")] == [f"L{i}" for i in range(1, 50, 2)]
    box.close()


def test_agents_sharing_a_new_cache_dir_open_the_outbox_at_once(tmp_path: Path) -> None:
    # the second of two agents started together used to fail ("cannot open the agent's
    # outbox ... database is locked"): SQLite refused its switch to WAL without waiting
    failures: list[BaseException] = []
    for attempt in range(40):
        folder = tmp_path / str(attempt)
        for opened in at_once(2, lambda folder=folder: Outbox(folder)):
            if isinstance(opened, Outbox):
                opened.close()
            else:
                failures.append(opened)
    assert failures == []


def test_an_outbox_locked_by_another_process_for_too_long_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox, "LOCK_TIMEOUT_MS", 300)
    holder = apsw.Connection(str(tmp_path / "outbox.db"))
    holder.execute("BEGIN EXCLUSIVE; CREATE TABLE elsewhere(x)")
    try:
        began = time.monotonic()
        with pytest.raises(JobcoreError, match=r"stayed locked by another process for 0\.3 s"):
            Outbox(tmp_path)
        assert time.monotonic() - began < 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    Outbox(tmp_path).close()  # free again: it opens
