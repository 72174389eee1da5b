"""Jinja2 templates of the dashboard and the filters they use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from jobcore.timeutil import iso
from jobcore_http.dashboard.static import ASSET_VERSION
from jobcore_http.responses import readable

HERE = Path(__file__).parent

templates = Jinja2Templates(directory=str(HERE / "templates"))


def _utc(ms: int | None) -> str:
    text = iso(ms)
    return "" if text is None else text.replace("T", " ")[:19] + " UTC"


def duration(ms: float | None) -> str:
    """`840 ms`, `12.3 s`, `4 min 05 s`, `2 h 10 min`."""
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _pretty(value: Any) -> str:
    return readable(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


def _shown(value: Any) -> Any:
    """Every `{{ … }}` value: text holding a lone surrogate (a stored value the page must
    still render) shows it as U+FFFD."""
    if isinstance(value, Markup):
        return Markup(readable(str(value)))
    if isinstance(value, str):
        return readable(value)
    return value


templates.env.filters["iso"] = iso
templates.env.filters["utc"] = _utc
templates.env.filters["duration"] = duration
templates.env.filters["pretty"] = _pretty
templates.env.finalize = _shown


def page(
    request: Request, name: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """Render a template with the values every page uses; pages are never cached."""
    context.setdefault("session", None)
    context.setdefault("live", False)
    context.setdefault("notice", None)
    context.setdefault("active", "")
    context["asset_version"] = ASSET_VERSION
    response = templates.TemplateResponse(request, name, context, status_code=status_code)
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    )
    response.headers["Referrer-Policy"] = "same-origin"
    return response
