"""One repetition of one `--against` row, by whichever jobcore this interpreter imports.

`python -m benchmarks.against_row ROW N DIR` prints one JSON line: the row's
`rate` (jobs/s) and, for drains, `cpu_per_job` (µs of the draining process's CPU);
for `idle`, the idle worker's CPU (% of a core) and the p50/p99 enqueue->start (ms).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks import cases, cli_cases
from benchmarks.otlp_sink import OtlpSink

ENQUEUE_ROWS = {
    f"{prefix}{kind}{suffix}": function
    for prefix, kind, function in (
        ("", "enqueue", cases.jobcore_enqueue_figures),
        ("", "batch", cases.jobcore_batch_figures),
        ("raw-", "enqueue", cases.raw_enqueue_figures),
        ("raw-", "batch", cases.raw_batch_figures),
    )
    for suffix in ("", "-normal")
}
"""The enqueue rows: jobcore's and the raw floor's (plain APSW on the side's own schema)."""


def measure(row: str, n: int, tmp: Path) -> dict[str, float]:
    if row == "library":
        drained = cli_cases.library_drain(tmp, n, 4)
    elif row in ("cli", "cli-no-otel"):
        extra = {"JOBCORE_DISABLE_PLUGINS": "otel"} if row == "cli-no-otel" else {}
        drained = cli_cases.cli_drain(tmp, cli_cases.drain_db(tmp, "cli.db", n), n, 4, **extra)
    elif row == "cli-otlp":
        sink = OtlpSink()
        try:
            otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint}
            path = cli_cases.traced_drain_db(tmp, "cli-otel.db", n, **otel)
            drained = cli_cases.cli_drain(tmp, path, n, 4, **otel)
            spans = sink.span_count()
        finally:
            sink.close()
        if spans < 2 * n:  # a `send` span at enqueue and a `process` span per job
            raise RuntimeError(
                f"the receiver got {spans:,} spans for {n:,} traced jobs, not {2 * n:,}: spans"
                " were dropped (the batch processor's queue was full?), so the CPU per job"
                " would read low; run it again on a quieter machine"
            )
        return {"rate": drained.rate, "cpu_per_job": drained.cpu_per_job, "spans": spans}
    elif row == "normal":
        rate, _ = cases.jobcore_drain(tmp, "NORMAL", n, 1, 4)
        return {"rate": rate}
    elif row == "idle":  # n: jobs enqueued one at a time, each meeting an idle worker
        p50, p99, idle = cases.jobcore_latency(tmp, n, 3.0)
        return {"idle_cpu": idle, "p50_ms": p50, "p99_ms": p99}
    elif row in ENQUEUE_ROWS:
        return ENQUEUE_ROWS[row](tmp, "NORMAL" if row.endswith("-normal") else "FULL", n)
    else:
        raise SystemExit(f"Error: unknown row {row!r}")
    return {"rate": drained.rate, "cpu_per_job": drained.cpu_per_job}


if __name__ == "__main__":
    row, count, folder = sys.argv[1:4]
    print(json.dumps(measure(row, int(count), Path(folder))))
