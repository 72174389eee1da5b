"""MkDocs hook: `<!-- generated: NAME -->` in a page becomes the reference it names."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "plugins"):  # build from the checkout's code
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from docsgen.reference import GENERATORS  # noqa: E402

MARKER = re.compile(r"<!-- generated: (\w+) -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda match: GENERATORS[match.group(1)](), markdown)
