"""`python -m benchmarks.instructions --against REF`: instructions per noop job, REF vs here.

CPU time per job on a shared machine moves by 10% and more between runs; callgrind's
instruction counts do not (the same binary, inputs and environment count the same). Each
side (REF built as `--against` builds it, and this checkout) drains a SQLite file of N
and of 3N `noop` jobs under `valgrind --tool=callgrind`, and the figure is the slope,
(count(3N) - count(N)) / 2N, so start-up and imports cancel out. Two paths:

- `storage`: one thread, the storage's group commit alone (`commit_batch`: complete the 50
  jobs claimed by the previous one, claim 50 more), no worker;
- `worker`: `Worker(queue, concurrency=4, until_empty=True).run()` as the library drain
  runs it (under valgrind threads take turns, so batching may differ from a real run).

The kernel's share (fsync, futex) is not in these counts: the same command under
`strace -c` is the check for that. Needs valgrind (`apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.against import CACHE, _git, bench_copy, fix_scripts, resolve, venv_for
from benchmarks.cases import ROOT

CHILD = r"""
import sys
from jobcore import Config, Queue, make_plugin_manager
from jobcore.models import Completed, Lease

command, db = sys.argv[1], sys.argv[2]
config = Config(env={}, options={"synchronous": "FULL"})
queue = Queue(db, config=config, pm=make_plugin_manager(load_entrypoints=False))
queue.storage.migrate()
if command == "prepare":
    n = int(sys.argv[3])
    for start in range(0, n, 1000):
        queue.enqueue_many("noop", [{}] * min(1000, n - start))
elif command == "storage":
    storage = queue.storage
    _, claimed = storage.commit_batch([], worker="w", claim_limit=50, lease_ms=60_000)
    while claimed:
        done = [Completed(Lease.of(job), None) for job in claimed]
        _, claimed = storage.commit_batch(done, worker="w", claim_limit=50, lease_ms=60_000)
else:
    import logging
    from jobcore import Worker

    logging.getLogger("jobcore").setLevel(logging.WARNING)
    Worker(queue, concurrency=4, until_empty=True).run()
left = queue.storage.count_by_status().get("pending", 0)
assert command == "prepare" or left == 0, f"{left} jobs left pending"
"""

PATHS = ("storage", "worker")


def instructions(python: Path, pythonpath: str, path: str, n: int, tmp: Path) -> int:
    """Instructions callgrind counts for `python` draining `n` jobs along `path`."""
    script = tmp / "child.py"
    script.write_text(CHILD)
    db = tmp / f"drain-{n}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBCORE_", "OTEL_"))}
    env["PYTHONPATH"] = pythonpath
    run = {"env": env, "cwd": tmp, "capture_output": True, "text": True}
    subprocess.run([str(python), str(script), "prepare", str(db), str(n)], check=True, **run)
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={tmp / 'callgrind.out'}",
            str(python),
            str(script),
            path,
            str(db),
        ],
        **run,  # type: ignore[call-overload]
    )
    counted = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or counted is None:
        raise RuntimeError(f"{path} drain of {n} by {python} failed:\n{done.stderr[-3000:]}")
    return int(counted.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("--against", required=True, metavar="REF", help="commit, tag or branch")
    parser.add_argument("--jobs", type=int, default=1000, help="N: drains of N and 3N jobs")
    parser.add_argument("--paths", default=",".join(PATHS), help="storage,worker")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("Error: valgrind is not installed (apt-get install valgrind).")
    paths = args.paths.split(",")
    if not set(paths) <= set(PATHS) or args.jobs < 1:
        raise SystemExit(f"Error: --paths takes {', '.join(PATHS)}; --jobs a whole number >= 1.")
    sha = resolve(args.against)
    ref_python = venv_for(sha, CACHE / f"{sha}-pip.log")
    fix_scripts(ref_python.parent.parent)
    here = _git("rev-parse", "HEAD")[:12]
    n = args.jobs
    lines = [
        f"Instructions per noop job (callgrind, slope between {n} and {3 * n} jobs): "
        f"{args.against} ({sha[:12]}) vs this checkout ({here})",
        "",
        "| path | REF | this checkout | ratio (this / REF) |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="jobcore-instructions-", dir=Path.home()) as name:
        tmp = Path(name)
        code = str(bench_copy(tmp))
        here_path = os.pathsep.join([str(ROOT), str(ROOT / "plugins")])
        sides = {"ref": (ref_python, code), "here": (Path(sys.executable), here_path)}
        for path in paths:
            slope = {}
            for side, (python, pythonpath) in sides.items():
                print(f"  {path} {side}", file=sys.stderr, flush=True)
                low = instructions(python, pythonpath, path, n, tmp)
                high = instructions(python, pythonpath, path, 3 * n, tmp)
                slope[side] = (high - low) / (2 * n)
            ratio = slope["here"] / slope["ref"]
            lines.append(
                f"| {path} | {slope['ref'] / 1000:,.0f}k | {slope['here'] / 1000:,.0f}k "
                f"| {ratio:.2f}x |"
            )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
