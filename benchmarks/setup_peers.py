"""`python -m benchmarks.setup_peers [--oban] [--peers] [--python PATH]`: install the peer queues.

`--peers` installs procrastinate, pgqueuer, asyncpg and arq (Redis; for
`benchmarks.async`) into this interpreter's environment (what `tox -e bench-pg`
does through its deps). `--oban` makes the
separate environment Oban for Python needs (Python >= 3.12) at `pg_peers.OBAN_VENV`
(`$JOBCORE_BENCH_OBAN_VENV`, default `~/.cache/jobcore-bench/oban-py`) with the
interpreter from `--python`, `$JOBCORE_BENCH_PYTHON312`, `python3.13` or
`python3.12` on PATH, or pyenv's versions. Benchmark-only: none of this is a
dependency of jobcore.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.pg_peers import OBAN_VENV

PEERS = ("procrastinate==3.10.0", "pgqueuer==1.6.0", "asyncpg>=0.29", "arq==0.28.0")
OBAN = "oban==0.7.0"


def _version(python: str) -> tuple[int, int] | None:
    probe = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return None
    major, minor = probe.stdout.split()
    return int(major), int(minor)


def find_python312(given: str | None) -> str | None:
    """The first of the candidates that runs and is Python >= 3.12."""
    candidates = [given, os.environ.get("JOBCORE_BENCH_PYTHON312")]
    candidates += [shutil.which(name) for name in ("python3.12", "python3.13")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += [str(p) for p in sorted(pyenv.glob("3.1[2-9]*/bin/python3"))]
    for candidate in candidates:
        if candidate and (version := _version(candidate)) and version >= (3, 12):
            return candidate
    return None


def setup_oban(given: str | None) -> None:
    python = OBAN_VENV / "bin" / "python"
    if python.exists():
        check = subprocess.run(
            [str(python), "-m", "pip", "show", "oban"], capture_output=True, text=True
        )
        if f"Version: {OBAN.split('==')[1]}" in check.stdout:
            print(f"Oban for Python already installed in {OBAN_VENV}")
            return
    base = find_python312(given)
    if base is None:
        raise SystemExit(
            "no Python >= 3.12 found for Oban for Python: pass --python PATH or set JOBCORE_BENCH_PYTHON312"
        )
    subprocess.run([base, "-m", "venv", str(OBAN_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", OBAN], check=True)
    print(f"Oban for Python installed in {OBAN_VENV} (from {base})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.setup_peers")
    parser.add_argument(
        "--peers", action="store_true", help="procrastinate, pgqueuer, asyncpg, arq here"
    )
    parser.add_argument("--oban", action="store_true", help="Oban for Python's own environment")
    parser.add_argument("--python", help="a Python >= 3.12 for Oban's environment")
    options = parser.parse_args(argv)
    if not (options.peers or options.oban):
        options.peers = options.oban = True
    if options.peers:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *PEERS], check=True)
    if options.oban:
        setup_oban(options.python)


if __name__ == "__main__":
    main()
