"""The hub's HTTP API as the agent uses it (DESIGN §11); one method per route.

Every failure is one of four exceptions so callers decide without looking at
status codes: `HubUnavailable` (connection trouble, timeouts, 5xx, 429: try
again later), `HubAuthError` (401/403: the token is bad or revoked),
`StaleReport` (404/409: not this agent's live claim any more) and
`HubRejected` (any other 4xx: the request itself is wrong).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from jobcore.errors import JobcoreError

log = logging.getLogger("jobcore.agent")

DRAIN_HEADER = "X-Jobcore-Drain"
CUT_GRACE = 3.0  # seconds a cut claim waits for the hub's answer before its socket is closed

# The hub's intervals are used only inside these bounds (a hub answering -1 or NaN must not make
# the agent spin, or stop heartbeating): a heartbeat at most every MIN_HEARTBEAT seconds and at
# least every lease/2; a long-poll of MIN_POLL_WAIT..MAX_POLL_WAIT seconds (DESIGN §11: ≤ 30).
MIN_HEARTBEAT = 0.5
MIN_POLL_WAIT = 1.0
MAX_POLL_WAIT = 30.0
DEFAULT_LEASE = 60.0
DEFAULT_HEARTBEAT = 10.0  # and at most lease/4, as the hub's own choice (DESIGN §8)
DEFAULT_POLL_WAIT = 25.0

# The largest hub answer read (`max_answer` unset): any answer 16 MiB; a claim's 4 MiB per job
# asked for (a job's payload is at most the hub's max payload, 1 MiB by default, plus its error
# history and fields), and never less than 16 MiB. A larger answer is not read further.
ANSWER_CAP = 16 * 1024 * 1024
JOB_ANSWER_BYTES = 4 * 1024 * 1024


class HubError(JobcoreError):
    """Talking to the hub failed."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class HubUnavailable(HubError):
    """The hub did not answer, or answered 5xx/429: retry later."""


class HubAuthError(HubError):
    """The hub refused the token (401/403)."""


class StaleReport(HubError):
    """404/409: the job is not this agent's live claim (lease lost, job gone)."""


class HubRejected(HubError):
    """Any other 4xx: the request is wrong and repeating it will not help."""


class OldHubSchema(HubRejected):
    """400 `unknown field` for a field an older hub does not know: send without it."""


class NoBatchRoute(HubError):
    """The hub has no `POST /api/jobs/reports` (404/405: an older hub): use the single routes."""


@dataclass(frozen=True)
class Reported:
    """The hub's answer to a batched report: one `{job_id, state, error?, cancel_requested?}`
    per item, in order, and whether it asks this agent to drain."""

    results: list[dict[str, Any]]
    drain: bool


@dataclass(frozen=True)
class Intervals:
    """What the hub's register answer chose for this agent, in seconds."""

    heartbeat_interval: float
    lease: float
    poll_wait: float


def intervals_of(data: Any, warn: Callable[[str, Any, float], None] | None = None) -> Intervals:
    """The register answer's intervals, each a finite number of seconds inside its bounds:
    a value missing or 0 is the default; one that is not a positive finite number (-1, NaN,
    "10", true) is the default too and `warn(name, value, used)` is called; one out of range
    is clamped into it (and `warn` called)."""
    if not isinstance(data, dict):
        data = {}

    def number(name: str, default: float) -> float:
        value = data.get(name)
        if value is None or (type(value) in (int, float) and value == 0):
            return default
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            if warn is not None:
                warn(name, value, default)
            return default
        return float(value)

    lease = number("lease", DEFAULT_LEASE)
    default_beat = max(MIN_HEARTBEAT, min(DEFAULT_HEARTBEAT, lease / 4))
    beat = number("heartbeat_interval", default_beat)
    bounded = max(MIN_HEARTBEAT, min(beat, lease / 2))
    if bounded != beat and warn is not None:
        warn("heartbeat_interval", beat, bounded)
    wait = number("poll_wait", DEFAULT_POLL_WAIT)
    bounded_wait = max(MIN_POLL_WAIT, min(wait, MAX_POLL_WAIT))
    if bounded_wait != wait and warn is not None:
        warn("poll_wait", wait, bounded_wait)
    return Intervals(heartbeat_interval=bounded, lease=lease, poll_wait=bounded_wait)


@dataclass(frozen=True)
class Claimed:
    jobs: list[dict[str, Any]]
    drain: bool


class AnswerTooLarge(HubUnavailable):
    """The hub's answer was over the agent's cap (`max_answer`); it was not read further."""


def _json(response: httpx.Response, what: str) -> Any:
    """The answer's JSON; an answer that is not JSON is the hub misbehaving (retry later)."""
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HubUnavailable(f"{what}: the hub's answer is not JSON ({exc})") from None


def _object(response: httpx.Response, what: str) -> dict[str, Any]:
    """The answer's JSON object ({} for an empty answer)."""
    if not response.content:
        return {}
    data = _json(response, what)
    if not isinstance(data, dict):
        raise HubUnavailable(f"{what}: the hub's answer is not a JSON object")
    return data


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text[:200] or response.reason_phrase
    if isinstance(data, dict) and "error" in data:
        return str(data["error"])
    if isinstance(data, dict) and "detail" in data:
        return str(data["detail"])
    return response.text[:200]


def check(response: httpx.Response, what: str) -> httpx.Response:
    """Raise the exception matching a non-2xx answer."""
    status = response.status_code
    if status < 300:
        return response
    message = f"{what}: hub answered {status}: {_error_text(response)}"
    if status >= 500 or status == 429:
        raise HubUnavailable(message, status)
    if status in (401, 403):
        raise HubAuthError(message, status)
    if status in (404, 409):
        raise StaleReport(message, status)
    raise HubRejected(message, status)


class HubClient:
    """A thread-safe client of one hub; `token` goes in `Authorization: Bearer …`."""

    def __init__(
        self,
        hub: str,
        *,
        token: str | None,
        timeout: float = 30.0,
        verify: ssl.SSLContext | bool = True,
        max_answer: int | None = None,
    ) -> None:
        self.base = hub.rstrip("/")
        self.max_answer = max_answer  # bytes of one hub answer; None: ANSWER_CAP (claims: more)
        self._said: set[str] = set()  # bad register values, too large answers: logged once
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.auth_headers = headers
        self.timeout = timeout
        self.verify = verify  # what https:// connections trust (a private CA: `--ca-file`)
        self._http = httpx.Client(
            base_url=self.base,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            verify=verify,
        )
        # Claims go over their own connection, so that `end_claims` can cut it alone.
        self._claims_http = httpx.Client(
            base_url=self.base,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            verify=verify,
        )
        self._cut_lock = threading.RLock()
        self._claim_socket: socket.socket | None = None  # of the claims' connection
        self._claims_cut = False

    def close(self) -> None:
        self._http.close()
        self._claims_http.close()

    def end_claims(self) -> None:
        """Stop claiming: end the open long-poll now, and refuse new claims.

        The claims' connection is half-closed: the hub sees the end of the request
        stream, stops waiting for a job and gives back any it claimed for this request
        that it could not send; an answer it sent before still arrives (the caller then
        releases those jobs). After `CUT_GRACE` seconds the socket is closed outright.
        """
        with self._cut_lock:
            self._claims_cut = True
            sock = self._claim_socket
        if sock is not None:
            _shutdown(sock, socket.SHUT_WR)
            timer = threading.Timer(CUT_GRACE, _shutdown, args=(sock, socket.SHUT_RDWR))
            timer.daemon = True
            timer.start()

    def _trace_claim(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook on the claims' connection: note its socket when it opens."""
        if event not in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._cut_lock:
            self._claim_socket = sock
            cut = self._claims_cut
        if cut:  # opened while `end_claims` ran: the hub must not wait on it either
            _shutdown(sock, socket.SHUT_WR)

    def owns(self, url: str) -> bool:
        """True when `url` is one of this hub's artifacts (so the token may be sent with it).

        Only the artifact store: an `exec` payload's url comes from producers, and the
        agent's token on another hub route (`GET /api/queue` claims a job) would act
        for the agent, e.g. claim someone else's job and drop it."""
        prefix = self.base + "/api/artifacts/"
        rest = url[len(prefix) :]
        return url.startswith(prefix) and rest.isalnum() and "/" not in rest

    def _send(
        self,
        http: httpx.Client,
        path: str,
        *,
        what: str,
        cap: int | None = None,
        **request: Any,
    ) -> httpx.Response:
        """POST `path`, reading the answer as a stream of at most `cap` bytes (decoded):
        over it, the rest is not read, the connection is closed and `AnswerTooLarge` raised.
        Transport errors are raised as they are (the caller names them)."""
        limit = self.max_answer or cap or ANSWER_CAP
        response = http.send(http.build_request("POST", path, **request), stream=True)
        chunks: list[bytes] = []
        try:
            declared = response.headers.get("Content-Length", "")
            too_large = declared.isdigit() and int(declared) > limit  # not even begun
            size = 0
            if not too_large:
                for chunk in response.iter_bytes():  # decoded: a compressed answer counts whole
                    size += len(chunk)
                    if size > limit:
                        too_large = True
                        break
                    chunks.append(chunk)
        finally:
            response.close()  # mid-answer: the connection is closed, not kept
        if too_large:
            message = (
                f"{what}: the hub's answer is over {limit} bytes, this agent's limit "
                "(max_answer); not read further, the hub is treated as unavailable"
            )
            route = path.rsplit("/", 1)[-1]  # claim, reports, heartbeat, register…
            say = log.debug if route in self._said else log.error  # callers log it again
            self._said.add(route)
            say("%s", message)
            raise AnswerTooLarge(message, response.status_code)
        response._content = b"".join(chunks)  # as httpx's own `read()` leaves it
        return response

    def _post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        what: str,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        try:
            response = self._send(
                self._http,
                path,
                what=what,
                json=body,
                headers=headers,
                timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
            )
        except httpx.TransportError as exc:  # connect, read, timeouts, protocol errors
            raise unavailable(what, exc) from None
        return check(response, what)

    # -- routes ------------------------------------------------------------------

    def register(self, info: dict[str, Any]) -> tuple[Intervals, bool]:
        """`POST /api/workers/register`; returns the hub's intervals and whether to drain."""
        response = self._post("/api/workers/register", info, what="register")
        data = _object(response, "register")
        return intervals_of(data, self._bad_interval), _drain(response, data)

    def _bad_interval(self, name: str, value: Any, used: float) -> None:
        """The hub's register answer holds a bad `name`: said once (each re-register asks
        again), then at debug level."""
        say = log.debug if f"register {name}" in self._said else log.warning
        self._said.add(f"register {name}")
        say(
            "the hub's register answer has %s %s, not a usable number of seconds; using %gs",
            name,
            json.dumps(value) if not isinstance(value, float) else repr(value),
            used,
        )

    def declare_limits(
        self,
        worker_id: str,
        limits: list[dict[str, Any]],
        unlimited: list[str],
        rates: list[dict[str, Any]] | None = None,
        unrated: list[str] | None = None,
    ) -> dict[str, Any] | None:
        """`POST /api/workers/limits`: the concurrency limits (and, unless None, the rate
        limits) this agent's job types declare; the hub's answer, or None when the hub has
        no such route (404/405: an older hub). An older hub that knows the route but not
        `rates`: `OldHubSchema` (send again without them)."""
        what = "declaring limits"
        body: dict[str, Any] = {"worker_id": worker_id, "limits": limits, "unlimited": unlimited}
        if rates is not None or unrated is not None:
            body |= {"rates": rates or [], "unrated": unrated or []}
        try:
            response = self._send(self._http, "/api/workers/limits", what=what, json=body)
        except httpx.TransportError as exc:
            raise unavailable(what, exc) from None
        if response.status_code in (404, 405):
            return None
        if response.status_code == 400 and "rates" in body:
            text = _error_text(response)
            if "rates: unknown field" in text or "unrated: unknown field" in text:
                raise OldHubSchema(f"{what}: hub answered 400: {text}", 400)
        data = _json(check(response, what), what)
        return data if isinstance(data, dict) else {}

    def claim(
        self,
        *,
        worker_id: str,
        types: tuple[str, ...],
        queues: tuple[str, ...],
        max_jobs: int,
        wait: float,
        start: int | None = None,
        key: str | None = None,
    ) -> Claimed:
        """`POST /api/jobs/claim` long-poll: up to `max_jobs` jobs, [] when `wait` passed.

        `start`: how many of them the hub marks started at once (the rest are read-ahead and
        start with a `start` report); None leaves it out (every job starts at its claim).
        `key` (`X-Idempotency-Key`): the same key again after a lost answer gets the jobs
        that answer carried, if this agent still holds them, instead of new claims."""
        body: dict[str, Any] = {
            "worker_id": worker_id,
            "types": list(types),
            "queues": list(queues),
            "max_jobs": max_jobs,
            "wait": wait,
        }
        if start is not None:
            body["start"] = start
        if self._claims_cut:
            return Claimed(jobs=[], drain=False)
        try:
            response = self._send(
                self._claims_http,
                "/api/jobs/claim",
                what="claim",
                cap=max(ANSWER_CAP, JOB_ANSWER_BYTES * max_jobs),
                json=body,
                timeout=wait + self.timeout,
                headers={"X-Idempotency-Key": key} if key else None,
                extensions={"trace": self._trace_claim},
            )
        except httpx.TransportError as exc:
            if self._claims_cut:  # the hub answered the cut with nothing
                return Claimed(jobs=[], drain=False)
            raise unavailable("claim", exc) from None
        check(response, "claim")
        if response.status_code == 204 or not response.content:
            return Claimed(jobs=[], drain=_drain(response, {}))
        data = _json(response, "claim")
        jobs = (
            data
            if isinstance(data, list)
            else data.get("jobs", [data])
            if isinstance(data, dict)
            else None
        )
        if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
            # the jobs it claimed come back when their leases lapse
            raise HubUnavailable("claim: the hub's answer is not a job or a list of jobs")
        return Claimed(jobs=jobs, drain=_drain(response, {}))

    def heartbeat(self, job_id: str, *, worker_id: str, lease_id: str | None) -> dict[str, Any]:
        """`POST /api/jobs/{id}/heartbeat` -> `{lease_expires_at, cancel_requested, drain?}`."""
        body = {"worker_id": worker_id}
        if lease_id is not None:
            body["lease_id"] = lease_id
        response = self._post(
            f"/api/jobs/{job_id}/heartbeat",
            body,
            what=f"heartbeat of job {job_id}",
        )
        data = _object(response, f"heartbeat of job {job_id}")
        data["drain"] = _drain(response, data)
        return data

    def report(self, kind: str, job_id: str, body: dict[str, Any], *, key: str) -> dict[str, Any]:
        """`POST /api/jobs/{id}/{result|fail|release}`; a repeat (same lease_id or key) is a 200."""
        response = self._post(
            f"/api/jobs/{job_id}/{kind}",
            body,
            what=f"{kind} of job {job_id}",
            headers={"X-Idempotency-Key": key},
        )
        return _object(response, f"{kind} of job {job_id}")

    def reports(self, worker_id: str, items: list[dict[str, Any]]) -> Reported:
        """`POST /api/jobs/reports`: many results, failures, releases, heartbeats and starts
        at once."""
        what = f"report of {len(items)} item(s)"
        try:
            response = self._send(
                self._http,
                "/api/jobs/reports",
                what=what,
                json={"worker_id": worker_id, "reports": items},
            )
        except httpx.TransportError as exc:
            raise unavailable("report", exc) from None
        if response.status_code in (404, 405):
            raise NoBatchRoute(
                f"the hub has no batched reports route ({response.status_code})",
                response.status_code,
            )
        data = _json(check(response, what), what)
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list) or len(results) != len(items):
            raise HubUnavailable("report: the hub's answer does not answer every item")
        return Reported(results=results, drain=_drain(response, data))

    # -- artifacts -----------------------------------------------------------------

    def upload_artifact(self, data: bytes) -> dict[str, Any]:
        """`POST /api/artifacts` (admin): stores the bytes; answers `{sha256, size}`."""
        try:
            response = self._send(
                self._http,
                "/api/artifacts",
                what="upload",
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
        except httpx.TransportError as exc:
            raise unavailable("upload", exc) from None
        return _object(check(response, "upload"), "upload")

    @contextmanager
    def stream(self, url: str) -> Iterator[httpx.Response]:
        """GET `url` streaming (with the token only when it points at this hub)."""
        headers = self.auth_headers if self.owns(url) else {}
        with httpx.stream(
            "GET",
            url,
            headers=headers,
            timeout=self.timeout,
            follow_redirects=True,
            verify=self.verify,
        ) as response:
            if response.status_code >= 300:  # its error text: the first 64 KiB at most
                _read_some(response, 64 * 1024)
            check(response, f"download {url}")
            yield response


def _read_some(response: httpx.Response, limit: int) -> None:
    """Read up to `limit` bytes of a streamed answer as its content (the rest is not read)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    response._content = b"".join(chunks)[:limit]


def unavailable(what: str, exc: httpx.TransportError) -> HubUnavailable:
    """The hub did not answer `what`; says what to do when its certificate is not trusted."""
    text = f"{what}: {type(exc).__name__}: {exc or 'no answer'}"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        text += (
            "; the hub's TLS certificate is not trusted: pass --ca-file with the CA that signed it"
        )
    return HubUnavailable(text)


def _shutdown(sock: socket.socket, how: int) -> None:
    """Shut a socket down at the TCP level (for a TLS socket too: its TLS state is left alone,
    so an answer already on its way can still be read)."""
    with contextlib.suppress(OSError):  # closed meanwhile
        socket.socket.shutdown(sock, how)


def _drain(response: httpx.Response, data: dict[str, Any]) -> bool:
    return bool(data.get("drain")) or response.headers.get(DRAIN_HEADER, "") in ("1", "true")


class Backoff:
    """Exponential reconnect delays with jitter: each in [d/2, d], d doubling up to `cap`."""

    def __init__(self, cap: float, base: float = 0.25) -> None:
        self.cap = cap
        self.base = base
        self.failures = 0

    def next(self) -> float:
        delay = min(self.cap, self.base * 2**self.failures)
        self.failures += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.failures = 0
