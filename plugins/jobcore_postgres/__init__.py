"""jobcore plugin `postgres`: job storage on PostgreSQL for `--db postgresql://…` URLs.

Settings (`[plugins.postgres]` / `JOBCORE_POSTGRES_*`): `schema_name` (default
`jobcore`), `poll_only` (no LISTEN: for transaction-pooling proxies),
`pool_min`, `pool_max`, `connect_timeout`, `synchronous_commit`. The URL's `?schema=` and
`?poll_only=` win over them. Also adds `jobcore copy --from URL --to URL`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import click
from pydantic import BaseModel, ConfigDict, Field

from jobcore import Config, hookimpl
from jobcore.config import PositiveSeconds
from jobcore.errors import StorageError
from jobcore.install import install_command

if TYPE_CHECKING:
    from jobcore_postgres.storage import PostgresStorage

__all__ = ["PostgresSettings"]


class PostgresSettings(BaseModel):
    """`[plugins.postgres]` / `JOBCORE_POSTGRES_<NAME>`."""

    model_config = ConfigDict(extra="forbid")

    schema_name: str = "jobcore"
    poll_only: bool = False
    pool_min: Annotated[int, Field(ge=0, le=1000)] = 1
    pool_max: Annotated[int, Field(ge=1, le=1000)] = 10
    connect_timeout: PositiveSeconds = 5.0
    # PostgreSQL's own setting for jobcore's sessions; "off" trades the last few hundred ms
    # of commits on a server crash (never consistency) for speed. Default: the server's.
    synchronous_commit: Literal["on", "off", "local", "remote_write", "remote_apply"] | None = None


@hookimpl
def jobcore_configure(config: Config) -> None:
    """Validate `[plugins.postgres]` / `JOBCORE_POSTGRES_*` at start, whatever the store."""
    config.plugin_settings("postgres", PostgresSettings)


@hookimpl
def jobcore_storage_backend(url: str, config: Config, create: bool) -> PostgresStorage | None:
    from jobcore_postgres.url import check_schema_name, is_postgres_url

    if not is_postgres_url(url):
        return None
    settings = config.plugin_settings("postgres", PostgresSettings)
    check_schema_name(settings.schema_name, "[plugins.postgres] schema")
    try:
        from jobcore_postgres.storage import PostgresStorage
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise StorageError(
            f"PostgreSQL storage needs psycopg and psycopg_pool ({exc}); "
            f"install them with: {install_command('postgres')}"
        ) from None
    return PostgresStorage(
        url,
        schema=settings.schema_name,
        poll_only=settings.poll_only,
        pool_min=settings.pool_min,
        pool_max=settings.pool_max,
        connect_timeout=settings.connect_timeout,
        synchronous_commit=settings.synchronous_commit,
        create=create,
    )


@hookimpl
def jobcore_register_commands(cli: click.Group) -> None:
    from jobcore_postgres.copy import copy

    cli.add_command(copy)
