"""`JOBCORE_PLUGINS=mymodule` finds a module in the current directory (as `python -m`
does) when `jobcore` runs as its console script; a module not found is named as such,
with no install suggestion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testenv import subprocess_env

GREET = """
from jobcore import JobType, Payload, hookimpl

class Greet(Payload):
    name: str

@hookimpl
def jobcore_register_job_types(register):
    register(JobType(name="greet", payload_model=Greet, handler=lambda p, ctx: {"hi": p.name}))
"""


def console_script(folder: Path) -> Path:
    """A `jobcore` script like pip's: its own folder, not the working directory, on sys.path."""
    folder.mkdir()
    script = folder / "jobcore"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom jobcore.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    return script


def test_a_module_in_the_current_directory_is_loaded(tmp_path: Path) -> None:
    script = console_script(tmp_path / "bin")
    app = tmp_path / "app"
    app.mkdir()
    (app / "greetmod.py").write_text(GREET)
    env = subprocess_env(JOBCORE_PLUGINS="greetmod")

    def jobcore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args], cwd=app, env=env, capture_output=True, text=True, timeout=60
        )

    assert jobcore("enqueue", "greet", '{"name": "Ada"}').returncode == 0
    assert jobcore("run", "--until-empty").returncode == 0
    shown = jobcore("list", "--json").stdout
    assert '"status": "completed"' in shown and '"hi": "Ada"' in shown, shown


def test_a_module_not_found_is_named_without_an_install_hint(tmp_path: Path) -> None:
    script = console_script(tmp_path / "bin")
    done = subprocess.run(
        [str(script), "plugins"],
        cwd=tmp_path,
        env=subprocess_env(JOBCORE_PLUGINS="no_such_plugin_module"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = next(line for line in done.stdout.splitlines() if "no_such_plugin_module" in line)
    assert "not found" in line and str(tmp_path) in line, line
    assert "install" not in line, line
    enqueue = subprocess.run(
        [str(script), "enqueue", "greet"],
        cwd=tmp_path,
        env=subprocess_env(JOBCORE_PLUGINS="no_such_plugin_module"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert enqueue.returncode == 1 and "pip install no_such" not in enqueue.stderr


def test_a_removed_working_directory_is_not_a_crash(tmp_path: Path) -> None:
    script = console_script(tmp_path / "bin")
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (
        "import os, subprocess, sys\n"
        f"os.chdir({str(gone)!r}); os.rmdir({str(gone)!r})\n"
        f"sys.exit(subprocess.run([{str(script)!r}, '--db', {str(tmp_path / 'j.db')!r}, 'plugins']).returncode)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(JOBCORE_PLUGINS="no_such_plugin_module"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "no_such_plugin_module" in line)
    assert "(not found on the import path)" in line, line
