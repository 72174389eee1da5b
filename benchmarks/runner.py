"""`python -m benchmarks [--quick] [--reps N] [--out DIR] [--against REF --rows A,B]`: measure, compare, report.

Systems are interleaved within each repetition (jobcore, raw, Huey, jobcore,
raw, Huey, ...) and each figure is the median of the repetitions, shown with
its min-max, because the machine is noisy. Nothing here asserts anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import against, cases, cli_cases
from benchmarks.otlp_sink import OtlpSink
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
    cli_drain: int  # jobs per CLI / library / plugin / events drain
    other_queue: int  # pending higher-priority jobs in queue A for the filtered claim


FULL_SIZES = Sizes(
    reps=5,
    enqueue=3000,
    batch=50_000,
    drain=20_000,
    raw_single=5000,
    huey_drain=10_000,
    latency=200,
    idle_seconds=3.0,
    finished=(1000, 100_000, 1_000_000),
    not_due=100_000,
    rss=(10_000, 100_000),
    cli_drain=20_000,
    other_queue=100_000,
)
QUICK_SIZES = Sizes(
    reps=1,
    enqueue=300,
    batch=5000,
    drain=2000,
    raw_single=500,
    huey_drain=1000,
    latency=30,
    idle_seconds=1.0,
    finished=(1000, 10_000),
    not_due=10_000,
    rss=(2000, 6000),
    cli_drain=2000,
    other_queue=10_000,
)


class Results:
    def __init__(self) -> None:
        self.series: dict[tuple[str, str, str], Series] = {}
        self.baselines: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
        self.notes: dict[str, list[str]] = {}

    def note(self, key: str, text: str) -> None:
        """A fact per repetition shown under the tables (hooks registered, spans received, ...)."""
        self.notes.setdefault(key, []).append(text)

    def add(
        self, name: str, sync: str, system: str, unit: str, value: float, higher: bool = True
    ) -> None:
        key = (name, sync, system)
        if key not in self.series:
            self.series[key] = Series(name, sync, system, unit, higher_is_better=higher)
        self.series[key].values.append(value)

    def get(self, name: str, sync: str, system: str) -> Series | None:
        return self.series.get((name, sync, system))

    def compare(self, key: tuple[str, str, str], baseline: tuple[str, str, str]) -> None:
        """Show `key`'s median as a ratio of `baseline`'s (measured in the same repetitions)."""
        if baseline not in self.baselines.setdefault(key, []):
            self.baselines[key].append(baseline)


def progress(message: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


LIB = "drain, library Worker(...).run(), 4 threads"
CLI = "drain, CLI jobcore run --until-empty, 4 threads"
CLI_NO_OTEL = "drain, CLI, otel plugin disabled (JOBCORE_DISABLE_PLUGINS=otel)"
CLI_QUIET = "drain, CLI, --log-level warning (no line per job)"
CLI_OTLP = "drain, CLI, otel exporting OTLP/HTTP to a receiver on 127.0.0.1"
CLI_OTLP_SAMPLED = "drain, CLI, otel exporting OTLP/HTTP, traces sampled 10%"
SAMPLED = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}
EVENTS_ON = "drain, library, events recorded"
EVENTS_OFF = "drain, library, event triggers dropped"
EVENTS_PLACEHOLDER = "drain, library, events recorded vs not"
USER_ROWS = {LIB, CLI, CLI_QUIET, CLI_NO_OTEL, CLI_OTLP, CLI_OTLP_SAMPLED, EVENTS_ON, EVENTS_OFF}
USER_ROWS |= {name + " [CPU per job]" for name in USER_ROWS}
CLAIM_B = (
    "claim on queue B, empty database",
    "claim on queue B, {n:,} pending higher-priority in A",
)


CPU = " [CPU per job]"


def add_drain(results: Results, name: str, drained: cli_cases.Drained, baseline: str = "") -> None:
    """A drain's rate and its CPU per job, each compared with `baseline`'s when given."""
    results.add(name, "FULL", "jobcore", "jobs/s", drained.rate)
    results.add(name + CPU, "FULL", "jobcore", "us/job", drained.cpu_per_job, higher=False)
    if baseline:
        results.compare((name, "FULL", "jobcore"), (baseline, "FULL", "jobcore"))
        results.compare((name + CPU, "FULL", "jobcore"), (baseline + CPU, "FULL", "jobcore"))


def cli_section(sizes: Sizes, tmp: Path, results: Results) -> None:
    """CLI vs library drains, the otel plugin's cost, and event recording, interleaved."""
    n, threads = sizes.cli_drain, 4
    add_drain(results, LIB, cli_cases.library_drain(tmp, n, threads))
    cli = cli_cases.cli_drain(tmp, cli_cases.drain_db(tmp, "cli.db", n), n, threads)
    add_drain(results, CLI, cli, LIB)
    results.add("CLI start-up, spawn to first claim", "FULL", "jobcore", "s", cli.startup, False)
    results.note("log lines", f"CLI drain: {cli.log_lines} stderr lines for {n} jobs")
    # the same drain without the two lifecycle lines a job logs at the default level: what
    # those lines cost is the difference between this row and the one above
    quiet = cli_cases.cli_drain(
        tmp, cli_cases.drain_db(tmp, "cli.db", n), n, threads, JOBCORE_LOG_LEVEL="warning"
    )
    add_drain(results, CLI_QUIET, quiet, LIB)
    if cli_cases.otel_available():
        results.note("otel hooks", f"otel hooks registered, no exporter: {cli_cases.otel_hooks()}")
        off = cli_cases.cli_drain(
            tmp, cli_cases.drain_db(tmp, "cli.db", n), n, threads, JOBCORE_DISABLE_PLUGINS="otel"
        )
        add_drain(results, CLI_NO_OTEL, off)
        results.compare((CLI, "FULL", "jobcore"), (CLI_NO_OTEL, "FULL", "jobcore"))
        results.compare((CLI + CPU, "FULL", "jobcore"), (CLI_NO_OTEL + CPU, "FULL", "jobcore"))
        sink = OtlpSink()
        try:
            for name, sampling in ((CLI_OTLP, {}), (CLI_OTLP_SAMPLED, SAMPLED)):
                otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint, **sampling}
                path = cli_cases.traced_drain_db(tmp, "cli-otel.db", n, **otel)
                sink.reset()
                exporting = cli_cases.cli_drain(tmp, path, n, threads, **otel)
                add_drain(results, name, exporting, CLI_NO_OTEL)
                results.note(
                    name,
                    f"{name}: the receiver got {sink.span_count():,} spans for {n:,} jobs"
                    " (one process span per job; sampled: about a tenth)",
                )
        finally:
            sink.close()
    else:
        results.note(
            "otel", "the otel extra is not installed (pip install -e '.[all]'): rows skipped"
        )
    if cli_cases.events_supported(tmp):
        on = cli_cases.library_drain(tmp, n, threads)
        off_path = cli_cases.drain_db(tmp, "events-off.db", n)
        cli_cases.drop_event_triggers(off_path)
        off_events = cli_cases.library_drain(tmp, n, threads, path=off_path)
        add_drain(results, EVENTS_OFF, off_events)
        add_drain(results, EVENTS_ON, on, EVENTS_OFF)
    else:
        results.note(
            "events",
            f"{EVENTS_PLACEHOLDER}: placeholder, this store records no events yet (issue 9 fills it)",
        )


def run(sizes: Sizes, tmp: Path) -> Results:
    results = Results()
    for rep in range(1, sizes.reps + 1):
        for sync in SYNCS:
            progress(f"repetition {rep}/{sizes.reps}, synchronous={sync}")
            add = results.add
            # jobcore and the floor take turns at going first: the first row after a large
            # one paid for its writes at each fsync (issue 19; `cases.Timed` also syncs)
            single = [
                ("jobcore", cases.jobcore_enqueue),
                ("raw", cases.raw_enqueue),
                ("huey", cases.huey_enqueue),
            ]
            batched = [("jobcore", cases.jobcore_batch), ("raw", cases.raw_batch)]
            for name, size, in_turn in (
                ("enqueue, 1 per transaction", sizes.enqueue, single),
                ("enqueue, 1000 per transaction", sizes.batch, batched),
            ):
                for system, measure in in_turn if rep % 2 else in_turn[::-1]:
                    add(name, sync, system, "jobs/s", measure(tmp, sync, size))
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
        progress(f"repetition {rep}/{sizes.reps}: CLI and library drains, plugins, events")
        cli_section(sizes, tmp, results)
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
        for other in (0, sizes.other_queue):
            results.add(
                CLAIM_B[other > 0].format(n=sizes.other_queue),
                "FULL",
                "jobcore",
                "us/claim",
                cli_cases.filtered_claim_cost(tmp, other),
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
    for key, series in results.series.items():
        raw = None
        huey = None
        baselines = [
            results.series[b] for b in results.baselines.get(key, []) if b in results.series
        ]
        if baselines or series.name in USER_ROWS:
            pass  # compared with their own baselines only
        elif series.system == "jobcore" and series.unit == "jobs/s":
            if series.name.startswith("enqueue"):
                raw = results.get(series.name, series.sync, "raw")
                huey = results.get(series.name, series.sync, "huey")
            else:
                raw = results.get("drain, raw claim+complete 1 per txn", series.sync, "raw")
                huey = results.get("drain, 1 worker thread", series.sync, "huey")
        elif series.system == "jobcore" and series.name.startswith("enqueue->start"):
            huey = results.get(series.name, series.sync, "huey")
        elif series.name == CLAIM_B[1].format(n=_other_queue(results)):
            empty = results.get(CLAIM_B[0], "FULL", "jobcore")
            baselines = [empty] if empty else []
        table.append(
            [
                series.name,
                series.sync,
                series.system,
                f"{_fmt(series.median)} {series.unit}",
                f"{_fmt(min(series.values))}-{_fmt(max(series.values))}",
                _ratio(series, raw),
                _ratio(series, huey),
                "; ".join(f"{_ratio(series, b)} of {b.name}" for b in baselines),
            ]
        )
    return table


def _other_queue(results: Results) -> int:
    for series in results.series.values():
        if series.name.startswith("claim on queue B, ") and "pending" in series.name:
            return int(series.name.split(", ")[1].split()[0].replace(",", ""))
    return 0


HEADERS = ["measurement", "sync", "system", "median", "min-max", "vs raw", "vs huey", "vs baseline"]


def text_table(table: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADERS, *table]) for i in range(len(HEADERS))]
    return "\n".join(
        "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in [HEADERS, *table]
    )


def note_lines(results: Results) -> list[str]:
    """Each note once, with how many repetitions said it when they differ."""
    lines = []
    for texts in results.notes.values():
        distinct = list(dict.fromkeys(texts))
        lines.append("; ".join(distinct))
    return lines


def markdown(
    table: list[list[str]],
    info: dict[str, str],
    targets: list[tuple[str, str, bool]],
    notes: list[str],
) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {'yes' if ok else 'no'} |" for t, m, ok in targets]
    lines += ["", *[f"- {note}" for note in notes]]
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

    def user_targets(suffix: str, label: str) -> None:
        """Rates (`suffix` "") or CPU per job (`suffix` CPU): cost = the share of throughput lost."""

        def throughput(name: str) -> float:
            value = med(name + suffix, "FULL", "jobcore")
            return value if not suffix else 1 / value  # jobs per CPU-µs

        cli, lib = throughput(CLI), throughput(LIB)
        out.append(
            (f"CLI drain >= 0.85x library drain{label}", f"{cli / lib:.2f}x", cli >= 0.85 * lib)
        )
        no_otel = throughput(CLI_NO_OTEL)
        if no_otel != no_otel:  # not measured: the otel extra is missing
            return
        for name, what, limit in (
            (CLI, "otel loaded, no exporter", 0.03),
            (CLI_OTLP, "otel exporting OTLP/HTTP", 0.30),
            (CLI_OTLP_SAMPLED, "otel exporting OTLP/HTTP, sampled 10%", 0.30),
        ):
            cost = 1 - throughput(name) / no_otel
            out.append((f"{what}: cost <= {limit:.0%}{label}", f"{cost:+.1%}", cost <= limit))

    user_targets("", "")
    user_targets(CPU, " (by CPU per job)")
    empty = med(CLAIM_B[0], "FULL", "jobcore")
    crowded = med(CLAIM_B[1].format(n=_other_queue(results)), "FULL", "jobcore")
    out.append(
        (
            f"{CLAIM_B[1].format(n=_other_queue(results))} <= 1.5x empty database",
            f"{crowded / empty:.2f}x",
            crowded <= 1.5 * empty,
        )
    )
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
        "--quick",
        action="store_true",
        help="small sizes, one repetition (run times: benchmarks/README.md)",
    )
    parser.add_argument("--reps", type=int, help="repetitions (default 5, quick 1)")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results"), help="folder for JSON and Markdown"
    )
    parser.add_argument(
        "--dir", help="folder for the database files (default: a temporary folder on local disk)"
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="compare with git REF (built in a temporary worktree and a venv cached per commit):"
        " the --rows alone, alternately for REF and this checkout, each row's ratio",
    )
    parser.add_argument(
        "--rows",
        default=",".join(against.DEFAULT_ROWS),
        help=f"with --against: comma-separated rows among {', '.join(against.ROWS)}"
        f" (default {','.join(against.DEFAULT_ROWS)})",
    )
    parser.add_argument(
        "--jobs", type=int, help="with --against: jobs per row (default: each row's full size)"
    )
    args = parser.parse_args(argv)
    if args.against:
        chosen = [row.strip() for row in args.rows.split(",") if row.strip()]
        reps = args.reps or (1 if args.quick else 5)
        jobs = args.jobs or (2000 if args.quick else None)
        against.main(args.against, chosen, reps, jobs, Path(args.out))
        return
    if importlib.util.find_spec("huey") is None:
        sys.exit(
            "Error: these benchmarks compare jobcore with Huey, which is not installed here: "
            "pip install huey (or run them with `tox -e bench`, which installs it)"
        )
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.reps:
        sizes = dataclasses.replace(sizes, reps=args.reps)
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
    notes = note_lines(results)
    print("\n".join(notes))
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
                "notes": notes,
            },
            indent=2,
        )
    )
    (out / f"{name}.md").write_text(markdown(table, info, met, notes))
    print(
        f"\nwrote {out / (name + '.json')} and {out / (name + '.md')} in {time.time() - started:.0f}s",
        file=sys.stderr,
    )
