"""Markdown for the reference pages, generated from the code: settings models, the click
command tree and the hub's OpenAPI document."""

from __future__ import annotations

import importlib
import json
import os
import tempfile
import tomllib
import typing
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel

HERE = Path(__file__).parent

# (table, model) for the settings reference: `[jobcore]`, `[types.NAME]`, then each
# first-party plugin's `[plugins.NAME]`; None for a plugin without settings of its own
SETTINGS_MODELS: dict[str, str | None] = {
    "jobcore": "jobcore.config:CoreSettings",
    "types": "jobcore.config:TypeSettings",
    "plugins.files": "jobcore_files.paths:FilesSettings",
    "plugins.shell": None,
    "plugins.claude": "jobcore_claude.settings:ClaudeSettings",
    "plugins.aws": "jobcore_aws.models:AwsSettings",
    "plugins.dlq": "jobcore_dlq:DlqSettings",
    "plugins.otel": None,
    "plugins.agent": "jobcore_agent.settings:AgentSettings",
    "plugins.http": "jobcore_http.settings:HttpSettings",
    "plugins.postgres": "jobcore_postgres:PostgresSettings",
    "plugins.cron": "jobcore_cron:CronSettings",
}
NO_SETTINGS = {
    "plugins.shell": "No settings of its own: a `shell` job's payload says everything.",
    "plugins.otel": "Configured by the standard `OTEL_*` environment variables "
    "(`OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, …); "
    "a bad one stops the process at start, naming it.",
}


def model(path: str) -> type[BaseModel]:
    module, name = path.split(":")
    found = getattr(importlib.import_module(module), name)
    assert isinstance(found, type) and issubclass(found, BaseModel)
    return found


def meanings() -> dict[str, dict[str, str]]:
    """`{table: {setting: meaning}}` from meanings.toml (`plugins.X` flattened)."""
    data = tomllib.loads((HERE / "meanings.toml").read_text())
    flat: dict[str, dict[str, str]] = {"jobcore": data["jobcore"], "types": data["types"]}
    for name, table in data["plugins"].items():
        flat[f"plugins.{name}"] = table
    return flat


def _parsed_by(field: Any, parser: Any) -> bool:
    """Whether `field` (or a member of its union) is parsed by `parser` (a BeforeValidator)."""

    def of(items: Any) -> bool:
        return any(getattr(item, "func", None) is parser for item in items)

    if of(field.metadata) or of(getattr(field.annotation, "__metadata__", ())):
        return True
    return any(of(getattr(arg, "__metadata__", ())) for arg in typing.get_args(field.annotation))


def _is_duration(field: Any) -> bool:
    from jobcore.timeutil import parse_duration

    return _parsed_by(field, parse_duration)


def _is_size(field: Any) -> bool:
    try:
        from jobcore_http.settings import parse_size
    except ImportError:  # the http extra is missing: then no model uses it either
        return False
    return _parsed_by(field, parse_size)


def _bytes(value: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def _seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g}{unit}"
    return f"{value * 1000:g}ms" if value < 1 else f"{value:g}s"


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return "(see meaning)"
    value = field.default
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float) and _is_duration(field):
        return f"`{_seconds(value)}`"
    if isinstance(value, int) and _is_size(field):
        return f"`{_bytes(value)}`"
    return f"`{value!r}`"


def _type(field: Any) -> str:
    optional = type(None) in typing.get_args(field.annotation)
    if _is_duration(field):
        return "duration \\| none" if optional else "duration"
    if _is_size(field):
        return "size (bytes, `512KiB`, `1MiB`, …)"
    names = []
    if typing.get_origin(field.annotation) is typing.Literal:
        return " \\| ".join(f'`"{choice}"`' for choice in typing.get_args(field.annotation))
    for arg in typing.get_args(field.annotation) or (field.annotation,):
        inner = typing.get_args(arg)
        if typing.get_origin(arg) is typing.Literal:
            names.append(" \\| ".join(f'`"{choice}"`' for choice in inner))
        elif typing.get_origin(arg) is typing.Annotated:
            base = inner[0]
            names.append(
                " \\| ".join(f'`"{c}"`' for c in typing.get_args(base))
                if typing.get_origin(base) is typing.Literal
                else getattr(base, "__name__", str(base))
            )
        elif arg is type(None):
            names.append("none")
        else:
            names.append(getattr(arg, "__name__", str(arg)))
    return " \\| ".join(names)


def env_name(table: str, name: str) -> str:
    if table == "jobcore":
        return f"JOBCORE_{name.upper()}"
    if table == "types":
        return "—"
    return f"JOBCORE_{table.split('.', 1)[1].upper()}_{name.upper()}"


def settings_markdown() -> str:
    """One table per section: setting, environment variable, default, meaning."""
    known = meanings()
    out: list[str] = []
    for table, path in SETTINGS_MODELS.items():
        heading = "[types.NAME]" if table == "types" else f"[{table}]"
        out.append(f"### `{heading}`\n")
        if path is None:
            out.append(NO_SETTINGS[table] + "\n")
            continue
        out.append("| setting | environment | type | default | meaning |")
        out.append("|---|---|---|---|---|")
        for name, field in model(path).model_fields.items():
            meaning = known.get(table, {}).get(name)
            if meaning is None:
                raise RuntimeError(f"docsgen/meanings.toml has no meaning for [{table}] {name}")
            out.append(
                f"| `{name}` | `{env_name(table, name)}` | {_type(field)} "
                f"| {_default(field)} | {meaning} |"
            )
        out.append("")
    return "\n".join(out)


def cli_markdown() -> str:
    """Every command's `--help`, core and first-party plugins', from the click tree."""
    from jobcore.cli import cli

    out: list[str] = []

    def walk(command: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(command, info_name=" ".join(path), parent=parent)
        # fixed widths: the page must not depend on the terminal that builds it
        ctx.max_content_width = ctx.terminal_width = 88
        if len(path) > 1:
            level = "#" * min(len(path) + 1, 4)
            out.append(f"{level} `{' '.join(path)}`\n")
            out.append("```text\n" + command.get_help(ctx) + "\n```\n")
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not getattr(sub, "hidden", False):
                    walk(sub, [*path, name], ctx)

    root = click.Context(cli, info_name="jobcore")
    root.max_content_width = root.terminal_width = 88
    out.append("## `jobcore`\n")
    out.append("```text\n" + cli.get_help(root) + "\n```\n")
    for name in cli.list_commands(root):
        sub = cli.get_command(root, name)
        if sub is not None:
            walk(sub, ["jobcore", name], root)
    return "\n".join(out)


def openapi() -> dict[str, Any]:
    """The hub's OpenAPI document, from the app itself (on a throwaway SQLite store)."""
    from jobcore_http.app import create_app
    from jobcore_http.hub import Hub
    from jobcore_http.settings import HttpSettings

    from jobcore import Queue

    with tempfile.TemporaryDirectory(prefix="jobcore-docs-") as folder:
        queue = Queue(os.path.join(folder, "openapi.db"))
        hub = Hub(queue, HttpSettings(), lease=60.0)
        try:
            return create_app(hub).openapi()
        finally:
            hub.close()
            queue.close()


def _schema_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return "—"
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    return f"`{schema.get('type', 'object')}`"


def api_markdown() -> str:
    """Routes (method, path, what it does, body, answers) and the schemas, from OpenAPI."""
    spec = openapi()
    out = [f"Generated from `/openapi.json` of jobcore hub {spec['info']['version']}.\n"]
    out.append("## Routes\n")
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            out.append(f"### `{method.upper()} {path}`\n")
            text = (op.get("description") or op.get("summary") or "").strip()
            out.append(text.replace("\n", " ") + "\n")
            params = [f"`{p['name']}` ({p['in']})" for p in op.get("parameters", []) if "name" in p]
            if params:
                out.append("Parameters: " + ", ".join(params) + "\n")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                out.append(f"Body ({media}): {_schema_name(content.get('schema'))}\n")
            answers = []
            for code, answer in op.get("responses", {}).items():
                schema = answer.get("content", {}).get("application/json", {}).get("schema")
                answers.append(f"{code} {_schema_name(schema)}")
            out.append("Answers: " + ", ".join(answers) + "\n")
    out.append("## Schemas\n")
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out.append(f"### {name}\n")
        out.append("```json\n" + json.dumps(schema, indent=2, sort_keys=True) + "\n```\n")
    return "\n".join(out)


GENERATORS = {"settings": settings_markdown, "cli": cli_markdown, "api": api_markdown}
