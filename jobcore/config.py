"""Settings: command-line option > environment > config file > default.

Core settings live in `[jobcore]` and `JOBCORE_<SETTING>`; a job type's
overrides in `[types.NAME]`; a plugin's settings in `[plugins.NAME]` and
`JOBCORE_<PLUGIN>_<SETTING>`. Every value is validated by a pydantic model and
a bad one raises `ConfigError` naming the setting and where it came from.
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from jobcore.errors import ConfigError
from jobcore.limits import check_duration
from jobcore.owned import own
from jobcore.timeutil import parse_duration

Seconds = Annotated[float, BeforeValidator(parse_duration), AfterValidator(check_duration)]
PositiveSeconds = Annotated[
    float,
    BeforeValidator(parse_duration),
    AfterValidator(functools.partial(check_duration, positive=True)),
]

DEFAULT_CONFIG_FILE = "jobcore.toml"
CONFIG_ENV = "JOBCORE_CONFIG"  # the config file's path, when `--config` is not given

M = TypeVar("M", bound=BaseModel)


class CoreSettings(BaseModel):
    """Core settings (`[jobcore]`, `JOBCORE_<NAME>`)."""

    model_config = ConfigDict(extra="forbid")

    db: str = "jobcore.db"
    synchronous: Literal["FULL", "NORMAL", "EXTRA"] = "FULL"
    busy_timeout: PositiveSeconds = 30.0
    event_retention: PositiveSeconds = 3600.0
    lease: PositiveSeconds = 60.0
    poll_interval: PositiveSeconds = 1.0
    wake_check_interval: PositiveSeconds = 0.003
    shutdown_timeout: Seconds = 30.0
    backoff_base: Seconds = 1.0
    backoff_cap: Seconds = 300.0
    backoff_jitter: Annotated[float, Field(ge=0, le=1)] = 0.25
    max_attempts: Annotated[int, Field(ge=1)] = 3
    timeout: PositiveSeconds | None = 3600.0
    max_payload_bytes: Annotated[int, Field(gt=0)] = 1024 * 1024
    max_result_bytes: Annotated[int, Field(gt=0)] = 256 * 1024
    concurrency: Annotated[int, Field(ge=1, le=1024)] = 4
    async_concurrency: Annotated[int, Field(ge=1, le=100_000)] = 100  # async def handlers
    loop_block_warning: PositiveSeconds = 1.0  # warn when their event loop stalls this long
    prefetch: Annotated[int, Field(ge=0, le=10_000)] = 32
    prefetch_below: Seconds = 0.05
    prefetch_wait: PositiveSeconds = 1.0  # a prefetched job waiting longer is given back
    stop_grace: Seconds = 5.0  # how long a handler asked to stop keeps its job and slot
    max_retry_delay: Seconds = 7 * 86400.0  # retry delays from outside are clamped to this
    claim_batch: Annotated[int, Field(ge=1)] = 100
    allow_unregistered_types: bool = False
    log_format: Literal["text", "json"] = "text"
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"],
        BeforeValidator(lambda value: value.lower() if isinstance(value, str) else value),
    ] = "info"


class TypeSettings(BaseModel):
    """Per-type overrides (`[types.NAME]`)."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: Annotated[int, Field(ge=1)] | None = None
    timeout: PositiveSeconds | None = None
    backoff_base: Seconds | None = None
    backoff_cap: Seconds | None = None
    queue: str | None = None
    priority: int | None = None


_NO_TYPE_SETTINGS = TypeSettings()


def _validate(model: type[M], values: Mapping[str, tuple[Any, str]], where: str) -> M:
    """Validate `{name: (value, source)}` into `model`, naming the source of a bad value."""
    try:
        return model.model_validate({name: value for name, (value, _) in values.items()})
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "?"
        source = values[name][1] if name in values else where
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unknown setting"
        elif first["type"] == "value_error" and "error" in first.get("ctx", {}):
            message = str(first["ctx"]["error"])
        raise ConfigError(f"bad setting {name!r} from {source}: {message}") from None


def _check_tables(file: Mapping[str, Any], file_name: str) -> None:
    """`[types]`, `[plugins]` and each `[types.X]` / `[plugins.X]` in them must be tables."""
    for section in ("types", "plugins"):
        table = file.get(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{section!r} in {file_name} must be a table ([{section}.NAME])")
        for name, value in table.items():
            if not isinstance(value, dict):
                raise ConfigError(
                    f"[{section}.{name}] in {file_name} must be a table, "
                    f"not {type(value).__name__} {value!r}"
                )


class Config:
    """Loaded configuration: core settings plus raw per-type and per-plugin tables."""

    def __init__(
        self,
        *,
        file: dict[str, Any] | None = None,
        file_name: str = "",
        env: Mapping[str, str] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.file_name = file_name
        self._file = file or {}
        self._env = dict(os.environ if env is None else env)
        values: dict[str, tuple[Any, str]] = {}
        core_table = self._file.get("jobcore", {})
        if not isinstance(core_table, dict):
            raise ConfigError(f"[jobcore] in {file_name} must be a table")
        _check_tables(self._file, file_name)
        for name, value in core_table.items():
            values[name] = (value, f"{file_name} [jobcore]")
        for name in CoreSettings.model_fields:
            key = f"JOBCORE_{name.upper()}"
            if key in self._env:
                values[name] = (self._env[key], key)
        for name, value in (options or {}).items():
            if value is not None:
                values[name] = (value, f"--{name.replace('_', '-')}")
        self.core = _validate(CoreSettings, values, file_name or "configuration")
        self._types: dict[str, TypeSettings] = {}
        self._plugin_cache: dict[tuple[str, type[BaseModel]], BaseModel] = {}
        types_table = self._file.get("types", {})
        for type_name, table in types_table.items():
            source = f"{file_name} [types.{type_name}]"
            self._types[type_name] = _validate(
                TypeSettings, {k: (v, source) for k, v in table.items()}, source
            )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Config:
        """Read `path` (else `$JOBCORE_CONFIG`, else `./jobcore.toml` if present) and merge
        env and options over it."""
        if path is None:
            path = (os.environ if env is None else env).get(CONFIG_ENV) or None
        if path is None:
            default = Path(DEFAULT_CONFIG_FILE)
            path = default if default.is_file() else None
        file: dict[str, Any] = {}
        name = ""
        if path is not None:
            name = str(path)
            try:
                with open(path, "rb") as handle:
                    file = tomllib.load(handle)
            except FileNotFoundError:
                raise ConfigError(f"config file {name} does not exist") from None
            except IsADirectoryError:
                raise ConfigError(f"config file {name} is a folder, not a file") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config file {name} is not valid TOML: {exc}") from None
            own(path, "config")  # never a files job's target
        return cls(file=file, file_name=name, env=env, options=options)

    def type_settings(self, name: str) -> TypeSettings:
        """The `[types.NAME]` overrides (all None when absent)."""
        return self._types.get(name) or _NO_TYPE_SETTINGS

    def plugin_settings(self, plugin: str, model: type[M]) -> M:
        """Validate `[plugins.PLUGIN]` with `JOBCORE_<PLUGIN>_<SETTING>` env overrides (cached)."""
        cached = self._plugin_cache.get((plugin, model))
        if cached is not None:
            return cached  # type: ignore[return-value]
        settings = self._load_plugin_settings(plugin, model)
        self._plugin_cache[(plugin, model)] = settings
        return settings

    def _load_plugin_settings(self, plugin: str, model: type[M]) -> M:
        values: dict[str, tuple[Any, str]] = {}
        table = self._file.get("plugins", {}).get(plugin, {})
        for name, value in table.items():
            values[name] = (value, f"{self.file_name} [plugins.{plugin}]")
        for name in model.model_fields:
            key = f"JOBCORE_{plugin.upper()}_{name.upper()}"
            if key in self._env:
                values[name] = (self._env[key], key)
        return _validate(model, values, f"[plugins.{plugin}]")
