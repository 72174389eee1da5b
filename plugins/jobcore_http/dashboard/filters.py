"""The jobs view's filters, as they appear in the URL (bookmarkable) and in forms."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import ImmutableMultiDict

from jobcore.errors import InvalidPayload
from jobcore.limits import check_text
from jobcore.models import JobStatus
from jobcore_http.store import MAX_QUERY_CHARS
from jobcore_http.store import JobFilter as HubFilter

STATUSES = tuple(status.value for status in JobStatus)
RETRYABLE = ("failed", "cancelled")
CANCELLABLE = ("scheduled", "pending", "claimed")
PAGE_SIZES = (25, 50, 100, 200)


class BadFilter(ValueError):
    """A filter value the jobs view cannot use; the message says which and what to use."""


@dataclass(frozen=True, slots=True)
class JobFilter:
    statuses: tuple[str, ...] = ()
    type: str = ""
    queue: str = ""
    worker: str = ""
    q: str = ""

    @classmethod
    def from_params(cls, params: ImmutableMultiDict[str, Any]) -> JobFilter:
        """From query or form parameters (`status` may repeat); unknown statuses are refused."""
        statuses: list[str] = []
        for value in params.getlist("status"):
            for part in str(value).split(","):
                part = part.strip()
                if not part:
                    continue
                if part not in STATUSES:
                    raise BadFilter(f"unknown status {part!r}; use one of {', '.join(STATUSES)}")
                if part not in statuses:
                    statuses.append(part)
        get = params.get
        q = str(get("q") or "").strip()
        if len(q) > MAX_QUERY_CHARS:
            raise BadFilter(f"the search is {len(q)} characters; the limit is {MAX_QUERY_CHARS}")
        found = cls(
            statuses=tuple(statuses),
            type=str(get("type") or "").strip(),
            queue=str(get("queue") or "").strip(),
            worker=str(get("worker") or "").strip(),
            q=q,
        )
        for name in ("type", "queue", "worker", "q"):
            try:  # a form body is not checked with the URL: NUL was a 503 on PostgreSQL
                check_text(name, getattr(found, name))
            except InvalidPayload as exc:
                raise BadFilter(str(exc)) from None
        return found

    def for_hub(self) -> HubFilter:
        """The same filter in the hub's terms (its `search_jobs` serves the jobs list)."""
        return HubFilter(
            statuses=self.statuses,
            types=(self.type,) if self.type else (),
            queues=(self.queue,) if self.queue else (),
            worker=self.worker or None,
            q=self.q or None,
        )

    @property
    def empty(self) -> bool:
        return not (self.statuses or self.type or self.queue or self.worker or self.q)

    def pairs(self) -> list[tuple[str, str]]:
        """The filter as URL parameters, in a stable order."""
        out = [("status", status) for status in self.statuses]
        for name in ("type", "queue", "worker", "q"):
            value = getattr(self, name)
            if value:
                out.append((name, value))
        return out

    def query(self, **extra: str | int | None) -> str:
        """URL query string of the filter plus `extra` (None values left out)."""
        pairs = self.pairs() + [(k, str(v)) for k, v in extra.items() if v is not None]
        return urlencode(pairs)

    def narrowed(self, statuses: tuple[str, ...]) -> JobFilter:
        """The same filter restricted to `statuses` (the ones an action applies to)."""
        wanted = [s for s in (self.statuses or STATUSES) if s in statuses]
        return replace(self, statuses=tuple(wanted))

    def describe(self) -> str:
        """Human words for the filter: `status failed, type shell, matching "boom"`."""
        parts = []
        if self.statuses:
            parts.append("status " + " or ".join(self.statuses))
        for name in ("type", "queue", "worker"):
            if getattr(self, name):
                parts.append(f"{name} {getattr(self, name)}")
        if self.q:
            parts.append(f"matching “{self.q}”")
        return ", ".join(parts) or "all jobs"
