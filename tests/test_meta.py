"""Keep the plugin API, its tests and its documentation in step; keep `import jobcore` light."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from jobcore import hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOOKS = sorted(
    name for name, fn in vars(hookspecs).items() if name.startswith("jobcore_") and callable(fn)
)


def test_hook_specs_are_the_documented_set() -> None:
    assert len(HOOKS) >= 17
    for name in HOOKS:
        spec = getattr(hookspecs, name)
        assert spec.__doc__ and len(spec.__doc__.strip()) > 20, f"{name} needs a docstring"
        assert all(
            p.annotation is not inspect.Parameter.empty
            for p in inspect.signature(spec).parameters.values()
        )


def test_every_hook_has_a_test() -> None:
    tested = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for line in path.read_text().splitlines():
            if line.startswith("def test_hook_"):
                tested.add(line.removeprefix("def test_hook_").split("(")[0])
    assert [name for name in HOOKS if name not in tested] == []


def test_every_hook_is_documented_in_the_plugin_guide() -> None:
    readme = (ROOT / "docs" / "writing-plugins.md").read_text()
    assert [name for name in HOOKS if f"`{name}(" not in readme] == []


def test_import_jobcore_stays_light() -> None:
    code = (
        "import sys, jobcore\n"
        "heavy = {'click', 'pytest', 'boto3', 'anthropic', 'opentelemetry'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_modules_stay_small() -> None:
    for path in (ROOT / "jobcore").rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 650, f"{path} is getting large; split it"


def test_test_modules_have_names_of_their_own() -> None:
    """pytest imports each test folder's modules by their bare names (no packages): two
    `test_cli.py` in different folders fail the whole run's collection."""
    seen: dict[str, Path] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name == "conftest.py":
            continue
        other = seen.setdefault(path.name, path)
        assert other == path, f"{path} and {other} share a module name; rename one"
