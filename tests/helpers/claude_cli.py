"""Install the Claude Code CLI the `claude` backend tests run, once, into a local cache folder.

tox runs this file before the tests (`commands_pre`), so the download never
runs inside a test's timeout; the `claude_bin` fixture calls `ensure()` too,
which is a no-op once the CLI is there (plain `pytest` runs still work).
The cache folder is `$JOBCORE_TEST_CACHE`, default `~/.cache/jobcore-tests`.
npm sees the machine's CA and proxy settings (tox passes them through).

    python tests/helpers/claude_cli.py      # prints where the CLI is and how long it took
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLAUDE_CODE_VERSION = "2.1"
PACKAGE = f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"
INSTALL_TIMEOUT = 600.0  # seconds for the whole `npm install`


class InstallError(RuntimeError):
    """npm could not install the CLI; the message says why."""


class NpmMissing(InstallError):
    """Node.js or npm is not installed here (the CLI tests skip themselves)."""


def cache_dir() -> Path:
    base = os.environ.get("JOBCORE_TEST_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "jobcore-tests"
    )
    return Path(base)


def binary_path(cache: Path | None = None) -> Path:
    prefix = (cache or cache_dir()) / f"claude-code-{CLAUDE_CODE_VERSION}"
    return prefix / "node_modules" / ".bin" / "claude"


def npm() -> str:
    found = shutil.which("npm")
    if found is None or shutil.which("node") is None:
        raise NpmMissing("Node.js/npm are not installed: the Claude Code CLI tests need them")
    return found


def ensure(cache: Path | None = None) -> Path:
    """The CLI's path, installing it first if needed (one installer at a time per cache)."""
    binary = binary_path(cache)
    if binary.exists():
        return binary
    npm_bin = npm()
    prefix = binary.parents[2]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / ".claude-code.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be installing right now
        if binary.exists():
            return binary
        staging = Path(tempfile.mkdtemp(prefix=".claude-code-", dir=prefix.parent))
        try:
            _npm_install(npm_bin, staging)
            if prefix.exists():
                shutil.rmtree(prefix)  # a half-finished folder from an older, killed run
            staging.rename(prefix)  # appears whole or not at all
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not binary.exists():
        raise InstallError(f"npm installed {PACKAGE} but {binary} is missing")
    return binary


def _npm_install(npm_bin: str, prefix: Path) -> None:
    command = [
        npm_bin,
        "install",
        "--prefix",
        str(prefix),
        "--no-audit",
        "--no-fund",
        "--no-save",
        # fail in seconds, not minutes, when the registry cannot be reached
        "--fetch-retries=2",
        "--fetch-retry-mintimeout=2000",
        "--fetch-retry-maxtimeout=10000",
        PACKAGE,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise InstallError(f"npm install {PACKAGE} took over {INSTALL_TIMEOUT:g}s") from None
    if done.returncode != 0:
        hint = ""
        if "CERT" in done.stderr:
            hint = (
                " (a certificate problem: point NODE_EXTRA_CA_CERTS or npm's cafile at your CA "
                "bundle; tox passes NODE_EXTRA_CA_CERTS, SSL_CERT_FILE and npm_config_* through)"
            )
        raise InstallError(f"npm could not install {PACKAGE}{hint}:\n{done.stderr.strip()[-2000:]}")


def main() -> int:
    started = time.monotonic()
    try:
        already = binary_path().exists()
        binary = ensure()
    except NpmMissing as exc:
        print(f"claude_cli: {exc}; those tests will be skipped", file=sys.stderr)
        return 0
    except InstallError as exc:
        print(f"claude_cli: {exc}", file=sys.stderr)
        return 1
    took = time.monotonic() - started
    what = "already installed" if already else f"installed in {took:.1f}s"
    print(f"claude_cli: {PACKAGE} {what}: {binary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
