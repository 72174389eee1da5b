"""files plugin: `jobcore reconcile` compares each file with the latest completed job on it."""

from __future__ import annotations

from pathlib import Path

from filesenv import Cli


def test_reconcile_ignores_jobs_that_later_jobs_superseded(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "c.txt").write_text("here before")
    cli = Cli(tmp_path, JOBCORE_FILES_ROOT=str(root))
    cli.enqueue_many(
        "create_file",
        [
            {"path": "a.txt", "content": "v1"},
            {"path": "b.txt", "content": "v1"},
            {"path": "d.txt", "content": "v1"},
            {"path": "./e.txt", "content": "v1"},
            {"path": "f.txt", "content": "v1"},
        ],
    )
    cli.enqueue_many("delete_file", [{"path": "c.txt"}])
    cli.drain()
    cli.enqueue_many(
        "create_file",
        [
            {"path": "b.txt", "content": "v2", "overwrite": True},
            {"path": "c.txt", "content": "v2"},
            {"path": "d.txt", "content": "v2", "overwrite": True},
            {"path": "f.txt", "content": "v2"},  # fails: no overwrite; supersedes nothing
        ],
        "--max-attempts",
        "1",
    )
    cli.enqueue_many("delete_file", [{"path": "a.txt"}, {"path": "e.txt"}])
    cli.drain()
    assert cli.reconcile() == (0, [])  # each file is as its latest completed job left it
    (root / "d.txt").write_text("edited by hand")
    (root / "f.txt").write_text("edited by hand")
    code, lines = cli.reconcile()
    jobs = cli.jobs()
    reported = sorted(
        (jobs[line.split(" ", 1)[0]]["payload"]["content"], line.split(": ", 1)[1][:21])
        for line in lines
    )
    assert code == 1
    assert reported == [("v1", "f.txt content differs"), ("v2", "d.txt content differs")]
