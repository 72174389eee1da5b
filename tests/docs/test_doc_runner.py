"""The documentation runner (docsgen/examples.py, on Sybil) fails a block that fails, carries
a page's variables and folder from block to block, and stops what a page left running."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from docsgen.examples import DOCUMENTS, Sybil, sybil, teardown

PAGE = """
```sh
mkdir -p sub && cd sub
GREETING=hello
```

```sh
test "$GREETING" = hello && test "$(basename "$PWD")" = sub
```

```python
import os
assert os.path.basename(os.getcwd()) == "sub"
```

```sh title="Fragment: never run"
exit 1
```

```sh
exit 3
```
"""


def run_page(tmp_path: Path) -> tuple[list[str], Path]:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    local = Sybil(parsers=sybil.parsers, patterns=["*.md"], path=str(tmp_path))
    document = local.parse(path)
    outcomes: list[str] = []
    folder = None
    try:
        for example in document.examples():
            try:
                example.evaluate()
                outcomes.append("ok")
            except AssertionError as exc:
                outcomes.append(str(exc).splitlines()[0])
            folder = document.namespace["__jobcore_doc_page__"].base
    finally:
        teardown(document.namespace)
    assert folder is not None
    return outcomes, folder


def test_blocks_share_a_shell_state_fail_when_they_fail_and_are_cleaned_up(tmp_path: Path) -> None:
    outcomes, folder = run_page(tmp_path)
    assert outcomes == ["ok", "ok", "ok", "the block exited 3:"]  # the fragment never ran
    assert not folder.exists()


def test_a_background_process_of_a_page_is_stopped_at_its_end(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text('```sh\nsleep 300 &\necho $! > "$HOME/../pid"\n```\n')
    local = Sybil(parsers=sybil.parsers, patterns=["*.md"], path=str(tmp_path))
    document = local.parse(path)
    [example] = list(document.examples())
    example.evaluate()
    page = document.namespace["__jobcore_doc_page__"]
    pid = int((page.base / "pid").read_text())
    os.kill(pid, 0)  # running while the page is
    teardown(document.namespace)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the page's background process {pid} still runs")


def test_the_runner_covers_the_readme_and_docs() -> None:
    assert {"README.md", "docs/*.md", "docs/*/*.md"} <= set(DOCUMENTS)
