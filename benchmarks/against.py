"""`python -m benchmarks --against REF`: the chosen rows for REF and this checkout, alternately.

REF is checked out in a temporary git worktree (`git worktree add --detach`)
and installed (with the otel extra) into a virtual environment of its own,
kept per commit under `~/.cache/jobcore-bench/venvs/` so later runs start at
once. Each row runs in a fresh process of the interpreter under test (REF's
venv, or this one with the checkout first on the path), with a copy of this
checkout's `benchmarks` package: both sides are measured by the same code, and
each side's database is made by its own jobcore (schemas may differ).
Repetitions alternate the order (REF first, then the checkout first, ...).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cases import ROOT

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jobcore-bench" / "venvs"
EXTRAS = "otel"  # the rows' plugins; the rest of `all` is not needed to measure them


@dataclass(frozen=True)
class Row:
    key: str  # what --rows names
    title: str
    default_n: int


ROWS = {
    row.key: row
    for row in (
        Row("library", "drain, library Worker(...).run(), 4 threads, FULL", 20_000),
        Row("cli", "drain, CLI jobcore run --until-empty, 4 threads, FULL", 20_000),
        Row("cli-no-otel", "drain, CLI, otel plugin disabled, FULL", 20_000),
        Row("cli-otlp", "drain, CLI, otel exporting every trace over OTLP/HTTP", 20_000),
        Row("normal", "drain, 1 process x 4 threads, NORMAL", 20_000),
        Row("idle", "idle worker (another process): its CPU, then enqueue->start", 200),
        Row("enqueue", "enqueue, 1 per transaction, FULL", 3000),
        Row("batch", "enqueue_many, 1000 per transaction, FULL", 50_000),
        Row("enqueue-normal", "enqueue, 1 per transaction, NORMAL", 3000),
        Row("batch-normal", "enqueue_many, 1000 per transaction, NORMAL", 50_000),
        Row("raw-enqueue", "raw floor: INSERT, 1 per transaction, FULL", 3000),
        Row("raw-batch", "raw floor: executemany, 1000 per transaction, FULL", 50_000),
        Row("raw-enqueue-normal", "raw floor: INSERT, 1 per transaction, NORMAL", 3000),
        Row("raw-batch-normal", "raw floor: executemany, 1000 per transaction, NORMAL", 50_000),
    )
}
DEFAULT_ROWS = ("library", "cli")


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def resolve(ref: str) -> str:
    """The full commit id REF names in this checkout's repository (a clear error if none)."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(
            f"Error: --against {ref!r} names no commit in {ROOT}'s repository.\n"
            "Give a commit id, tag or branch (see `git log --oneline`)."
        ) from None


def venv_for(sha: str, log: Path) -> Path:
    """REF's interpreter: a cached venv with REF installed, built once per commit."""
    venv = CACHE / sha
    python = venv / "bin" / "python"
    if (venv / "complete").exists():
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jobcore-against-") as tmp:
        tree = Path(tmp) / "tree"
        _git("worktree", "add", "--detach", str(tree), sha)
        try:
            building = Path(tempfile.mkdtemp(prefix=f"{sha[:12]}-", dir=CACHE))
            subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text(same_versions())
            with open(log, "ab") as out:
                done = subprocess.run(
                    [
                        str(building / "bin" / "pip"),
                        "install",
                        "--quiet",
                        "--constraint",
                        str(constraints),
                        f"{tree}[{EXTRAS}]",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            if done.returncode != 0:
                shutil.rmtree(building, ignore_errors=True)
                raise SystemExit(f"Error: installing {sha[:12]} failed; pip's output is in {log}.")
            (building / "complete").write_text(sha + "\n")
            if venv.exists():  # a half-built one from an interrupted run
                shutil.rmtree(venv)
            building.rename(venv)  # the venv's scripts name their interpreter by this final path
        finally:
            _git("worktree", "remove", "--force", str(tree))
    return python


def same_versions() -> str:
    """This interpreter's installed versions (pip constraints), so REF runs on the same
    SQLite, pydantic and OpenTelemetry as the checkout and only jobcore differs."""
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return "\n".join(
        line for line in frozen.splitlines() if "==" in line and not line.startswith("jobcore")
    )


def fix_scripts(venv: Path) -> None:
    """Point the venv's console scripts at its interpreter by its final path."""
    python = venv / "bin" / "python"
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            try:
                text = script.read_text()
            except UnicodeDecodeError:
                continue
            first, _, rest = text.partition("\n")
            if first.startswith("#!") and "/bin/python" in first and first != f"#!{python}":
                script.write_text(f"#!{python}\n{rest}")


def bench_copy(tmp: Path) -> Path:
    """A folder holding a copy of this checkout's `benchmarks` package and nothing else."""
    code = tmp / "bench-code"
    shutil.copytree(
        ROOT / "benchmarks",
        code / "benchmarks",
        ignore=shutil.ignore_patterns("results", "__pycache__", "peers"),
    )
    return code


def run_row(python: Path, pythonpath: str, row: str, n: int, tmp: Path) -> dict[str, float]:
    """One repetition of `row` by `python` (its own process); its figures."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBCORE_", "OTEL_"))}
    env["PYTHONPATH"] = pythonpath
    workdir = Path(tempfile.mkdtemp(prefix="row-", dir=tmp))
    try:
        done = subprocess.run(
            [str(python), "-m", "benchmarks.against_row", row, str(n), str(workdir)],
            env=env,
            cwd=pythonpath.split(os.pathsep)[0],
            capture_output=True,
            text=True,
            timeout=3600,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"row {row} with {python} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(ref: str, rows: list[str], reps: int, n: int | None, out: Path) -> None:
    unknown = [row for row in rows if row not in ROWS]
    if unknown:
        raise SystemExit(
            f"Error: --rows names unknown row(s) {', '.join(unknown)}.\n"
            f"Choose from: {', '.join(ROWS)}."
        )
    sha = resolve(ref)
    here = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    started = time.time()
    out.mkdir(parents=True, exist_ok=True)
    print(f"  building {ref} ({sha[:12]}) unless cached in {CACHE}", file=sys.stderr)
    ref_python = venv_for(sha, CACHE / f"{sha}-pip.log")
    fix_scripts(ref_python.parent.parent)
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="jobcore-against-", dir=Path.home()) as name:
        tmp = Path(name)
        code = str(bench_copy(tmp))
        here_path = os.pathsep.join([str(ROOT), str(ROOT / "plugins")])
        sides = {"ref": (ref_python, code), "here": (Path(sys.executable), here_path)}
        for rep in range(reps):
            for row in rows:
                order = ("ref", "here") if rep % 2 == 0 else ("here", "ref")
                for side in order:
                    python, path = sides[side]
                    print(
                        f"  {time.strftime('%H:%M:%S')} rep {rep + 1}/{reps} {row} {side}",
                        file=sys.stderr,
                        flush=True,
                    )
                    size = n or ROWS[row].default_n
                    figures.setdefault((row, side), []).append(
                        run_row(python, path, row, size, tmp)
                    )
    lines = [
        f"Against {ref} ({sha[:12]}); this checkout {here[:12]}{' with changes' if dirty else ''};"
        f" {reps} repetition(s), alternating; medians (min-max).",
        "",
        "| row | figure | REF | this checkout | ratio (this / REF) |",
        "|---|---|---|---|---|",
    ]
    report = []
    for row in rows:
        for figure, unit, better in (
            ("rate", "jobs/s", "higher"),
            ("cpu_per_job", "us/job", "lower"),
            ("idle_cpu", "% of a core", "lower"),
            ("p50_ms", "ms", "lower"),
            ("p99_ms", "ms", "lower"),
        ):
            ref_values = [f[figure] for f in figures[(row, "ref")] if figure in f]
            here_values = [f[figure] for f in figures[(row, "here")] if figure in f]
            if not ref_values or not here_values:
                continue
            a, b = _median(ref_values), _median(here_values)
            lines.append(
                f"| {ROWS[row].title} | {figure.replace('_', ' ')} ({unit}, {better} is better) |"
                f" {a:,.1f} ({min(ref_values):,.1f}-{max(ref_values):,.1f}) |"
                f" {b:,.1f} ({min(here_values):,.1f}-{max(here_values):,.1f}) | {b / a:.2f}x |"
            )
            report.append(
                {
                    "row": row,
                    "figure": figure,
                    "unit": unit,
                    "ref": ref_values,
                    "here": here_values,
                    "ratio": b / a,
                }
            )
    text = "\n".join(lines) + "\n"
    print(text)
    stem = out / f"against-{ref.replace('/', '-')}-{sha[:12]}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(
        json.dumps(
            {
                "ref": ref,
                "ref_commit": sha,
                "here": here,
                "here_dirty": dirty,
                "reps": reps,
                "seconds": round(time.time() - started, 1),
                "rows": report,
            },
            indent=2,
        )
    )
    print(f"wrote {stem}.md and .json in {time.time() - started:.0f}s", file=sys.stderr)
