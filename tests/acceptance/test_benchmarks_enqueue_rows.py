"""`--against`'s enqueue rows, run as `--against` runs them (`python -m benchmarks.against_row
ROW N DIR`, a process of its own): jobcore's and the raw floor's, FULL and NORMAL, each
with jobs/s and CPU per job, and each leaves the jobs it was asked for in its database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _rows() -> list[str]:
    """`benchmarks.against.ROWS`, read from the checkout (the benchmarks are not installed)."""
    code = "import json; from benchmarks.against import ROWS; print(json.dumps(list(ROWS)))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rows: list[str] = json.loads(done.stdout)
    return rows


ENQUEUE_ROWS = [row for row in _rows() if "enqueue" in row or "batch" in row]


def test_every_enqueue_row_has_its_floor() -> None:
    assert sorted(ENQUEUE_ROWS) == sorted(
        f"{prefix}{kind}{sync}"
        for prefix in ("", "raw-")
        for kind in ("enqueue", "batch")
        for sync in ("", "-normal")
    )


@pytest.mark.parametrize("row", ENQUEUE_ROWS)
def test_row_reports_rate_and_cpu(tmp_path: Path, row: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.against_row", row, "2000", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(figures) == {"rate", "cpu_per_job"}
    assert figures["rate"] > 0 and figures["cpu_per_job"] > 0
    (db,) = [path for path in tmp_path.glob("*.db")]
    assert db.name.startswith("raw-" if row.startswith("raw-") else "jc-")
    conn = apsw.Connection(str(db))
    (count,) = conn.execute("SELECT count(*) FROM jobs").fetchone()
    assert count == 2000
    (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"
