"""Building a plugin manager: hook specs, built-ins, entry points, isolation, listing."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import pluggy

from jobcore import hookspecs

log = logging.getLogger("jobcore.plugins")

ENTRY_POINT_GROUP = "jobcore"

BUILTIN_PLUGINS: tuple[str, ...] = (
    "jobcore.builtin.sqlite_storage",
    "jobcore.builtin.retry_policy",
    "jobcore.builtin.execute",
    "jobcore.builtin.noop",
    "jobcore.builtin.event_log",
)


@dataclass
class PluginInfo:
    """What `jobcore plugins` reports about one plugin."""

    name: str
    version: str | None
    status: str  # "loaded" | "unavailable" | "blocked"
    reason: str | None = None
    source: str = "entry point"
    job_types: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "status": self.status,
            "reason": self.reason,
            "job_types": self.job_types,
            "hooks": self.hooks,
        }


class JobcorePluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers every plugin it tried to load and how that went."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}

    def register_plugin(
        self, plugin: Any, name: str, *, version: str | None = None, source: str = "module"
    ) -> None:
        self.register(plugin, name=name)
        self.infos[name] = PluginInfo(name=name, version=version, status="loaded", source=source)

    def mark_unavailable(self, name: str, reason: str, version: str | None = None) -> None:
        self.infos[name] = PluginInfo(
            name=name, version=version, status="unavailable", reason=reason
        )

    def hooks_of(self, name: str) -> list[str]:
        plugin = self.get_plugin(name)
        if plugin is None:
            return []
        return sorted(caller.name for caller in self.get_hookcallers(plugin) or [])


def require(module: str, *, extra: str) -> None:
    """Fail a plugin's import cheaply when an optional dependency is missing.

    Call at the top of a plugin module and import the heavy dependency lazily
    where it is used: `jobcore plugins` still reports the plugin as
    unavailable with an install hint, and commands stay quick to start.
    """
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(
            f"No module named {module!r}; install the extra: pip install 'jobcore[{extra}]' "
            f"(from a checkout: pip install -e '.[{extra}]')",
            name=module,
        )


def _import_error_reason(exc: BaseException) -> str:
    reason = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ModuleNotFoundError) and exc.name and "install" not in str(exc):
        reason += f" (install the plugin's extra, e.g. pip install -e '.[all]', or pip install {exc.name.split('.')[0]})"
    return reason


def make_plugin_manager(
    *,
    load_entrypoints: bool = True,
    only: Iterable[str] | None = None,
    blocked: Iterable[str] = (),
    modules: Iterable[str] = (),
    plugins: Iterable[tuple[str, Any]] = (),
) -> JobcorePluginManager:
    """A fresh plugin manager: built-ins, then entry points, then extra modules and objects.

    `only` limits entry points to those names (also `JOBCORE_LOAD_PLUGINS=a,b`);
    `blocked` names plugins never to load (also `JOBCORE_DISABLE_PLUGINS=a,b`). `modules` are import paths registered
    like `-p` in pytest (also `JOBCORE_PLUGINS=pkg.mod,...`). A plugin that fails
    to import is recorded as unavailable with the reason; the rest still load.
    """
    pm = JobcorePluginManager()
    env_blocked = os.environ.get("JOBCORE_DISABLE_PLUGINS", "")
    blocked = set(blocked) | {name.strip() for name in env_blocked.split(",") if name.strip()}
    for name in blocked:
        pm.set_blocked(name)
        pm.infos[name] = PluginInfo(name=name, version=None, status="blocked", reason="disabled")
    for module_name in BUILTIN_PLUGINS:
        pm.register_plugin(importlib.import_module(module_name), module_name, source="builtin")

    env_only = os.environ.get("JOBCORE_LOAD_PLUGINS")
    if only is None and env_only is not None:
        only = [name.strip() for name in env_only.split(",") if name.strip()]
    wanted = None if only is None else set(only)
    if load_entrypoints:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in blocked or (wanted is not None and ep.name not in wanted):
                continue
            if pm.has_plugin(ep.name):
                continue
            version = ep.dist.version if ep.dist is not None else None
            try:
                plugin = ep.load()
            except Exception as exc:
                log.warning("plugin %s is unavailable: %s", ep.name, exc)
                pm.mark_unavailable(ep.name, _import_error_reason(exc), version)
                continue
            pm.register_plugin(plugin, ep.name, version=version, source="entry point")

    extra = list(modules) + [
        name.strip() for name in os.environ.get("JOBCORE_PLUGINS", "").split(",") if name.strip()
    ]
    for module_name in extra:
        if module_name in blocked or pm.has_plugin(module_name):
            continue
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            log.warning("plugin %s is unavailable: %s", module_name, exc)
            pm.mark_unavailable(module_name, _import_error_reason(exc))
            continue
        pm.register_plugin(module, module_name, source="module")
    for name, plugin in plugins:
        pm.register_plugin(plugin, name, source="object")
    pm.check_pending()
    if os.environ.get("JOBCORE_TRACE_HOOKS"):
        pm.trace.root.setwriter(lambda message: log.warning("hook: %s", message.rstrip()))
        pm.enable_tracing()
    return pm


def notify(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> None:
    """Call a notification hook; an implementation that raises is logged with its plugin's name.

    Each implementation runs even if an earlier one failed, and nothing propagates.
    """
    caller = getattr(pm.hook, hook_name)
    for impl in reversed(caller.get_hookimpls()):
        try:
            impl.function(**{name: kwargs[name] for name in impl.argnames})
        except Exception:
            log.exception("plugin %s failed in %s", impl.plugin_name, hook_name)
