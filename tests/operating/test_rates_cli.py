"""`jobcore limit --rate` and `jobcore limits` for rate limits (DESIGN §16): set, list with
the starts in the window, clear; a bad value is one `Error:` line (exit 1), a wrong mix
of options a usage error (exit 2), and neither changes anything."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from hubproc import jobcore

_run = partial(jobcore, check=False)  # exits and output are what these tests check


def test_rate_limit_set_list_clear_and_bad_values(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    assert _run(db, "enqueue", "noop", "{}", "--queue", "mail").returncode == 0
    made = _run(db, "limit", "mail", "--rate", "50/1m")
    assert made.returncode == 0, made.stderr
    assert made.stdout == "queue mail: at most 50 started per 1m\n"
    both = _run(db, "limit", "--type", "noop", "--per-key", "--concurrency", "2", "--rate", "10/s")
    assert both.returncode == 0, both.stderr
    assert both.stdout.splitlines() == [
        "key noop: at most 2 at once per key",
        "key noop: at most 10 started per 1s per key",
    ]
    before = _run(db, "limits", "--json").stdout
    for bad in ["0/s", "fast"]:  # the rest: test_rates_store.test_rate_texts
        refused = _run(db, "limit", "mail", "--rate", bad)
        assert refused.returncode == 1 and refused.stderr.startswith("Error: "), refused.stderr
        assert "--rate" in refused.stderr
    # a good concurrency beside a bad rate: neither is written
    mixed = _run(db, "limit", "other", "--concurrency", "3", "--rate", "0/s")
    assert mixed.returncode == 1
    assert _run(db, "limit", "mail", "--rate", "5/s", "--clear").returncode == 2
    assert _run(db, "limits", "--json").stdout == before
    rows = json.loads(before)["limits"]
    rated = [(r["scope"], r["name"], r["rate"], r["period"], r["used"]) for r in rows if r["rate"]]
    assert rated == [("key", "noop", 10, 1.0, 0), ("queue", "mail", 50, 60.0, 0)]
    listed = _run(db, "limits").stdout
    assert "50/1m" in listed and "0 started" in listed and "10/1s" in listed
    stats = _run(db, "stats").stdout
    assert "Rate limits" in stats
    cleared = json.loads(_run(db, "limit", "mail", "--clear", "--json").stdout)
    assert cleared == {"scope": "queue", "name": "mail", "cleared": True}
    assert _run(db, "limit", "--type", "noop", "--per-key", "--clear").stdout == (
        "cleared the key limit of noop\n"
    )
