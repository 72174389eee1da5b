"""libpq parameters in the `--db` URL reach the server as written: percent-encoded values
are decoded by libpq (a space is `%20`, never `+`), and the URL's `options` are applied
after jobcore's own session options instead of being dropped."""

from __future__ import annotations

from typing import Any

import pytest
from jobcore_postgres.url import parse_url


def _setting(storage: Any, name: str) -> str:
    with storage._connection() as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    return str(row[0])


def test_a_percent_encoded_space_stays_a_space() -> None:
    target = parse_url("postgresql://h/db?application_name=my%20app&schema=s")
    assert target.conninfo == "postgresql://h/db?application_name=my%20app"
    assert target.schema == "s"


def test_application_name_with_a_space_reaches_the_server(pg_url: str) -> None:
    from jobcore_postgres.storage import PostgresStorage

    storage = PostgresStorage(pg_url + "&application_name=my%20app")
    try:
        assert _setting(storage, "application_name") == "my app"
    finally:
        storage.close()


@pytest.mark.parametrize("poll_only", [False, True])
def test_the_urls_options_are_applied_beside_jobcores(pg_url: str, poll_only: bool) -> None:
    from jobcore_postgres.storage import PostgresStorage

    url = pg_url + "&options=-c%20statement_timeout%3D4321%20-c%20work_mem%3D5MB"
    storage = PostgresStorage(url, poll_only=poll_only, lock_timeout_ms=1234)
    try:
        assert _setting(storage, "statement_timeout") == "4321ms"
        assert _setting(storage, "work_mem") == "5MB"
        if not poll_only:  # jobcore's own session options are still there
            assert _setting(storage, "enable_seqscan") == "off"
            assert _setting(storage, "lock_timeout") == "1234ms"
    finally:
        storage.close()


def test_pgoptions_is_kept_when_the_url_has_no_options(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobcore_postgres.storage import PostgresStorage

    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=2345")
    storage = PostgresStorage(pg_url)
    try:
        assert _setting(storage, "statement_timeout") == "2345ms"
        assert _setting(storage, "enable_seqscan") == "off"
    finally:
        storage.close()


def test_a_bad_setting_in_the_urls_options_is_named_not_server_down(pg_url: str) -> None:
    from jobcore_postgres.storage import PostgresStorage

    from jobcore.errors import StorageUnavailable

    storage = PostgresStorage(pg_url + "&options=-c%20statement_timeout%3Dsoon")
    try:
        with pytest.raises(StorageUnavailable, match="fix the URL's options") as caught:
            storage.migrate()
        assert "server up" not in str(caught.value)
    finally:
        storage.close()
