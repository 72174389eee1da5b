"""Inline SVG bar charts rendered on the server (no script, no external library)."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup, escape

from jobcore_http.dashboard.overview import MINUTE_MS, History


@dataclass(frozen=True, slots=True)
class Bar:
    start_ms: int
    completed: int
    failed: int


def series(history: History, now: int, *, bars: int, minutes_per_bar: int) -> list[Bar]:
    """Completed and failed counts per bar, oldest first, the last bar ending now."""
    last_minute = now // MINUTE_MS
    out = []
    for index in range(bars):
        first = last_minute - (bars - index) * minutes_per_bar + 1
        completed = failed = 0
        for minute in range(first, first + minutes_per_bar):
            slot = history.minutes.get(minute)
            if slot:
                completed += slot[0]
                failed += slot[1]
        out.append(Bar(first * MINUTE_MS, completed, failed))
    return out


def bar_chart(bars: list[Bar], *, title: str, span_label: str, chart_id: str) -> Markup:
    """Stacked bars (completed below, failed on top) with a label and a hover title per bar."""
    width, height, pad = 600, 140, 18
    peak = max((bar.completed + bar.failed for bar in bars), default=0) or 1
    step = width / max(len(bars), 1)
    total_done = sum(bar.completed for bar in bars)
    total_failed = sum(bar.failed for bar in bars)
    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {width} {height + pad}" '
        f'role="img" aria-labelledby="{escape(chart_id)}-t" preserveAspectRatio="none">',
        f'<title id="{escape(chart_id)}-t">{escape(title)}: {total_done} completed, '
        f"{total_failed} failed</title>",
    ]
    for index, bar in enumerate(bars):
        x = index * step + 1
        w = max(step - 2, 1)
        done_h = height * bar.completed / peak
        fail_h = height * bar.failed / peak
        parts.append(
            f"<g><title>{bar.completed} completed, {bar.failed} failed</title>"
            f'<rect class="done" x="{x:.1f}" y="{height - done_h:.1f}" width="{w:.1f}" '
            f'height="{done_h:.1f}"/>'
            f'<rect class="failed" x="{x:.1f}" y="{height - done_h - fail_h:.1f}" '
            f'width="{w:.1f}" height="{fail_h:.1f}"/>'
            f'<rect class="hit" x="{x:.1f}" y="0" width="{w:.1f}" height="{height}"/></g>'
        )
    parts.append(
        f'<text x="2" y="{height + pad - 4}" class="axis">{escape(span_label)}</text>'
        f'<text x="{width - 2}" y="{height + pad - 4}" class="axis" text-anchor="end">now</text>'
        f'<text x="2" y="12" class="axis">max {peak}</text>'
        "</svg>"
    )
    return Markup("".join(parts))
