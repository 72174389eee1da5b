"""Every shell and Python block of the README, docs/ and the READMEs beside the code either
runs in the test suite (Sybil: docsgen/examples.py) or is marked, where readers see it, as a
fragment with the reason."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$", re.M)
SHELL_OR_PYTHON = {"sh", "bash", "shell", "console", "zsh", "python", "py", "python3", "pycon"}
FRAGMENT = re.compile(r'^title="Fragment: [^"]{10,}"$')


def documents() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found += [*sorted(ROOT.glob("plugins/*/README.md")), ROOT / "plugins" / "README.md"]
    found += [ROOT / "benchmarks" / "README.md", *sorted(ROOT.glob("examples/*/README.md"))]
    return found


def opening_info_strings(text: str) -> list[str]:
    """The info string of each fenced block's opening line."""
    infos: list[str] = []
    open_fence: str | None = None
    for match in FENCE.finditer(text):
        fence, info = match.group("fence"), match.group("info").strip()
        if open_fence is None:
            open_fence = fence
            infos.append(info)
        elif fence[0] == open_fence[0] and len(fence) >= len(open_fence) and not info:
            open_fence = None
    return infos


def run_by_sybil(path: Path) -> bool:
    relative = path.relative_to(ROOT)
    return relative == Path("README.md") or relative.parts[0] == "docs"


def test_every_shell_or_python_block_runs_or_says_it_is_a_fragment() -> None:
    bad = []
    for path in documents():
        for info in opening_info_strings(path.read_text()):
            language, _, rest = info.partition(" ")
            if language.lower() not in SHELL_OR_PYTHON:
                continue
            runs = info in ("sh", "python") and run_by_sybil(path)
            if not runs and not FRAGMENT.match(rest.strip()):
                bad.append(f"{path.relative_to(ROOT)}: ```{info}")
    assert bad == [], "blocks neither run nor marked as fragments:\n" + "\n".join(bad)


def test_the_documents_sybil_runs_are_on_pytests_default_paths() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    paths = config["tool"]["pytest"]["ini_options"]["testpaths"]
    assert {"README.md", "docs"} <= set(paths)
    from docsgen.examples import DOCUMENTS

    assert {"README.md", "docs/*.md", "docs/*/*.md"} <= set(DOCUMENTS)


def test_the_info_string_parser_sees_fragments_and_plain_blocks() -> None:
    text = '```sh\necho\n```\n\n```python title="Fragment: needs a real AWS account"\nx\n```\n'
    assert opening_info_strings(text) == ["sh", 'python title="Fragment: needs a real AWS account"']
