"""Job type `exec`: run a checksummed executable fetched by URL or from the hub's store.

Payload `{url?, sha256, params, args}`. The executable is taken from the
artifact cache, or downloaded (from `url`, else the hub's
`/api/artifacts/{sha256}`) and verified first; it runs as
`EXE --params JSON [args…]` in its own process group, in a fresh working
folder, with bounded output and the job's timeout. Stdout that parses as
JSON is the result, else `{stdout, stderr, exit_code}`. A checksum mismatch
fails the job at once (`solver_checksum_mismatch`); download errors retry.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from jobcore_shell.runner import check_output_limit, kept_bytes, run_command
from pydantic import Field

from jobcore import Interrupted, JobContext, JobType, Payload, PermanentError
from jobcore.errors import JobcoreError
from jobcore_agent.cache import ArtifactCache
from jobcore_agent.client import HubClient, HubError
from jobcore_agent.settings import AgentSettings


class ExecPayload(Payload):
    url: str | None = Field(
        default=None, description="http(s) URL of the executable (default: the hub's store)"
    )
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$", description="SHA-256 of the executable")
    params: Any = Field(default_factory=dict, description="passed as --params JSON")
    args: list[str] = Field(default_factory=list, description="extra arguments after --params")
    output_limit: int = Field(
        default=65536,
        ge=0,
        description="bytes kept per stream (the tail); at most 16 MiB, and at run time "
        "no more than max_result_bytes",
    )


class DownloadFailed(JobcoreError):
    """The executable could not be downloaded (retryable)."""


class ExecFailed(Exception):
    """The executable exited non-zero (retryable)."""


class ArtifactSource:
    """Where `exec` gets executables: a cache dir, and the hub when running on an agent."""

    def __init__(self, cache: ArtifactCache, hub: HubClient | None = None) -> None:
        self.cache = cache
        self.hub = hub

    def executable(self, sha256: str, url: str | None) -> Path:
        sha256 = sha256.lower()
        hit = self.cache.cached(sha256)
        if hit is not None:
            return hit
        if url is None:
            if self.hub is None:
                raise PermanentError(
                    "exec payload has no url and this worker has no hub to fetch "
                    f"artifact {sha256} from; give a url or run the job on an agent"
                )
            url = f"{self.hub.base}/api/artifacts/{sha256}"
        return self.cache.get(sha256, lambda: self._download(url), source=url)

    def _download(self, url: str) -> Iterator[bytes]:
        try:
            if self.hub is not None:
                with self.hub.stream(url) as response:
                    yield from response.iter_bytes()
            else:
                with httpx.stream("GET", url, timeout=30.0, follow_redirects=True) as response:
                    response.raise_for_status()
                    yield from response.iter_bytes()
        except (httpx.HTTPError, HubError) as exc:
            raise DownloadFailed(f"download of {url} failed: {exc}") from None


def _source_for(ctx: JobContext) -> ArtifactSource:
    source = getattr(ctx, "artifact_source", None)
    if isinstance(source, ArtifactSource):
        return source
    settings = ctx.config.plugin_settings("agent", AgentSettings)
    return ArtifactSource(ArtifactCache(settings.cache_dir))


def _tail(text: str, limit: int = 500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def run_exec(payload: ExecPayload, ctx: JobContext) -> Any:
    source = _source_for(ctx)
    exe = source.executable(payload.sha256, payload.url)
    ctx.check_stop()
    timeout = None if ctx.job.timeout_ms is None else ctx.job.timeout_ms / 1000
    workdir = tempfile.mkdtemp(prefix=f"exec-{ctx.job.id}-", dir=source.cache.root.parent)
    try:
        finished = run_command(
            [str(exe), "--params", json.dumps(payload.params), *payload.args],
            shell=False,
            cwd=workdir,
            env=None,
            timeout=timeout,
            output_limit=kept_bytes(payload.output_limit, ctx.config.core.max_result_bytes),
            should_stop=lambda: ctx.stop_reason,
        )
    except OSError as exc:
        raise PermanentError(f"cannot run {exe}: {exc.strerror}") from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    stdout, stderr = finished.stdout.text(), finished.stderr.text()
    if finished.stopped == "timeout":
        # the same timeout the agent watches: judged as that one (one reason, however noticed)
        ctx.request_stop("timeout")
        ctx.logger.warning("killed after %gs (its timeout); stderr: %s", timeout, _tail(stderr))
        raise TimeoutError(
            f"max_runtime_exceeded: killed after {timeout:g}s; stderr: {_tail(stderr)}"
        )
    if finished.stopped is not None:
        raise Interrupted(f"executable stopped ({finished.stopped}); process group killed")
    if finished.exit_code != 0:
        raise ExecFailed(f"exit code {finished.exit_code}; stderr: {_tail(stderr)}")
    try:
        return json.loads(stdout)
    except ValueError:
        return {"stdout": stdout, "stderr": stderr, "exit_code": finished.exit_code}


EXEC = JobType(
    name="exec",
    payload_model=ExecPayload,
    handler=run_exec,
    description="run a checksummed executable (by url or from the hub) with --params JSON",
    check=check_output_limit,
)
