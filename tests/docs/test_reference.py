"""The generated reference pages cover what the code has: every setting of every settings
model (with a meaning), every command, every route of the hub."""

from __future__ import annotations

from docsgen import reference


def test_every_setting_has_a_meaning_and_every_meaning_a_setting() -> None:
    meanings = reference.meanings()
    for table, path in reference.SETTINGS_MODELS.items():
        fields = set(reference.model(path).model_fields) if path else set()
        assert set(meanings.get(table, {})) == fields, table


def test_the_settings_page_names_every_setting_its_variable_and_default() -> None:
    page = reference.settings_markdown()
    for table, path in reference.SETTINGS_MODELS.items():
        if path is None:
            assert reference.NO_SETTINGS[table] in page
            continue
        for name in reference.model(path).model_fields:
            assert f"| `{name}` | `{reference.env_name(table, name)}` |" in page, (table, name)
    assert "| `log_level` | `JOBCORE_LOG_LEVEL` |" in page
    assert "| `backend` | `JOBCORE_CLAUDE_BACKEND` |" in page and '`"cli"` \\| `"api"`' in page
    assert "| `lease` | `JOBCORE_LEASE` | duration | `1m` |" in page


def test_the_cli_page_has_every_command_and_plugin_command() -> None:
    page = reference.cli_markdown()
    for command in ("enqueue", "run", "stats", "serve", "tokens create", "agent", "dlq summary"):
        assert f"`jobcore {command}`" in page, command
    assert "--from FILENAME" in page


def test_the_api_page_has_every_route_of_the_app() -> None:
    spec = reference.openapi()
    page = reference.api_markdown()
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"### `{method.upper()} {path}`" in page
    assert "/api/jobs/claim" in spec["paths"] and "EnqueueIn" in page
