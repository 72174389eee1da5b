"""`jobcore limit` and `jobcore limits` (DESIGN §16): set, list, clear; a bad value is one
`Error:` line (exit 1) or a usage error (exit 2), and changes nothing."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from hubproc import jobcore

_run = partial(jobcore, check=False)  # exits and output are what these tests check


def test_limit_set_list_clear_and_bad_values(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    assert _run(db, "enqueue", "noop", "{}", "--queue", "mail").returncode == 0
    made = _run(db, "limit", "mail", "--concurrency", "2")
    assert made.returncode == 0 and made.stdout == "queue mail: at most 2 at once\n"
    keyed = _run(db, "limit", "--type", "noop", "--per-key", "--concurrency", "1", "--json")
    assert json.loads(keyed.stdout) == {
        "scope": "key",
        "name": "noop",
        "concurrency": 1,
        "source": "set",
    }
    for bad in ("0", "1.5", "99999999999999999999999"):
        refused = _run(db, "limit", "mail", "--concurrency", bad)
        assert refused.returncode == 1, (bad, refused.stderr)
        assert refused.stderr.startswith("Error: ") and refused.stderr.count("\n") == 1
        assert "concurrency" in refused.stderr
    for usage in (
        ("limit", "mail", "--type", "noop", "--concurrency", "2"),  # both QUEUE and --type
        ("limit", "mail"),  # neither --concurrency nor --clear
    ):
        assert _run(db, *usage).returncode == 2, usage
    listed = json.loads(_run(db, "limits", "--json").stdout)["limits"]
    assert [(r["scope"], r["name"], r["concurrency"]) for r in listed] == [
        ("key", "noop", 1),
        ("queue", "mail", 2),
    ]
    assert "Concurrency limits" in _run(db, "stats").stdout
    cleared = _run(db, "limit", "mail", "--clear")
    assert cleared.stdout == "cleared the queue limit of mail\n"
    assert _run(db, "limit", "mail", "--clear").stdout == "mail had no queue limit\n"
