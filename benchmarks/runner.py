"""`python -m benchmarks [--quick] [--reps N] [--out DIR]`: measure, compare, report.

Systems are interleaved within each repetition (jobcore, raw, Huey, jobcore,
raw, Huey, ...) and each figure is the median of the repetitions, shown with
its min-max, because the machine is noisy. Nothing here asserts anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import cases
from benchmarks.stats import Series, machine

SYNCS = ("FULL", "NORMAL")


@dataclass(frozen=True)
class Sizes:
    reps: int
    enqueue: int
    batch: int
    drain: int
    raw_single: int
    huey_drain: int
    latency: int
    idle_seconds: float
    finished: tuple[int, ...]
    not_due: int
    rss: tuple[int, int]


FULL_SIZES = Sizes(
    5,
    3000,
    50_000,
    20_000,
    5000,
    10_000,
    200,
    3.0,
    (1000, 100_000, 1_000_000),
    100_000,
    (10_000, 100_000),
)
QUICK_SIZES = Sizes(1, 300, 5000, 2000, 500, 1000, 30, 1.0, (1000, 10_000), 10_000, (2000, 6000))


class Results:
    def __init__(self) -> None:
        self.series: dict[tuple[str, str, str], Series] = {}

    def add(
        self, name: str, sync: str, system: str, unit: str, value: float, higher: bool = True
    ) -> None:
        key = (name, sync, system)
        if key not in self.series:
            self.series[key] = Series(name, sync, system, unit, higher_is_better=higher)
        self.series[key].values.append(value)

    def get(self, name: str, sync: str, system: str) -> Series | None:
        return self.series.get((name, sync, system))


def progress(message: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def run(sizes: Sizes, tmp: Path) -> Results:
    results = Results()
    for rep in range(1, sizes.reps + 1):
        for sync in SYNCS:
            progress(f"repetition {rep}/{sizes.reps}, synchronous={sync}")
            add = results.add
            add(
                "enqueue, 1 per transaction",
                sync,
                "jobcore",
                "jobs/s",
                cases.jobcore_enqueue(tmp, sync, sizes.enqueue),
            )
            add(
                "enqueue, 1 per transaction",
                sync,
                "raw",
                "jobs/s",
                cases.raw_enqueue(tmp, sync, sizes.enqueue),
            )
            add(
                "enqueue, 1 per transaction",
                sync,
                "huey",
                "jobs/s",
                cases.huey_enqueue(tmp, sync, sizes.enqueue),
            )
            add(
                "enqueue, 1000 per transaction",
                sync,
                "jobcore",
                "jobs/s",
                cases.jobcore_batch(tmp, sync, sizes.batch),
            )
            add(
                "enqueue, 1000 per transaction",
                sync,
                "raw",
                "jobs/s",
                cases.raw_batch(tmp, sync, sizes.batch),
            )
            rate, _ = cases.jobcore_drain(tmp, sync, sizes.drain, 1, 1)
            add("drain, 1 process x 1 thread", sync, "jobcore", "jobs/s", rate)
            rate, _ = cases.jobcore_drain(tmp, sync, sizes.drain, 1, 4)
            add("drain, 1 process x 4 threads", sync, "jobcore", "jobs/s", rate)
            rate, _ = cases.jobcore_drain(tmp, sync, sizes.drain, 2, 4)
            add("drain, 2 processes x 4 threads", sync, "jobcore", "jobs/s", rate)
            add(
                "drain, raw claim+complete 1 per txn",
                sync,
                "raw",
                "jobs/s",
                cases.raw_drain(tmp, sync, sizes.raw_single, 1),
            )
            add(
                "drain, raw claim+complete 100 per txn",
                sync,
                "raw",
                "jobs/s",
                cases.raw_drain(tmp, sync, sizes.drain, 100),
            )
            add(
                "drain, 1 worker thread",
                sync,
                "huey",
                "jobs/s",
                cases.huey_drain(tmp, sync, sizes.huey_drain),
            )
        progress(f"repetition {rep}/{sizes.reps}: latency, claim cost, memory")
        p50, p99, idle = cases.jobcore_latency(tmp, sizes.latency, sizes.idle_seconds)
        results.add("enqueue->start latency p50", "FULL", "jobcore", "ms", p50, higher=False)
        results.add("enqueue->start latency p99", "FULL", "jobcore", "ms", p99, higher=False)
        results.add("idle worker CPU", "FULL", "jobcore", "% core", idle, higher=False)
        p50, p99 = cases.huey_latency(tmp, sizes.latency)
        results.add("enqueue->start latency p50", "FULL", "huey", "ms", p50, higher=False)
        results.add("enqueue->start latency p99", "FULL", "huey", "ms", p99, higher=False)
        for finished in sizes.finished:
            cost = cases.claim_cost(tmp, finished, 0)
            results.add(
                f"claim cost, {finished:,} finished rows",
                "-",
                "jobcore",
                "us/claim",
                cost,
                higher=False,
            )
        cost = cases.claim_cost(tmp, sizes.finished[0], sizes.not_due)
        results.add(
            f"claim cost, {sizes.not_due:,} not-yet-due higher-priority",
            "-",
            "jobcore",
            "us/claim",
            cost,
            higher=False,
        )
        for n in sizes.rss:
            _, rss = cases.jobcore_drain(tmp, "FULL", n, 1, 4)
            results.add(f"peak RSS draining {n:,} jobs", "FULL", "jobcore", "MB", rss, higher=False)
    return results


def _fmt(value: float) -> str:
    if value != value:  # nan
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def _ratio(series: Series, other: Series | None) -> str:
    return f"{series.median / other.median:.2f}x" if other else ""


def rows(results: Results) -> list[list[str]]:
    table = []
    for series in results.series.values():
        raw = None
        huey = None
        if series.system == "jobcore" and series.unit == "jobs/s":
            if series.name.startswith("enqueue"):
                raw = results.get(series.name, series.sync, "raw")
                huey = results.get(series.name, series.sync, "huey")
            else:
                raw = results.get("drain, raw claim+complete 1 per txn", series.sync, "raw")
                huey = results.get("drain, 1 worker thread", series.sync, "huey")
        elif series.system == "jobcore" and series.name.startswith("enqueue->start"):
            huey = results.get(series.name, series.sync, "huey")
        table.append(
            [
                series.name,
                series.sync,
                series.system,
                f"{_fmt(series.median)} {series.unit}",
                f"{_fmt(min(series.values))}-{_fmt(max(series.values))}",
                _ratio(series, raw),
                _ratio(series, huey),
            ]
        )
    return table


HEADERS = ["measurement", "sync", "system", "median", "min-max", "vs raw", "vs huey"]


def text_table(table: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADERS, *table]) for i in range(len(HEADERS))]
    return "\n".join(
        "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in [HEADERS, *table]
    )


def markdown(
    table: list[list[str]], info: dict[str, str], targets: list[tuple[str, str, bool]]
) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {'yes' if ok else 'no'} |" for t, m, ok in targets]
    machine_line = ", ".join(f"{k}: {v}" for k, v in info.items())
    return f"Machine: {machine_line}\n\n" + "\n".join(lines) + "\n"


def targets(results: Results) -> list[tuple[str, str, bool]]:
    """The issue's targets, each with its measured ratio or value (reported, never asserted)."""

    def med(name: str, sync: str, system: str) -> float:
        series = results.get(name, sync, system)
        return series.median if series else float("nan")

    out = []
    drain4 = med("drain, 1 process x 4 threads", "FULL", "jobcore")
    huey_full = med("drain, 1 worker thread", "FULL", "huey")
    raw_full = med("drain, raw claim+complete 1 per txn", "FULL", "raw")
    out.append(
        ("drain FULL >= 2.5x Huey FULL", f"{drain4 / huey_full:.2f}x", drain4 >= 2.5 * huey_full)
    )
    out.append(
        (
            "drain FULL >= 3x raw 1-per-txn floor",
            f"{drain4 / raw_full:.2f}x",
            drain4 >= 3 * raw_full,
        )
    )
    drain_normal = med("drain, 1 process x 4 threads", "NORMAL", "jobcore")
    huey_normal = med("drain, 1 worker thread", "NORMAL", "huey")
    out.append(
        (
            "drain NORMAL >= Huey NORMAL",
            f"{drain_normal / huey_normal:.2f}x",
            drain_normal >= huey_normal,
        )
    )
    for sync in SYNCS:
        two = med("drain, 2 processes x 4 threads", sync, "jobcore")
        one = med("drain, 1 process x 4 threads", sync, "jobcore")
        out.append((f"2 processes >= 1 process ({sync})", f"{two / one:.2f}x", two >= one))
        single = med("enqueue, 1 per transaction", sync, "jobcore") / med(
            "enqueue, 1 per transaction", sync, "raw"
        )
        out.append((f"enqueue 1/txn >= 0.8x floor ({sync})", f"{single:.2f}x", single >= 0.8))
        batch = med("enqueue, 1000 per transaction", sync, "jobcore") / med(
            "enqueue, 1000 per transaction", sync, "raw"
        )
        out.append((f"batch enqueue >= 0.5x floor ({sync})", f"{batch:.2f}x", batch >= 0.5))
    p50 = med("enqueue->start latency p50", "FULL", "jobcore")
    p99 = med("enqueue->start latency p99", "FULL", "jobcore")
    idle = med("idle worker CPU", "FULL", "jobcore")
    out.append(("latency p50 <= 5 ms", f"{p50:.2f} ms", p50 <= 5))
    out.append(("latency p99 <= 25 ms", f"{p99:.2f} ms", p99 <= 25))
    out.append(("idle worker < 2% of a core", f"{idle:.2f}%", idle < 2))
    claim_series = [s for s in results.series.values() if s.name.startswith("claim cost")]
    base = claim_series[0].median
    for series in claim_series[1:]:
        out.append(
            (
                f"{series.name} <= 1.5x the 1k cost",
                f"{series.median / base:.2f}x",
                series.median <= 1.5 * base,
            )
        )
    rss = [s for s in results.series.values() if s.name.startswith("peak RSS")]
    out.append(("peak RSS < 100 MB", f"{rss[-1].median:.1f} MB", rss[-1].median < 100))
    growth = rss[-1].median / rss[0].median
    out.append(
        (
            "RSS not growing with job count",
            f"{growth:.2f}x from {rss[0].name[18:]} to {rss[-1].name[18:]}",
            growth < 1.2,
        )
    )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, one repetition (under a minute)"
    )
    parser.add_argument("--reps", type=int, help="repetitions (default 5, quick 1)")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results"), help="folder for JSON and Markdown"
    )
    parser.add_argument(
        "--dir", help="folder for the database files (default: a temporary folder on local disk)"
    )
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.reps:
        sizes = Sizes(args.reps, *list(vars(sizes).values())[1:])
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="jobcore-bench-", dir=args.dir or Path.home()) as tmp:
        results = run(sizes, Path(tmp))
    table = rows(results)
    met = targets(results)
    info = {**machine(), "sizes": "quick" if args.quick else "full", "repetitions": str(sizes.reps)}
    print(text_table(table))
    print()
    print(
        "\n".join(f"{'MET ' if ok else 'MISS'}  {name}: {measured}" for name, measured, ok in met)
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "quick" if args.quick else "latest"
    (out / f"{name}.json").write_text(
        json.dumps(
            {
                "machine": info,
                "seconds": round(time.time() - started, 1),
                "series": [s.to_json() for s in results.series.values()],
                "targets": [{"target": t, "measured": m, "met": ok} for t, m, ok in met],
            },
            indent=2,
        )
    )
    (out / f"{name}.md").write_text(markdown(table, info, met))
    print(
        f"\nwrote {out / (name + '.json')} and {out / (name + '.md')} in {time.time() - started:.0f}s",
        file=sys.stderr,
    )
