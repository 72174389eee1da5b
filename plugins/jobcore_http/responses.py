"""Answers that any stored value can be rendered into.

Values entering through the hub are refused when they hold a lone surrogate
(`jobcore_http.limits`), but a store may already hold one (written before that
check, or by a Python producer or handler): rendering must not fail on it, or
one job would break every listing that meets it. Such characters are shown as
U+FFFD; the stored value is left as it is.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse as _StarletteJSON


def readable(text: str) -> str:
    """`text` with every lone surrogate (not encodable as UTF-8) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # a pair of surrogates joins into its character; a lone one becomes U+FFFD
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


class JSONResponse(_StarletteJSON):
    """Starlette's JSON answer, rendered even when a value holds a lone surrogate."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(
            content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
        )
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return readable(text).encode("utf-8")
