"""`postgresql://` URLs: which ones are ours, and jobcore's own query parameters.

jobcore reads `schema` and `poll_only` from the URL's query string and hands
the rest to libpq unchanged (e.g. `sslmode`, `application_name`)::

    postgresql://app@db.internal/app?schema=jobs&poll_only=true
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from jobcore.errors import ConfigError

SCHEMES = ("postgresql", "postgres")
# at most 55 characters: the notification channel `<schema>_changes` must fit in 63
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,54}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def is_postgres_url(url: str) -> bool:
    """True for `postgresql://…` and `postgres://…` URLs."""
    return url.split("://", 1)[0].lower() in SCHEMES if "://" in url else False


@dataclass(frozen=True)
class PostgresTarget:
    """Where the jobs live: the libpq connection string, the schema, and the wake-up mode."""

    conninfo: str
    schema: str
    poll_only: bool
    options: str = ""
    """The URL's own `options` (libpq's `-c name=value …`), which jobcore's session
    options are given before (`PostgresStorage`), so the URL's win."""

    @property
    def display(self) -> str:
        """The URL without its password, for messages and logs."""
        return redact(self.conninfo)


def check_schema_name(name: str, source: str) -> str:
    if not _SCHEMA_NAME.match(name):
        raise ConfigError(
            f"{source}: schema name {name!r} is not allowed; use lower-case letters, digits "
            "and underscores, starting with a letter, at most 55 characters"
        )
    return name


def _flag(value: str, source: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{source}: poll_only must be true or false, not {value!r}")


def parse_url(url: str, *, schema: str = "jobcore", poll_only: bool = False) -> PostgresTarget:
    """Split jobcore's parameters off `url`; the URL's values win over the defaults given."""
    parts = urlsplit(url)
    kept: list[tuple[str, str]] = []
    options = ""
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = value
        elif key == "poll_only":
            poll_only = _flag(value, "--db URL")
        else:
            kept.append((key, value))
            if key == "options":
                options = value
    check_schema_name(schema, "--db URL")
    # percent-encoded, as libpq decodes a URI's query: urlencode's default would write
    # a space as `+`, which libpq keeps (`application_name=my+app`, broken `options`)
    conninfo = urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote)))
    return PostgresTarget(conninfo=conninfo, schema=schema, poll_only=poll_only, options=options)


def redact(url: str) -> str:
    """`url` with any password replaced by `***`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
