"""The otel plugin's schedule gauges when the store cannot be read: one read per collection
(its three instruments share it, as they share a successful one), its failure logged once,
not a read and a traceback per instrument."""

from __future__ import annotations

from collections.abc import Callable

import jobcore_test_plugin as tp
import pytest
from jobcore_otel import OtelPlugin
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from jobcore import Queue
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


def test_a_failing_read_is_shared_by_the_three_instruments(
    jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jobcore_cron

    queue = jobcore_make_queue(
        tp,
        jobcore_cron,
        plugin_settings={"cron": {"schedules": {"hourly": {"type": "noop", "every": "1h"}}}},
    )
    drain(queue)  # its scheduler records the schedule
    with queue.transaction() as conn:
        conn.execute("DROP TABLE cron_runs")  # every read of the schedules fails now
    monkeypatch.setattr("jobcore_otel.schedules.FRESH", 3600.0)  # one collection, one read
    reader = InMemoryMetricReader()
    plugin = OtelPlugin(TracerProvider(), MeterProvider(metric_readers=[reader]))
    queue.pm.register(plugin)
    plugin.jobcore_configure(queue.config)
    plugin.jobcore_worker_started("w-1", queue)  # as a worker's start: the plugin's queue
    with caplog.at_level("ERROR"):
        reader.get_metrics_data()  # the SDK logs each callback that raises
    failed = [r.getMessage() for r in caplog.records if "jobcore.schedule." in r.getMessage()]
    assert len(failed) == 1, failed
    assert "no such table" in caplog.text
