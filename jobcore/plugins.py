"""Building a plugin manager: hook specs, built-ins, entry points, isolation, listing.

A plugin that cannot work here is never loaded half-way: it is unregistered and
listed as `unavailable` with the reason (by `jobcore plugins`, not on every
command). That covers a failed import (a missing extra), an implementation of a
hook this jobcore does not know (a plugin written for a newer version), an
argument its hook's spec lacks, and an exception from `jobcore_configure`.
Notification and `jobcore_enqueue_meta` hooks that raise are logged with the
plugin's name and skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import TYPE_CHECKING, Any, Literal

import pluggy

from jobcore import hookspecs
from jobcore.declare import adopt_declared
from jobcore.errors import ConfigError, JobcoreError, StorageError
from jobcore.install import DISTRIBUTION, install_command
from jobcore.storage.base import StatsSection, Storage

if TYPE_CHECKING:
    from jobcore.config import Config
    from jobcore.models import Job, NewJob
    from jobcore.queue import Queue

log = logging.getLogger("jobcore.plugins")

ENTRY_POINT_GROUP = "jobcore"

BUILTIN_PLUGINS: tuple[str, ...] = (
    "jobcore.builtin.sqlite_storage",
    "jobcore.builtin.retry_policy",
    "jobcore.builtin.execute",
    "jobcore.builtin.noop",
    "jobcore.builtin.event_log",
)

# First-party job types, so an unknown type's error can name the plugin and its extra.
FIRST_PARTY_JOB_TYPES: dict[str, str] = {
    "create_file": "files",
    "delete_file": "files",
    "shell": "shell",
    "claude_extraction": "claude",
    "sync_aws": "aws",
    "exec": "agent",
}
FIRST_PARTY_EXTRAS: dict[str, str] = {
    name: name for name in ("claude", "aws", "otel", "agent", "http", "postgres", "cron")
}
# URL schemes of first-party storage backends, for the error when none handles a URL
FIRST_PARTY_BACKENDS: dict[str, str] = {"postgres": "postgres", "postgresql": "postgres"}

Status = Literal["loaded", "unavailable"]


def jobcore_version() -> str | None:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return None


def one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass
class PluginInfo:
    """What `jobcore plugins` reports about one plugin."""

    name: str
    version: str | None
    status: Status
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
        self._config: Config | None = None

    # -- registering -------------------------------------------------------------

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        """pluggy's `register`, refusing hooks this jobcore does not define.

        Raises `pluggy.PluginValidationError` (and registers nothing) for an
        unknown hook; replays `jobcore_configure` once the manager is configured.
        """
        registered = super().register(plugin, name)
        if registered is None:
            return None
        unknown = sorted(
            caller.name
            for caller in self.get_hookcallers(plugin) or []
            if not caller.has_spec()
            and not all(impl.optionalhook for impl in caller.get_hookimpls())
        )
        if unknown:
            self.unregister(plugin)
            raise pluggy.PluginValidationError(
                plugin,
                f"implements hook(s) this jobcore does not define: {', '.join(unknown)} "
                "(written for another jobcore version?)",
            )
        if self._config is not None:
            for impl in self.hook.jobcore_configure.get_hookimpls():
                if impl.plugin is plugin and not self._configure_one(impl, self._config):
                    return None
        return registered

    def register_plugin(
        self, plugin: Any, name: str, *, version: str | None = None, source: str = "module"
    ) -> bool:
        """Register `plugin` as `name`; on any problem record it unavailable and return False."""
        if self.get_name(plugin) is not None:
            log.debug("plugin %s is already registered as %s", name, self.get_name(plugin))
            return False
        try:
            adopt_declared(plugin)  # a module's @job_type types beside its own hook
            registered = self.register(plugin, name=name)
        except Exception as exc:
            if source == "builtin":
                raise
            reason = str(exc) if isinstance(exc, pluggy.PluginValidationError) else None
            holder = self.get_plugin(name)
            if holder is not None and holder is not plugin:  # the name is another plugin's
                log.error(
                    "plugin %s from %s not loaded: another plugin is registered under that"
                    " name (%s); the one registered first stays",
                    name,
                    source,
                    one_line(reason or f"{type(exc).__name__}: {exc}"),
                )
                return False
            if holder is plugin:
                self.unregister(plugin)
            self.mark_unavailable(name, one_line(reason or f"{type(exc).__name__}: {exc}"), version)
            return False
        if registered is None:  # blocked, or its jobcore_configure failed
            return False
        self.infos[name] = PluginInfo(name=name, version=version, status="loaded", source=source)
        return True

    def mark_unavailable(self, name: str, reason: str, version: str | None = None) -> None:
        """Record `name` as unavailable with `reason`, and stop calling its hooks."""
        plugin = self.get_plugin(name)
        if plugin is not None:
            self.unregister(plugin)
        known = self.infos.get(name)
        self.infos[name] = PluginInfo(
            name=name,
            version=version if version is not None else (known.version if known else None),
            status="unavailable",
            reason=reason,
            source=known.source if known else "entry point",
        )

    def hooks_of(self, name: str) -> list[str]:
        plugin = self.get_plugin(name)
        if plugin is None:
            return []
        return sorted(caller.name for caller in self.get_hookcallers(plugin) or [])

    # -- calling hooks with isolation -----------------------------------------------

    def configure(self, config: Config) -> None:
        """Call `jobcore_configure` on every plugin (and on plugins registered later).

        A plugin whose configure raises is made unavailable with the reason;
        a `ConfigError` (a bad setting of the user's) is raised as it is.
        """
        self._config = config
        for impl in reversed(self.hook.jobcore_configure.get_hookimpls()):
            self._configure_one(impl, config)

    def _configure_one(self, impl: pluggy.HookImpl, config: Config) -> bool:
        try:
            impl.function(**{arg: config for arg in impl.argnames})
        except ConfigError:
            raise
        except Exception as exc:
            if impl.plugin_name.startswith("jobcore.builtin"):
                raise
            log.debug("plugin %s failed in jobcore_configure", impl.plugin_name, exc_info=True)
            self.mark_unavailable(
                impl.plugin_name, one_line(f"jobcore_configure raised {type(exc).__name__}: {exc}")
            )
            return False
        return True

    def enqueue_meta(self, job: NewJob) -> dict[str, Any]:
        """The merged `jobcore_enqueue_meta` answers; a raising plugin is logged and skipped."""
        meta: dict[str, Any] = {}
        for impl in reversed(self.hook.jobcore_enqueue_meta.get_hookimpls()):
            try:
                extra = impl.function(**{arg: job for arg in impl.argnames})
            except Exception:
                log.exception(
                    "plugin %s failed in jobcore_enqueue_meta; job enqueued without its meta",
                    impl.plugin_name,
                )
                continue
            if isinstance(extra, dict):
                try:  # what the store cannot hold would fail every enqueue, children too
                    json.dumps(extra, allow_nan=False)
                except (TypeError, ValueError, RecursionError) as exc:
                    log.error(
                        "plugin %s returned meta that is not JSON from jobcore_enqueue_meta "
                        "(%s); job enqueued without it",
                        impl.plugin_name,
                        exc,
                    )
                    continue
                meta.update(extra)
            elif extra is not None:
                log.error(
                    "plugin %s returned %s from jobcore_enqueue_meta, not a dict; ignored",
                    impl.plugin_name,
                    type(extra).__name__,
                )
        return meta

    def storage_backend(self, url: str, config: Config, create: bool) -> Storage | None:
        """The first backend a plugin returns for `url` (firstresult, in hook call order).

        A backend's `StorageError` (it handles the URL but cannot open it) passes
        through; any other exception, or an answer that is not a `Storage`, is a
        plugin bug, raised as a `StorageError` naming the plugin.
        """
        kwargs = {"url": url, "config": config, "create": create}
        for impl in reversed(self.hook.jobcore_storage_backend.get_hookimpls()):
            try:
                storage = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
            except JobcoreError:
                raise
            except Exception as exc:
                log.debug(
                    "plugin %s failed in jobcore_storage_backend", impl.plugin_name, exc_info=True
                )
                raise StorageError(
                    f"plugin {impl.plugin_name} failed to open {url!r}: "
                    f"{one_line(f'{type(exc).__name__}: {exc}')}; fix or disable it "
                    "(JOBCORE_DISABLE_PLUGINS)"
                ) from None
            if storage is None:
                continue
            if not isinstance(storage, Storage):
                raise StorageError(
                    f"plugin {impl.plugin_name} answered {url!r} with a "
                    f"{type(storage).__name__}, not a Storage; fix or disable it "
                    "(JOBCORE_DISABLE_PLUGINS)"
                )
            return storage
        return None

    def stats_sections(self, queue: Queue, taken: Iterable[str]) -> list[StatsSection]:
        """The `jobcore_stats` answers in hook call order. A section whose key is `taken`
        (the core's) or already answered, whose data is not JSON, or a plugin that raises is
        logged with the plugin's name and left out: stats never fail for a plugin."""
        keys = set(taken)
        sections: list[StatsSection] = []
        for impl in reversed(self.hook.jobcore_stats.get_hookimpls()):
            try:
                answer: Any = impl.function(**{arg: queue for arg in impl.argnames})
                if answer is None:
                    continue
                found = [answer] if isinstance(answer, StatsSection) else list(answer)
                for section in found:
                    if not isinstance(section, StatsSection):
                        raise TypeError(f"answered {type(section).__name__}, not a StatsSection")
                    if not isinstance(section.key, str) or not section.key:
                        raise TypeError(f"answered stats key {section.key!r}, not a name")
                    if not isinstance(section.text, str):
                        raise TypeError(f"answered text {type(section.text).__name__}, not str")
                    json.dumps(section.data, allow_nan=False)
            except Exception:
                log.exception(
                    "plugin %s failed in jobcore_stats; its stats left out", impl.plugin_name
                )
                continue
            for section in found:
                if section.key in keys:
                    log.error(
                        "plugin %s answered stats key %r, already taken; left out",
                        impl.plugin_name,
                        section.key,
                    )
                    continue
                keys.add(section.key)
                sections.append(section)
        return sections

    def reconcile(self, job: Job, config: Config) -> list[str]:
        """Every plugin's discrepancies for `job`; a plugin that raises reports that it could not check."""
        problems: list[str] = []
        for impl in reversed(self.hook.jobcore_reconcile.get_hookimpls()):
            kwargs = {"job": job, "config": config}
            try:
                answer = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
            except Exception as exc:
                log.debug("plugin %s failed in jobcore_reconcile", impl.plugin_name, exc_info=True)
                problems.append(
                    f"plugin {impl.plugin_name} could not check it: "
                    + one_line(f"{type(exc).__name__}: {exc}")
                )
                continue
            if isinstance(answer, str) and answer:
                problems.append(answer)
            elif isinstance(answer, list | tuple):
                problems.extend(str(item) for item in answer if item)
            elif answer is not None:
                problems.append(
                    f"plugin {impl.plugin_name} answered {type(answer).__name__}, not a list"
                )
        return problems

    # -- explaining what is missing -------------------------------------------------

    def no_storage_backend(self, url: str) -> str:
        """The message for a URL no backend handles, naming the plugin that would."""
        message = f"no storage backend handles {url!r}"
        provider = FIRST_PARTY_BACKENDS.get(url.split(":", 1)[0].lower()) if ":" in url else None
        if provider is None:
            return f"{message}; give a file path, or install the plugin for this kind of URL"
        info = self.infos.get(provider)
        reason = re.split(r" \(install|; install", info.reason or "")[0] if info else ""
        if reason.startswith(("disabled by", "not in")):
            return f"{message}: the {provider!r} plugin handles it and is {reason}"
        state = f"is unavailable ({reason})" if reason else "is not loaded"
        return (
            f"{message}: the {provider!r} plugin handles it and {state}; install it: "
            f"{install_command(provider)}"
        )

    def unknown_job_type(self, type_name: str, registered: Iterable[str]) -> str:
        """The message for a job type no loaded plugin registered, saying how to get it."""
        provider = FIRST_PARTY_JOB_TYPES.get(type_name)
        info = self.infos.get(provider) if provider else None
        if provider is None or (info is not None and info.status == "loaded"):
            known = ", ".join(sorted(registered)) or "none"
            message = f"unknown job type {type_name!r} (registered: {known}); "
            message += "install or enable the plugin that provides it"
            unavailable = [i.name for i in self.infos.values() if i.status == "unavailable"]
            if unavailable:
                message += f"; unavailable: {', '.join(unavailable)} (see `jobcore plugins`)"
            return message
        message = f"unknown job type {type_name!r}: the {provider!r} plugin provides it"
        extra = FIRST_PARTY_EXTRAS.get(provider)
        install = install_command(extra)
        if info is None:
            return f"{message} and is not installed: {install}"
        reason = re.split(r" \(install|; install", info.reason or "")[0]
        if reason.startswith(("disabled by", "not in")):
            return f"{message} and is {reason}"
        return f"{message} and is unavailable here ({reason}); install it: {install}"


def require(module: str, *, extra: str) -> None:
    """Fail a plugin's import cheaply when an optional dependency is missing.

    Call at the top of a plugin module and import the heavy dependency lazily
    where it is used: `jobcore plugins` still reports the plugin as
    unavailable with an install hint, and commands stay quick to start.
    """
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(
            f"No module named {module!r}; install the extra: {install_command(extra)}",
            name=module,
        )


def _import_error_reason(exc: BaseException, plugin: str | None = None) -> str:
    reason = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ModuleNotFoundError) and exc.name and "install" not in str(exc):
        # never suggest `pip install <module>`: the index may hold a stranger's package by that name
        extra = FIRST_PARTY_EXTRAS.get(plugin or "")
        if extra:
            reason += f" (install the plugin's extra: {install_command(extra)})"
        else:
            reason += f" (module {exc.name!r} was not found on this environment's import path)"
    return one_line(reason)


def import_plugin_module(module_name: str) -> Any:
    """Import a module named by `JOBCORE_PLUGINS` (or `modules=`), looking in the current
    directory too, as `python -m` does; appended last, so it never shadows an installed module.
    """
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed: only the import path is left
        return importlib.import_module(module_name)
    if "" not in sys.path and cwd not in sys.path:
        try:
            found = importlib.util.find_spec(module_name.split(".", 1)[0]) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            sys.path.append(cwd)
            importlib.invalidate_caches()
    return importlib.import_module(module_name)


def _module_error_reason(module_name: str, exc: BaseException) -> str:
    """Why a named plugin module did not import; a module not found is said so, no install hint."""
    if isinstance(exc, ModuleNotFoundError) and exc.name is not None:
        top = module_name.split(".", 1)[0]
        if exc.name in (module_name, top) or module_name.startswith(exc.name + "."):
            try:
                where = f"in the current directory {os.getcwd()} nor on the import path"
            except OSError:
                where = "on the import path"
            return (
                f"No module named {module_name!r} (not found {where}); check the name, "
                "or run from the folder that holds it"
            )
    return _import_error_reason(exc)


def _names(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


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
    `blocked` names plugins never to load (also `JOBCORE_DISABLE_PLUGINS=a,b`).
    `modules` are import paths registered like `-p` in pytest (also
    `JOBCORE_PLUGINS=pkg.mod,...`). A plugin that cannot load is recorded as
    unavailable with the reason; the rest still load.
    """
    pm = JobcorePluginManager()
    env_blocked = set(_names(os.environ.get("JOBCORE_DISABLE_PLUGINS", "")))
    blocked = set(blocked) | env_blocked
    for name in sorted(blocked):
        pm.set_blocked(name)
        reason = (
            "disabled by JOBCORE_DISABLE_PLUGINS (remove it from there to load it)"
            if name in env_blocked
            else "disabled by the application"
        )
        pm.infos[name] = PluginInfo(name=name, version=None, status="unavailable", reason=reason)
    core_version = jobcore_version()
    for module_name in BUILTIN_PLUGINS:
        pm.register_plugin(
            importlib.import_module(module_name),
            module_name,
            version=core_version,
            source="builtin",
        )

    env_only = os.environ.get("JOBCORE_LOAD_PLUGINS")
    if only is None and env_only is not None:
        only = _names(env_only)
    wanted = None if only is None else set(only)
    not_wanted = (
        "not in JOBCORE_LOAD_PLUGINS" if env_only is not None else "not in the plugins to load"
    )
    if load_entrypoints:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            version = ep.dist.version if ep.dist is not None else None
            if ep.name in blocked:
                pm.infos[ep.name].version = version
                continue
            if wanted is not None and ep.name not in wanted:
                pm.infos.setdefault(
                    ep.name,
                    PluginInfo(ep.name, version, "unavailable", reason=not_wanted),
                )
                continue
            if pm.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
            except (Exception, SystemExit) as exc:
                log.debug("plugin %s is unavailable: %s", ep.name, exc)
                pm.mark_unavailable(ep.name, _import_error_reason(exc, ep.name), version)
                continue
            pm.register_plugin(plugin, ep.name, version=version, source="entry point")

    extra = [*modules, *_names(os.environ.get("JOBCORE_PLUGINS", ""))]
    for module_name in extra:
        if module_name in blocked or module_name in pm.infos:
            continue
        try:
            module = import_plugin_module(module_name)
        except (Exception, SystemExit) as exc:
            log.debug("plugin %s is unavailable: %s", module_name, exc)
            pm.mark_unavailable(module_name, _module_error_reason(module_name, exc))
            continue
        module_version = getattr(module, "__version__", None)
        pm.register_plugin(
            module,
            module_name,
            version=module_version if isinstance(module_version, str) else None,
            source="module",
        )
    for name, plugin in plugins:
        pm.register_plugin(plugin, name, source="object")
    if os.environ.get("JOBCORE_TRACE_HOOKS"):
        pm.trace.root.setwriter(lambda message: log.warning("hook: %s", message.rstrip()))
        pm.enable_tracing()
    return pm


NoticeSink = Callable[[pluggy.PluginManager, str, dict[str, Any]], bool]
# set by a worker's `Notifier` around calls it is handed: notices go to its delivery
_notice_sink: ContextVar[NoticeSink | None] = ContextVar("jobcore_notice_sink", default=None)


def notify(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> None:
    """Call a notification hook; an implementation that raises is logged with its plugin's name.

    Each implementation runs even if an earlier one failed, and nothing propagates.
    Inside `capturing_notices(sink)` the notice goes to `sink` instead if it takes it.
    """
    sink = _notice_sink.get()
    if sink is not None and sink(pm, hook_name, kwargs):
        return
    for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
        call_notification(impl, hook_name, kwargs)


def call_notification(impl: pluggy.HookImpl, hook_name: str, kwargs: dict[str, Any]) -> None:
    """Call one implementation of a notification hook; what it raises is logged, not raised."""
    try:
        if len(impl.argnames) == len(kwargs):  # it takes every argument (pluggy checked
            impl.function(**kwargs)  # its names against the spec): pass them as they are
        else:
            impl.function(**{name: kwargs[name] for name in impl.argnames})
    except BaseException as exc:  # SystemExit from a plugin must not end the notifier
        if is_ctrl_c(exc):
            raise
        log.exception("plugin %s failed in %s", impl.plugin_name, hook_name)


def is_ctrl_c(exc: BaseException) -> bool:
    """`exc` is Ctrl-C at a prompt (KeyboardInterrupt in the main thread): the one
    BaseException from a plugin's code that is let through rather than logged."""
    return isinstance(exc, KeyboardInterrupt) and (
        threading.current_thread() is threading.main_thread()
    )


@contextmanager
def capturing_notices(sink: NoticeSink) -> Iterator[None]:
    """Within this block (this thread or task), `notify` hands notices to `sink` first."""
    token = _notice_sink.set(sink)
    try:
        yield
    finally:
        _notice_sink.reset(token)
