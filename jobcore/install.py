"""How to install jobcore or one of its extras, said so that pip fetches our code and nothing else.

The package index holds an unrelated project named `jobcore`, so no hint may
say `pip install jobcore…`. Our distribution is `jobcore-queue`; until it is
published, the only install that is surely ours is the checkout this copy was
installed from, which pip records in `direct_url.json` (PEP 610).
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "jobcore-queue"

# commands that first-party plugins add, and the extra each plugin needs
FIRST_PARTY_COMMANDS: dict[str, str] = {
    "serve": "http",
    "tokens": "http",
    "agent": "agent",
    "artifacts": "agent",
    "copy": "postgres",
    "schedules": "cron",
}


def installed_version() -> str | None:
    """The installed distribution's version, or None when running from an uninstalled tree."""
    try:
        return distribution(DISTRIBUTION).version
    except PackageNotFoundError:
        return None


@cache
def _source() -> tuple[str, bool] | None:
    """(folder, editable) of the local checkout pip installed this copy from, if it did."""
    try:
        text = distribution(DISTRIBUTION).read_text("direct_url.json")
    except PackageNotFoundError:
        text = None
    if text:
        return local_source(text)
    # not installed at all (imported from a tree on sys.path): that tree is the checkout
    tree = Path(__file__).resolve().parent.parent
    if (tree / "pyproject.toml").is_file():
        return str(tree), True
    return None


def local_source(direct_url_json: str) -> tuple[str, bool] | None:
    """(path, editable) from a `direct_url.json` that names a local folder or file, else None."""
    try:
        info = json.loads(direct_url_json)
    except ValueError:
        return None
    if not isinstance(info, dict) or not str(info.get("url", "")).startswith("file://"):
        return None
    dir_info = info.get("dir_info")
    editable = isinstance(dir_info, dict) and bool(dir_info.get("editable"))
    return unquote(urlparse(info["url"]).path), editable


def install_command(extra: str | None = None) -> str:
    """A `pip install` command that brings jobcore (with `extra`) from where this copy came from."""
    wanted = f"[{extra}]" if extra else ""
    source = _source()
    if source is not None:
        folder, editable = source
        target = shlex.quote(f"{folder}{wanted}")
        return f"pip install {'-e ' if editable else ''}{target}"
    # installed from an index under our own name: that name is ours
    return f"pip install {shlex.quote(DISTRIBUTION + wanted)}"


def missing_command_hint(name: str) -> str | None:
    """Which extra brings a first-party command that is not available here, if it is one."""
    extra = FIRST_PARTY_COMMANDS.get(name)
    if extra is None:
        return None
    return (
        f"`jobcore {name}` comes with the {extra!r} plugin, which needs the {extra!r} extra: "
        f"{install_command(extra)} (see `jobcore plugins` for why it is not loaded)"
    )
