"""One test per hook spec (`test_hook_<name>`); test_meta checks none is missing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import click
import jobcore_test_plugin as tp
import pytest
from click.testing import CliRunner

from jobcore import Config, Job, JobStatus, Queue, RetryDecision, RetryPolicy, hookimpl
from jobcore.cli import cli
from jobcore.models import NewJob
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing import HookRecorder, drain

MakeQueue = Callable[..., Queue]


def test_hook_jobcore_register_job_types(jobcore_make_queue: MakeQueue) -> None:
    queue = jobcore_make_queue(tp)
    assert {"record", "sleepy", "crash", "fail", "parent", "noop"} <= {
        t.name for t in queue.registry
    }
    assert queue.registry.owner("sleepy") == "jobcore_test_plugin"


def test_duplicate_job_type_names_name_both_plugins(jobcore_make_queue: MakeQueue) -> None:
    class Again:
        @hookimpl
        def jobcore_register_job_types(self, register: Any) -> None:
            register(tp.JobType(name="sleepy", payload_model=tp.SleepPayload, handler=tp.sleepy))

    queue = jobcore_make_queue(tp, Again())
    [info] = [info for name, info in queue.pm.infos.items() if name.startswith("Again")]
    assert info.status == "unavailable"
    assert "'sleepy' is registered by both 'jobcore_test_plugin' and 'Again-" in (info.reason or "")
    assert queue.registry.owner("sleepy") == "jobcore_test_plugin"  # the first one keeps it


def test_hook_jobcore_register_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "command_plugin.py").write_text(
        "import click\n"
        "from jobcore import hookimpl\n"
        "@hookimpl\n"
        "def jobcore_register_commands(cli):\n"
        "    @cli.command()\n"
        "    def hello():\n"
        "        '''Say hello.'''\n"
        "        click.echo('hello from a plugin')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["hello"], env={"JOBCORE_PLUGINS": "command_plugin"})
    assert result.exit_code == 0 and result.stdout == "hello from a plugin\n"
    assert (
        "hello"
        in CliRunner().invoke(cli, ["--help"], env={"JOBCORE_PLUGINS": "command_plugin"}).stdout
    )


def test_hook_jobcore_storage_backend(jobcore_make_queue: MakeQueue, tmp_path: Path) -> None:
    opened: list[str] = []

    class CustomScheme:
        @hookimpl
        def jobcore_storage_backend(
            self, url: str, config: Config, create: bool
        ) -> SQLiteStorage | None:
            if not url.startswith("custom:"):
                return None
            opened.append(url)
            return SQLiteStorage(tmp_path / (url.removeprefix("custom:") + ".db"), create=create)

    queue = jobcore_make_queue(CustomScheme(), db="custom:alpha")
    queue.enqueue("noop", {})
    assert opened == ["custom:alpha"] and (tmp_path / "alpha.db").exists()
    default = jobcore_make_queue(CustomScheme(), db=f"sqlite:{tmp_path / 'plain.db'}")
    default.enqueue("noop", {})
    assert (tmp_path / "plain.db").exists()


def test_hook_jobcore_retry_decision(jobcore_make_queue: MakeQueue) -> None:
    seen: list[tuple[int, float]] = []

    class NoRetryOnValueError:
        @hookimpl
        def jobcore_retry_decision(
            self, job: Job, error: BaseException, policy: RetryPolicy
        ) -> RetryDecision | None:
            seen.append((job.attempts, policy.base))
            return (
                RetryDecision.fail("no retries for ValueError")
                if isinstance(error, ValueError)
                else None
            )

    queue = jobcore_make_queue(tp, NoRetryOnValueError())
    job = queue.enqueue("fail", {}).job
    drain(queue)
    assert queue.get(job.id).status is JobStatus.FAILED and queue.get(job.id).attempts == 1
    assert seen == [(1, 0.0)]


def test_hook_jobcore_execute_job(jobcore_make_queue: MakeQueue) -> None:
    calls: list[str] = []

    class Timing:
        @hookimpl(wrapper=True)
        def jobcore_execute_job(self, job: Job, ctx: Any) -> Generator[None, Any, Any]:
            calls.append(f"before {job.type}")
            try:
                result = yield
            except Exception as exc:
                calls.append(f"raised {type(exc).__name__}")
                raise
            calls.append(f"after {result}")
            return {"wrapped": result}

    queue = jobcore_make_queue(tp, Timing())
    ok = queue.enqueue("noop", {"sleep": 0.01}).job
    bad = queue.enqueue("fail", {"how": "permanent"}).job
    drain(queue, concurrency=1)
    assert queue.get(ok.id).result == {"wrapped": {"slept": 0.01}}
    assert queue.get(bad.id).status is JobStatus.FAILED
    assert calls == ["before noop", "after {'slept': 0.01}", "before fail", "raised PermanentError"]


def test_hook_jobcore_enqueue_meta(jobcore_make_queue: MakeQueue) -> None:
    class Trace:
        @hookimpl
        def jobcore_enqueue_meta(self, job: NewJob) -> dict[str, Any]:
            return {"traceparent": f"00-{job.id.replace('-', '')}-01", "parent": job.parent_id}

    queue = jobcore_make_queue(tp, Trace())
    parent = queue.enqueue("parent", {"children": 1}, meta={"app": "x"}).job
    assert parent.meta["app"] == "x" and parent.meta["traceparent"].startswith("00-")
    drain(queue)
    [child] = [job for job in queue.list_jobs() if job.parent_id]
    assert child.meta["parent"] == parent.id


def test_hook_jobcore_stats(
    jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    from jobcore import StatsSection
    from jobcore.cli.admin import stats_json, stats_text

    class Backlog:
        @hookimpl
        def jobcore_stats(self, queue: Queue) -> list[StatsSection]:
            depth = queue.storage.count_by_status().get("pending", 0)
            return [
                StatsSection("backlog", {"depth": depth}, "Backlog:\n  1 waiting"),
                StatsSection("limits", "mine", "taken"),  # the core's key: left out
            ]

    class Again:
        @hookimpl
        def jobcore_stats(self) -> StatsSection:
            return StatsSection("backlog", "second", "Second")  # taken by Backlog

    class Broken:
        @hookimpl
        def jobcore_stats(self, queue: Queue) -> StatsSection:
            raise RuntimeError("cannot count")

    class NotJson:
        @hookimpl
        def jobcore_stats(self, queue: Queue) -> StatsSection:
            return StatsSection("odd", float("nan"), "Odd")

    # called last-registered first (pluggy): Backlog answers before Again
    queue = jobcore_make_queue(tp, Again(), Backlog(), Broken(), NotJson())
    queue.enqueue("noop", {})
    with caplog.at_level("ERROR", logger="jobcore"):
        stats = queue.stats()
    answered = stats_json(stats)
    assert answered["backlog"] == {"depth": 1} and isinstance(answered["limits"], list)
    assert "odd" not in answered
    assert "Backlog:\n  1 waiting" in stats_text(stats) and "Second" not in stats_text(stats)
    said = caplog.text
    assert "failed in jobcore_stats" in said and "cannot count" in said
    assert "answered stats key 'limits', already taken" in said
    assert "Again-" in said and "answered stats key 'backlog', already taken" in said
    assert said.count("failed in jobcore_stats") == 2  # Broken and NotJson


def _lifecycle(
    jobcore_queue: Queue, jobcore_recorder: HookRecorder, payload: dict[str, Any], **options: Any
) -> list[str]:
    job = jobcore_queue.enqueue("noop", payload, **options).job
    drain(jobcore_queue)
    return jobcore_recorder.events(job.id)


def test_hook_jobcore_job_enqueued(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    with jobcore_queue.transaction():
        job = jobcore_queue.enqueue("noop", {}).job
        assert jobcore_recorder.events() == []  # only after the commit
    assert jobcore_recorder.events(job.id) == ["job_enqueued"]
    duplicate_key = jobcore_queue.enqueue("noop", {}, idempotency_key="k").job
    jobcore_queue.enqueue("noop", {}, idempotency_key="k")
    assert jobcore_recorder.events(duplicate_key.id) == ["job_enqueued"]


def test_hook_jobcore_job_claimed(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    assert _lifecycle(jobcore_queue, jobcore_recorder, {})[1] == "job_claimed"
    [call] = jobcore_recorder.of("job_claimed")
    assert call.job is not None and call.job.attempts == 1 and call.kwargs["worker"]


def test_hook_jobcore_job_completed(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    assert _lifecycle(jobcore_queue, jobcore_recorder, {"sleep": 0.05})[-1] == "job_completed"
    [call] = jobcore_recorder.of("job_completed")
    assert call.kwargs["duration_ms"] >= 50


def test_hook_jobcore_job_retrying(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    events = _lifecycle(jobcore_queue, jobcore_recorder, {"fail": True}, max_attempts=2)
    assert events == ["job_enqueued", "job_claimed", "job_retrying", "job_claimed", "job_failed"]
    assert "noop failed" in jobcore_recorder.of("job_retrying")[0].kwargs["error"]


def test_hook_jobcore_job_failed(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    _lifecycle(jobcore_queue, jobcore_recorder, {"fail": True}, max_attempts=1)
    [call] = jobcore_recorder.of("job_failed")
    assert call.job is not None and call.job.status is JobStatus.FAILED


def test_hook_jobcore_job_reclaimed(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    job = jobcore_queue.enqueue("noop", {}).job
    past = SQLiteStorage(jobcore_queue.url, clock=lambda: 0)  # a claim made long ago
    past.claim(worker="gone", limit=1, lease_ms=1)
    past.close()
    jobcore_queue.sweep()
    [call] = jobcore_recorder.of("job_reclaimed")
    assert (
        call.job is not None and call.job.id == job.id and call.kwargs["error"] == "lease expired"
    )


def test_hook_jobcore_job_cancelled(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    job = jobcore_queue.enqueue("noop", {}, delay=60).job
    jobcore_queue.cancel([job.id])
    assert jobcore_recorder.events(job.id) == ["job_enqueued", "job_cancelled"]


def test_hook_jobcore_worker_started(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    worker = drain(jobcore_queue)
    assert jobcore_recorder.of("worker_started")[0].kwargs["worker"] == worker.worker_id


def test_hook_jobcore_worker_stopped(jobcore_queue: Queue, jobcore_recorder: HookRecorder) -> None:
    worker = drain(jobcore_queue)
    assert jobcore_recorder.events()[-1] == "worker_stopped"
    assert jobcore_recorder.of("worker_stopped")[0].kwargs["worker"] == worker.worker_id


def test_hook_jobcore_reconcile(jobcore_make_queue: MakeQueue) -> None:
    class Checker:
        @hookimpl
        def jobcore_reconcile(self, job: Job) -> list[str]:
            return [f"{job.id} looks wrong"] if job.payload["sleep"] else []

    queue = jobcore_make_queue(Checker())
    odd = queue.enqueue("noop", {"sleep": 0.01}).job
    queue.enqueue("noop", {})
    drain(queue)
    assert [(job.id, problems) for job, problems in queue.reconcile()] == [
        (odd.id, [f"{odd.id} looks wrong"])
    ]


def test_hook_jobcore_configure(jobcore_make_queue: MakeQueue) -> None:
    class Stateful:
        config: Config | None = None

        @hookimpl
        def jobcore_configure(self, config: Config) -> None:
            self.config = config

    plugin = Stateful()
    queue = jobcore_make_queue(plugin, lease=7.0)
    assert plugin.config is queue.config and plugin.config.core.lease == 7.0


def test_register_commands_failure_does_not_break_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad_commands.py").write_text(
        "from jobcore import hookimpl\n@hookimpl\ndef jobcore_register_commands(cli):\n    raise RuntimeError('nope')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["--help"], env={"JOBCORE_PLUGINS": "bad_commands"})
    assert result.exit_code == 0 and "enqueue" in result.stdout
    assert isinstance(cli, click.Group)


def test_a_plugin_under_a_name_already_taken_leaves_that_plugin_registered(
    jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """Two plugins by one name (two distributions' entry points, or an application's object
    named like a built-in): the second is refused and logged; the first keeps running."""
    queue = jobcore_make_queue(tp)
    builtin = queue.pm.get_plugin("jobcore.builtin.execute")
    with caplog.at_level(logging.ERROR, logger="jobcore.plugins"):
        assert not queue.pm.register_plugin(object(), "jobcore.builtin.execute", source="object")
    assert queue.pm.get_plugin("jobcore.builtin.execute") is builtin
    assert "another plugin is registered under that name" in caplog.text
    job = queue.enqueue("noop", {}).job
    drain(queue)
    assert queue.get(job.id).status is JobStatus.COMPLETED
    name = "jobcore_test_plugin"
    assert queue.pm.infos[name].status == "loaded"
    assert not queue.pm.register_plugin(object(), name, source="entry point")
    assert queue.pm.infos[name].status == "loaded" and queue.pm.get_plugin(name) is tp
