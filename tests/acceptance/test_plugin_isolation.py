"""A broken or foreign plugin is `unavailable` with the reason; it never breaks the CLI.

Each test writes real plugin modules into a folder, loads them with
`JOBCORE_PLUGINS=...` and runs the `jobcore` command line in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from testenv import subprocess_env

JOBCORE_VERSION = version("jobcore-queue")

PLUGINS = {
    # written for a newer jobcore: a hook this one does not define
    "newer_plugin": """
from jobcore import hookimpl

@hookimpl
def jobcore_job_teleported(job):
    pass

@hookimpl
def jobcore_job_completed(job, duration_ms):
    open("newer-plugin-was-called", "w").close()
""",
    # an argument its hook's spec lacks
    "extra_arg_plugin": """
from jobcore import hookimpl

@hookimpl
def jobcore_job_completed(job, duration_ms, colour):
    open("extra-arg-plugin-was-called", "w").close()
""",
    "bad_configure_plugin": """
from jobcore import hookimpl

@hookimpl
def jobcore_configure(config):
    raise RuntimeError("cannot reach the licence server")

@hookimpl
def jobcore_job_enqueued(job):
    open("bad-configure-plugin-was-called", "w").close()
""",
    "exits_on_import": "import sys\nsys.exit(3)\n",
    "bad_types_plugin": """
from jobcore import hookimpl

@hookimpl
def jobcore_register_job_types(register):
    raise ImportError("needs a newer pydantic")
""",
    # loads fine, but its meta and notification hooks raise
    "raising_hooks_plugin": """
from jobcore import hookimpl

@hookimpl
def jobcore_enqueue_meta(job):
    raise KeyError("trace-context")

@hookimpl
def jobcore_job_enqueued(job):
    raise ValueError("enqueued hook broke")

@hookimpl
def jobcore_job_completed(job):
    raise ValueError("completed hook broke")
""",
    "bad_reconcile_plugin": """
from jobcore import hookimpl

@hookimpl
def jobcore_reconcile(job, config):
    raise RuntimeError("cannot reach the bucket")
""",
    "bad_backend_plugin": """
from jobcore import hookimpl

@hookimpl(tryfirst=True)
def jobcore_storage_backend(url, config, create):
    raise RuntimeError("backend bug")
""",
    "not_a_storage_plugin": """
from jobcore import hookimpl

@hookimpl(tryfirst=True)
def jobcore_storage_backend(url, config, create):
    return "sqlite is fine"
""",
    "list_meta_plugin": """
from jobcore import hookimpl

@hookimpl
def jobcore_enqueue_meta(job):
    return ["not", "a", "dict"]
""",
    "good_meta_plugin": """
from jobcore import hookimpl

@hookimpl
def jobcore_enqueue_meta(job):
    return {"tenant": "acme"}
""",
}


def write_plugins(folder: Path) -> None:
    for name, source in PLUGINS.items():
        (folder / f"{name}.py").write_text(source)


def jobcore(
    tmp_path: Path, *args: str, plugins: str, **env: str
) -> subprocess.CompletedProcess[str]:
    write_plugins(tmp_path)
    full_env = subprocess_env(JOBCORE_DB=str(tmp_path / "jobs.db"), JOBCORE_BACKOFF_BASE="0", **env)
    full_env["PYTHONPATH"] = f"{tmp_path}:{full_env['PYTHONPATH']}"
    full_env["JOBCORE_PLUGINS"] = plugins
    return subprocess.run(
        [sys.executable, "-m", "jobcore", *args],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def listed(tmp_path: Path, plugins: str, **env: str) -> dict[str, dict[str, Any]]:
    done = jobcore(tmp_path, "plugins", "--json", plugins=plugins, **env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return {p["name"]: p for p in json.loads(done.stdout)}


BROKEN = "newer_plugin,extra_arg_plugin,bad_configure_plugin,exits_on_import,bad_types_plugin"


def test_broken_plugins_are_unavailable_with_the_reason(tmp_path: Path) -> None:
    plugins = listed(tmp_path, f"jobcore_test_plugin,{BROKEN}")
    reasons = {name: plugins[name]["reason"] for name in BROKEN.split(",")}
    assert all(plugins[name]["status"] == "unavailable" for name in reasons), plugins
    assert "jobcore_job_teleported" in reasons["newer_plugin"]
    assert "another jobcore version" in reasons["newer_plugin"]
    assert "colour" in reasons["extra_arg_plugin"]
    assert reasons["bad_configure_plugin"] == (
        "jobcore_configure raised RuntimeError: cannot reach the licence server"
    )
    assert reasons["exits_on_import"] == "SystemExit: 3"
    assert reasons["bad_types_plugin"] == "registering job types failed: needs a newer pydantic"
    assert all(plugins[name]["hooks"] == [] for name in reasons)
    assert plugins["jobcore_test_plugin"]["status"] == "loaded"
    assert {p["status"] for p in plugins.values()} == {"loaded", "unavailable"}


def test_the_cli_works_beside_broken_plugins_and_never_calls_them(tmp_path: Path) -> None:
    plugins = f"jobcore_test_plugin,{BROKEN}"
    enqueued = jobcore(tmp_path, "enqueue", "noop", plugins=plugins)
    assert enqueued.returncode == 0, enqueued.stderr
    ran = jobcore(tmp_path, "run", "--until-empty", plugins=plugins)
    assert ran.returncode == 0, ran.stderr
    assert "completed 1" in ran.stdout
    for command in (enqueued, ran):  # listed by `jobcore plugins`, not warned about
        for name in BROKEN.split(","):
            assert name not in command.stderr
        assert "Traceback" not in command.stderr
    table = jobcore(tmp_path, "plugins", plugins=plugins).stdout
    assert "cannot reach the licence server" in table
    assert not list(tmp_path.glob("*-was-called"))


def test_raising_meta_and_notification_hooks_are_logged_and_skipped(tmp_path: Path) -> None:
    plugins = "jobcore_test_plugin,raising_hooks_plugin,list_meta_plugin,good_meta_plugin"
    enqueued = jobcore(tmp_path, "enqueue", "parent", '{"children": 2}', "--json", plugins=plugins)
    assert enqueued.returncode == 0, enqueued.stderr
    job = json.loads(enqueued.stdout)
    assert job["meta"] == {"tenant": "acme"}  # the other plugin's meta still applies
    assert "plugin raising_hooks_plugin failed in jobcore_enqueue_meta" in enqueued.stderr
    assert "plugin raising_hooks_plugin failed in jobcore_job_enqueued" in enqueued.stderr
    assert "plugin list_meta_plugin returned list from jobcore_enqueue_meta" in enqueued.stderr

    ran = jobcore(tmp_path, "run", "--until-empty", plugins=plugins)
    assert ran.returncode == 0, ran.stderr
    assert "completed 3" in ran.stdout  # the parent and both children
    assert "plugin raising_hooks_plugin failed in jobcore_job_completed" in ran.stderr
    children = json.loads(
        jobcore(tmp_path, "list", "--type", "noop", "--json", plugins=plugins).stdout
    )
    assert len(children) == 2
    assert all(child["parent_id"] == job["id"] for child in children)
    assert all(child["meta"] == {"tenant": "acme"} for child in children)
    assert listed(tmp_path, plugins)["raising_hooks_plugin"]["status"] == "loaded"


def test_disabled_plugin_is_unavailable_not_blocked(tmp_path: Path) -> None:
    plugins = listed(tmp_path, "jobcore_test_plugin", JOBCORE_DISABLE_PLUGINS="files")
    assert plugins["files"]["status"] == "unavailable"
    assert "disabled by JOBCORE_DISABLE_PLUGINS" in plugins["files"]["reason"]
    assert plugins["files"]["version"] == JOBCORE_VERSION
    unknown = jobcore(
        tmp_path,
        "enqueue",
        "create_file",
        '{"path": "a.txt", "content": "x"}',
        plugins="",
        JOBCORE_DISABLE_PLUGINS="files",
    )
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (
        "Error: unknown job type 'create_file': the 'files' plugin provides it and is "
        "disabled by JOBCORE_DISABLE_PLUGINS (remove it from there to load it)"
    )


def test_builtin_plugins_carry_jobcores_version(tmp_path: Path) -> None:
    plugins = listed(tmp_path, "")
    builtins = [p for name, p in plugins.items() if name.startswith("jobcore.builtin.")]
    assert len(builtins) == 5
    assert JOBCORE_VERSION is not None
    assert all(p["version"] == JOBCORE_VERSION for p in builtins)


def test_a_plugin_named_twice_or_already_loaded_is_listed_once(tmp_path: Path) -> None:
    plugins = listed(tmp_path, "jobcore_test_plugin,jobcore_test_plugin,jobcore_files")
    assert plugins["jobcore_test_plugin"]["status"] == "loaded"
    assert plugins["files"]["status"] == "loaded"
    assert "jobcore_files" not in plugins  # the same module as the `files` entry point


@pytest.mark.parametrize("level", ["debug", "DEBUG"])
def test_debug_level_shows_why_a_plugin_failed(tmp_path: Path, level: str) -> None:
    done = jobcore(tmp_path, "--log-level", level, "plugins", plugins="bad_configure_plugin")
    assert done.returncode == 0
    assert "RuntimeError: cannot reach the licence server" in done.stderr
    assert "Traceback" in done.stderr


def test_a_raising_reconcile_hook_is_a_discrepancy_not_a_traceback(tmp_path: Path) -> None:
    plugins = "jobcore_test_plugin,bad_reconcile_plugin"
    job_id = jobcore(tmp_path, "enqueue", "noop", plugins=plugins).stdout.strip()
    assert jobcore(tmp_path, "run", "--until-empty", plugins=plugins).returncode == 0
    done = jobcore(tmp_path, "reconcile", plugins=plugins)
    assert done.returncode == 1
    assert done.stdout.strip() == (
        f"{job_id} noop: plugin bad_reconcile_plugin could not check it: "
        "RuntimeError: cannot reach the bucket"
    )
    assert "Traceback" not in done.stderr


def test_a_raising_storage_backend_is_one_error_line_naming_the_plugin(tmp_path: Path) -> None:
    done = jobcore(tmp_path, "enqueue", "noop", plugins="bad_backend_plugin")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Error: plugin bad_backend_plugin failed to open {str(tmp_path / 'jobs.db')!r}: "
        "RuntimeError: backend bug; fix or disable it (JOBCORE_DISABLE_PLUGINS)"
    )
    assert not (tmp_path / "jobs.db").exists()


def test_a_storage_backend_answering_a_non_storage_is_one_error_line(tmp_path: Path) -> None:
    done = jobcore(tmp_path, "list", plugins="not_a_storage_plugin")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Error: plugin not_a_storage_plugin answered {str(tmp_path / 'jobs.db')!r} with a "
        "str, not a Storage; fix or disable it (JOBCORE_DISABLE_PLUGINS)"
    )


def test_a_url_no_backend_handles_names_the_plugin_that_would(tmp_path: Path) -> None:
    disabled = jobcore(
        tmp_path,
        "--db",
        "postgresql://127.0.0.1/jobs",
        "list",
        plugins="",
        JOBCORE_DISABLE_PLUGINS="postgres",
    )
    assert disabled.returncode == 1
    assert disabled.stderr.strip() == (
        "Error: no storage backend handles 'postgresql://127.0.0.1/jobs': the 'postgres' "
        "plugin handles it and is disabled by JOBCORE_DISABLE_PLUGINS (remove it from there "
        "to load it)"
    )
    unknown = jobcore(tmp_path, "--db", "redis://127.0.0.1/0", "list", plugins="")
    assert unknown.returncode == 1 and "give a file path" in unknown.stderr
