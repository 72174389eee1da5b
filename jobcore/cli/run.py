"""`jobcore run`: one worker process."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

import click

from jobcore.cli import CliState, cli, pass_state
from jobcore.cli.params import DURATION, NON_EMPTY, POSITIVE_DURATION, TEXT
from jobcore.worker import Worker


@cli.command()
@click.option("--concurrency", type=click.IntRange(1, 1024), help="Executor threads (default 4).")
@click.option(
    "--async-concurrency",
    type=click.IntRange(1, 100_000),
    help="async def handlers in flight on the event loop (default 100).",
)
@click.option(
    "--queue", "queues", multiple=True, type=TEXT, help="Only claim from this queue (repeatable)."
)
@click.option(
    "--type", "types", multiple=True, type=TEXT, help="Only claim this job type (repeatable)."
)
@click.option(
    "--lease",
    type=POSITIVE_DURATION,
    help="Lease per claim; heartbeats every lease/4 (default 60s).",
)
@click.option(
    "--poll-interval",
    type=POSITIVE_DURATION,
    help="Full claim query at least this often (default 1s).",
)
@click.option(
    "--shutdown-timeout",
    type=DURATION,
    help="On SIGTERM, wait this long for running jobs (default 30s).",
)
@click.option(
    "--backoff-base", type=DURATION, help="First retry delay; doubles per attempt (default 1s)."
)
@click.option("--backoff-cap", type=DURATION, help="Longest retry delay (default 5m).")
@click.option(
    "--until-empty", is_flag=True, help="Exit once nothing runnable remains and nothing is running."
)
@click.option("--max-jobs", type=click.IntRange(min=1), help="Exit after finishing this many jobs.")
@click.option(
    "--worker-id", type=NON_EMPTY, help="Name recorded in locked_by (default host:pid:random)."
)
@pass_state
def run(
    state: CliState,
    concurrency: int | None,
    async_concurrency: int | None,
    queues: tuple[str, ...],
    types: tuple[str, ...],
    lease: float | None,
    poll_interval: float | None,
    shutdown_timeout: float | None,
    backoff_base: float | None,
    backoff_cap: float | None,
    until_empty: bool,
    max_jobs: int | None,
    worker_id: str | None,
) -> None:
    """Run a worker: claim jobs and execute them until stopped (SIGINT/SIGTERM)."""
    overrides = {
        "concurrency": concurrency,
        "async_concurrency": async_concurrency,
        "lease": lease,
        "poll_interval": poll_interval,
        "shutdown_timeout": shutdown_timeout,
        "backoff_base": backoff_base,
        "backoff_cap": backoff_cap,
    }
    state.override(overrides)
    worker = Worker(
        state.queue(),
        queues=queues,
        types=types,
        worker_id=worker_id,
        until_empty=until_empty,
        max_jobs=max_jobs,
        install_signal_handlers=True,
    )
    _late_signals_belong_to_the_stop(worker)
    code = worker.run()
    if worker.stopping:  # Python resets its own handlers as it exits; ignored ones stay ignored
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    summary = ", ".join(f"{name} {count}" for name, count in worker.stats.items() if count)
    click.echo(f"worker {worker.worker_id} finished: {summary or 'no jobs'}")
    if code:
        raise SystemExit(code)


def _late_signals_belong_to_the_stop(worker: Worker) -> None:
    """The worker restores the handlers it found once its loop ends, well before this process
    exits (stop hooks, the summary line, closing the store). A second SIGTERM/SIGINT sent
    quickly then found the default action: death by the signal instead of a clean exit. This
    process ends right after the worker, so a signal arriving once it is stopping is part of
    that stop; before it, the handler that was there acts as before."""
    previous: dict[int, Any] = {}

    def late(signum: int, frame: FrameType | None) -> None:
        if worker.stopping:
            return
        signal.signal(signum, previous[signum])
        signal.raise_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.getsignal(signum) or signal.SIG_DFL
        signal.signal(signum, late)
