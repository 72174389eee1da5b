"""files plugin: jobcore's own files (database, sidecars, config, agent cache) are never a target.

Real worker processes in a folder of their own, with the default `./jobcore.db`
and `./jobcore.toml` beside them, as a first-time user has them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import jobcore_files
import pytest
from filesenv import Cli
from jobcore_agent.commands import read_token
from jobcore_agent.settings import AgentSettings

from jobcore import PermanentError
from jobcore.config import Config
from jobcore.owned import own

CONFIG = "[jobcore]\nmax_attempts = 2\n"
HOSTILE_CONFIG = '[plugins.files]\nroot = "/"\n'


def test_the_default_root_is_a_folder_of_its_own_not_the_working_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "jobcore.toml").write_text(CONFIG)
    cli = Cli(tmp_path)
    deleted = cli.enqueue("delete_file", {"path": "jobcore.db", "require_exists": True})
    planted = cli.enqueue(
        "create_file", {"path": "jobcore.toml", "content": HOSTILE_CONFIG, "overwrite": True}
    )
    hello = cli.enqueue("create_file", {"path": "hello.txt", "content": "hi"})
    cli.drain()
    assert (tmp_path / "jobcore.db").exists()  # the queue and its history survived
    assert (tmp_path / "jobcore.toml").read_text() == CONFIG
    jobs = cli.jobs()
    assert jobs[hello]["status"] == "completed"
    assert jobs[deleted]["status"] == "failed"  # there is no jobcore.db in the files root
    assert jobs[planted]["status"] == "completed"  # harmless: nothing reads it there
    folder = tmp_path / "jobcore-files"
    assert (folder / "hello.txt").read_text() == "hi"
    assert (folder / "jobcore.toml").read_text() == HOSTILE_CONFIG
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


REFUSED = [
    ("delete_file", {"path": "jobcore.db"}, "jobcore's database"),
    ("delete_file", {"path": "jobcore.db-wal"}, "a sidecar of jobcore's database"),
    ("delete_file", {"path": "./jobcore.db-shm"}, "a sidecar of jobcore's database"),
    ("create_file", {"path": "jobcore.db-journal", "content": "hot"}, "a sidecar of jobcore's"),
    (
        "create_file",
        {"path": "jobcore.toml", "content": HOSTILE_CONFIG, "overwrite": True},
        "jobcore's config file",
    ),
    ("create_file", {"path": "db-alias", "content": "x", "overwrite": True}, "jobcore's database"),
    ("delete_file", {"path": "db-alias"}, "jobcore's database"),
]


def test_a_root_holding_jobcores_files_still_refuses_them(tmp_path: Path) -> None:
    (tmp_path / "jobcore.toml").write_text(CONFIG)
    cli = Cli(tmp_path, JOBCORE_FILES_ROOT=".")
    cli.enqueue("noop", {})  # makes the database
    os.link(tmp_path / "jobcore.db", tmp_path / "db-alias")  # another name, the same inode
    ids = [cli.enqueue(job_type, payload) for job_type, payload, _ in REFUSED]
    cli.drain("--concurrency", "1")  # the database is open (with -wal, -shm) while jobs run
    jobs = cli.jobs()
    for job_id, (_, payload, why) in zip(ids, REFUSED, strict=True):
        shown = jobs[job_id]
        assert shown["status"] == "failed" and shown["attempts"] == 1, (payload, shown)
        assert why in shown["last_error"], shown["last_error"]
        assert "files jobs never touch jobcore's own files" in shown["last_error"]
    assert (tmp_path / "jobcore.toml").read_text() == CONFIG
    assert not (tmp_path / "jobcore.db-journal").exists()
    assert (tmp_path / "db-alias").stat().st_ino == (tmp_path / "jobcore.db").stat().st_ino


def test_the_config_and_database_in_use_are_refused_wherever_they_are(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "settings.toml").write_text(CONFIG)
    cli = Cli(
        tmp_path,
        "--db",
        str(data / "queue.sqlite"),
        "--config",
        str(data / "settings.toml"),
        JOBCORE_FILES_ROOT=str(data),
    )
    ids = [
        cli.enqueue("delete_file", {"path": "queue.sqlite"}),
        cli.enqueue("create_file", {"path": "settings.toml", "content": "x", "overwrite": True}),
        cli.enqueue("create_file", {"path": "queue.sqlite-mj1234", "content": "x"}),
        cli.enqueue("create_file", {"path": "fine.txt", "content": "x"}),
    ]
    cli.drain()
    jobs = cli.jobs()
    statuses = [jobs[job_id]["status"] for job_id in ids]
    assert statuses == ["failed", "failed", "failed", "completed"]
    assert (data / "queue.sqlite").exists() and (data / "settings.toml").read_text() == CONFIG


def test_the_agent_token_file_is_never_a_target(tmp_path: Path) -> None:
    token = tmp_path / "agent.token"
    token.write_text("secret-token\n")
    assert read_token(AgentSettings(token_file=str(token))) == "secret-token"  # registers it
    config = Config(file={"plugins": {"files": {"root": str(tmp_path)}}})
    for path in ("agent.token", str(token)):
        with pytest.raises(PermanentError, match="is jobcore's own file"):
            jobcore_files.write_file(config, path, b"attacker-token", overwrite=True)
    assert token.read_text() == "secret-token\n"


def test_an_owned_folder_such_as_the_agent_cache_is_never_entered(tmp_path: Path) -> None:
    root = tmp_path / "root"
    cache = root / "agent-cache"
    (cache / "artifacts").mkdir(parents=True)
    own(cache, "folder")  # what `jobcore agent` does with its --cache-dir
    config = Config(file={"plugins": {"files": {"root": str(root)}}})
    for path in ("agent-cache/artifacts/solver", "agent-cache/outbox.db"):
        with pytest.raises(PermanentError, match="jobcore's own folder"):
            jobcore_files.write_file(config, path, b"#!/bin/sh\n", overwrite=True)
    assert list((cache / "artifacts").iterdir()) == []
    inside = Config(file={"plugins": {"files": {"root": str(cache / "artifacts")}}})
    with pytest.raises(PermanentError, match="is inside jobcore's own folder"):
        jobcore_files.write_file(inside, "solver", b"x", overwrite=True)


def test_a_database_named_through_a_symlink_keeps_its_real_sidecars(tmp_path: Path) -> None:
    real = tmp_path / "data"
    real.mkdir()
    (tmp_path / "queue.db").symlink_to(real / "real.db")
    cli = Cli(tmp_path, "--db", "queue.db", JOBCORE_FILES_ROOT=str(real))
    job = cli.enqueue("create_file", {"path": "real.db-journal", "content": "hot journal"})
    cli.drain()
    shown = cli.jobs()[job]
    assert shown["status"] == "failed" and "a sidecar of jobcore's database" in shown["last_error"]
    assert not (real / "real.db-journal").exists() and (real / "real.db").exists()


def test_the_hubs_artifact_store_beside_the_database_is_never_a_target(tmp_path: Path) -> None:
    """Executables agents run: a planted `<sha>` would stay "already stored" for every upload."""
    from jobcore_http.artifacts import default_artifacts_dir

    cli = Cli(tmp_path, JOBCORE_FILES_ROOT=".")
    cli.enqueue("noop", {})  # makes the database
    sha = "ab" * 32
    stores = [default_artifacts_dir("jobcore.db"), default_artifacts_dir("postgresql://h/db")]
    for store in stores:
        (tmp_path / store).mkdir()
        (tmp_path / store / sha).write_text("the real executable")
    paths = [f"{store}/{name}" for store in stores for name in (sha, "new")]
    cli.enqueue_many(
        "create_file", [{"path": path, "content": "planted", "overwrite": True} for path in paths]
    )
    cli.enqueue_many("delete_file", [{"path": path} for path in paths])
    cli.drain()
    jobs = cli.jobs()
    assert len(jobs) == 1 + 2 * len(paths)
    for job in jobs.values():
        if job["type"] != "noop":
            assert job["status"] == "failed" and job["attempts"] == 1, job
            assert "files jobs never touch jobcore's own files" in job["last_error"]
    for store in stores:
        assert os.listdir(tmp_path / store) == [sha]
        assert (tmp_path / store / sha).read_text() == "the real executable"


def test_jobcores_folders_in_the_users_home_are_never_entered(tmp_path: Path) -> None:
    """A worker whose root is the home folder: the agent's cached executables (run by hash,
    trusted once cached; a replace keeps mode 0755) and the hub's session key stay untouched."""
    home = tmp_path / "home"
    sha = "cd" * 32
    artifacts = home / ".cache" / "jobcore" / "agent" / "artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / sha).write_text("#!/bin/sh\necho the verified program\n")
    (artifacts / sha).chmod(0o755)
    cli = Cli(tmp_path, HOME=str(home), JOBCORE_FILES_ROOT=str(home))
    cli.env.pop("XDG_CACHE_HOME", None)
    cli.env.pop("XDG_STATE_HOME", None)
    planted = "#!/bin/sh\necho the producer's program\n"
    cli.enqueue_many(
        "create_file",
        [
            {
                "path": f".cache/jobcore/agent/artifacts/{sha}",
                "content": planted,
                "overwrite": True,
            },
            {"path": ".local/state/jobcore/session.key", "content": "00" * 32},
        ],
    )
    cli.enqueue("delete_file", {"path": f".cache/jobcore/agent/artifacts/{sha}"})
    fine = cli.enqueue("create_file", {"path": ".cache/other/x", "content": "x"})
    cli.drain()
    jobs = cli.jobs()
    assert jobs.pop(fine)["status"] == "completed"
    for job in jobs.values():
        assert job["status"] == "failed" and job["attempts"] == 1, job
        assert "files jobs never touch jobcore's own files" in job["last_error"]
    assert (artifacts / sha).read_text() == "#!/bin/sh\necho the verified program\n"
    assert not (home / ".local" / "state" / "jobcore").exists()


@pytest.mark.parametrize("where", ["store", "store/sub", "configured", "configured/sub"])
def test_a_root_at_or_inside_the_hubs_artifact_store_is_refused(tmp_path: Path, where: str) -> None:
    """The store beside the database (`<db>.artifacts`) and one `[plugins.http] artifacts_dir`
    names: a root there would let a job plant or delete the executables agents run."""
    sha = "ef" * 32
    stores = {"store": tmp_path / "q.db.artifacts", "configured": tmp_path / "hub-artifacts"}
    for store in stores.values():
        (store / "sub").mkdir(parents=True)
        for folder in (store, store / "sub"):
            (folder / sha).write_text("the real executable")
    kind, _, below = where.partition("/")
    root = stores[kind] / below
    work = tmp_path / "work"
    work.mkdir()
    cli = Cli(
        work,
        JOBCORE_DB=str(tmp_path / "q.db"),
        JOBCORE_FILES_ROOT=str(root),
        JOBCORE_HTTP_ARTIFACTS_DIR=str(stores["configured"]),
    )
    deleted = cli.enqueue("delete_file", {"path": sha}, "--max-attempts", "3")
    planted = cli.enqueue("create_file", {"path": "new", "content": "x"}, "--max-attempts", "3")
    cli.drain()
    jobs = cli.jobs()
    for job_id in (deleted, planted):
        job = jobs[job_id]
        assert job["status"] == "failed" and job["attempts"] == 1, job
        assert (
            f"the files root {root.resolve()} is inside jobcore's own folder" in (job["last_error"])
        )
    for store in stores.values():
        for folder in (store, store / "sub"):
            assert (folder / sha).read_text() == "the real executable"
            assert not (folder / "new").exists()
