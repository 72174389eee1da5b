"""Running the documentation's examples with Sybil (see the root `conftest.py`).

Every ```sh and ```python block of README.md, docs/ and the READMEs beside the code runs:
the blocks of one page in order, in one scratch folder, like a reader typing them into one
terminal. A shell block runs in bash (`set -eo pipefail`) and must exit 0; the variables it
sets and the folder it ends in carry over to the page's next blocks, and what it starts in
the background (`jobcore serve &`) is stopped when the page is done. A Python block runs in
the page's namespace, in the shell's current folder. `jobcore` on PATH is the one the test
run imports (`python -m jobcore`: in tox, the wheel built from this checkout).

A block that cannot run here is a fragment and says so where readers see it:
```` ```sh title="Fragment: <why>" ```` (Sybil runs only blocks whose info string is
exactly `sh` or `python`; tests/docs/test_examples_marked.py checks that every other
shell or Python block carries such a title).

Each page gets `JOBCORE_HTTP_PORT` (a free port: `jobcore serve` binds it) and, for pages
that name `DATABASE_URL`, a fresh PostgreSQL database there (skipped when no server
answers, unless `CI` is set).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sybil import Example, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser

ROOT = Path(__file__).resolve().parents[1]
BLOCK_TIMEOUT = 180.0
PG_ADMIN = os.environ.get("JOBCORE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
STATE = "__jobcore_doc_page__"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Page:
    """One page's scratch folder, environment, shell state and background processes."""

    def __init__(self, text: str) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="jobcore-doc-"))
        self.cwd = self.base / "work"
        self.cwd.mkdir()
        self.state = self.base / "state.sh"
        self.groups: list[int] = []
        self.database: str | None = None
        bin_dir = self.base / "bin"
        bin_dir.mkdir()
        shim = bin_dir / "jobcore"  # this checkout's jobcore, whatever is installed
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m jobcore "$@"\n')
        shim.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBCORE_", "OTEL_"))}
        env["PATH"] = os.pathsep.join(
            [str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
        )
        (self.base / "home").mkdir()
        env["HOME"] = str(self.base / "home")
        env["XDG_CACHE_HOME"] = str(self.base / "cache")
        env["XDG_STATE_HOME"] = str(self.base / "state")
        env["JOBCORE_HTTP_PORT"] = str(free_port())
        if "DATABASE_URL" in text:
            env["DATABASE_URL"] = self.database = self._make_database()
        self.env = env
        done = subprocess.run(["bash", "-c", "compgen -v"], env=env, capture_output=True, text=True)
        (self.base / "baseline").write_text(done.stdout + "__rc\n")

    def _make_database(self) -> str:
        import psycopg

        name = f"jobcore_doc_{uuid.uuid4().hex[:12]}"
        try:
            with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except psycopg.OperationalError as exc:
            if os.environ.get("CI"):
                raise
            import pytest

            pytest.skip(f"no PostgreSQL at {PG_ADMIN} for this page ({exc})")
        return PG_ADMIN.rsplit("/", 1)[0] + "/" + name

    def shell(self, source: str) -> None:
        script = self.base / "block.sh"
        script.write_text(
            "set -eo pipefail\n"
            f"[ -f {shlex.quote(str(self.state))} ] && source {shlex.quote(str(self.state))}\n"
            f"cd {shlex.quote(str(self.cwd))}\n"
            "__save() {\n"
            "  __rc=$?\n"
            "  { declare -p $(compgen -v | grep -vxF -f "
            f"{shlex.quote(str(self.base / 'baseline'))}) 2>/dev/null"
            " | grep -v '^declare -[a-zA-Z]*r' || true; }"
            f" > {shlex.quote(str(self.state))}.new\n"
            f"  mv {shlex.quote(str(self.state))}.new {shlex.quote(str(self.state))}\n"
            f"  pwd > {shlex.quote(str(self.base / 'cwd'))}\n"
            "  exit $__rc\n"
            "}\n"
            "trap __save EXIT\n" + source
        )
        log = self.base / "block.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                ["bash", str(script)],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.groups.append(proc.pid)
            try:
                code = proc.wait(BLOCK_TIMEOUT)
            except subprocess.TimeoutExpired:
                code = None
        if (self.base / "cwd").exists():
            self.cwd = Path((self.base / "cwd").read_text().strip())
        output = log.read_text()
        if code != 0:
            raise AssertionError(
                f"the block exited {code if code is not None else 'by timeout'}:\n"
                f"{source}\n--- output ---\n{output[-6000:]}"
            )

    @contextlib.contextmanager
    def python_context(self) -> Any:
        old_cwd, old_env = os.getcwd(), dict(os.environ)
        os.chdir(self.cwd)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            yield
        finally:
            os.chdir(old_cwd)
            os.environ.clear()
            os.environ.update(old_env)

    def close(self) -> None:
        for group in self.groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for group in self.groups:
            while time.monotonic() < deadline:
                try:
                    os.killpg(group, 0)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        if self.database is not None:
            import psycopg

            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(
                    f'DROP DATABASE IF EXISTS "{self.database.rsplit("/", 1)[1]}" WITH (FORCE)'
                )
        subprocess.run(["rm", "-rf", str(self.base)], check=False)


def _page(example: Example) -> Page:
    page: Page | None = example.namespace.get(STATE)
    if page is None:
        page = example.namespace[STATE] = Page(example.document.text)
    return page


def run_shell(example: Example) -> None:
    _page(example).shell(str(example.parsed))


_python = PythonEvaluator()


def run_python(example: Example) -> None:
    with _page(example).python_context():
        _python(example)


def teardown(namespace: dict[str, Any]) -> None:
    page: Page | None = namespace.pop(STATE, None)
    if page is not None:
        page.close()


class PythonBlocks(PythonCodeBlockParser):
    """Python blocks, run in the page's folder and environment."""

    def __init__(self) -> None:
        super().__init__()
        self.codeblock_parser = CodeBlockParser("python", run_python)


# documents: this README, docs/, and the READMEs beside the code (plugins, examples, benchmarks)
DOCUMENTS = ["README.md", "docs/*.md", "docs/*/*.md"]

sybil = Sybil(
    parsers=[CodeBlockParser("sh", run_shell), PythonBlocks()],
    patterns=DOCUMENTS,
    path=str(ROOT),
    teardown=teardown,
)
