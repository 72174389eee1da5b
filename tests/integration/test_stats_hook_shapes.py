"""`jobcore_stats` answers whose key or text is not a string are a broken plugin's: left
out and logged, and `stats --json` (and `GET /api/stats`, the same object) still renders."""

from __future__ import annotations

import json
from collections.abc import Callable

import jobcore_test_plugin as tp
import pytest

from jobcore import Queue, StatsSection, hookimpl
from jobcore.cli.admin import stats_json, stats_text
from jobcore.storage.base import STATS_KEYS

MakeQueue = Callable[..., Queue]


def test_a_section_whose_key_or_text_is_not_a_string_is_left_out(
    jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    class TupleKey:
        @hookimpl
        def jobcore_stats(self, queue: Queue) -> StatsSection:
            return StatsSection(("a", "b"), {"n": 1}, "Tuple")  # type: ignore[arg-type]

    class IntKey:
        @hookimpl
        def jobcore_stats(self, queue: Queue) -> StatsSection:
            return StatsSection(1, "one", "One")  # type: ignore[arg-type]

    class NoText:
        @hookimpl
        def jobcore_stats(self, queue: Queue) -> StatsSection:
            return StatsSection("notext", [], None)  # type: ignore[arg-type]

    class EmptyKey:
        @hookimpl
        def jobcore_stats(self, queue: Queue) -> StatsSection:
            return StatsSection("", [], "Empty")

    class Fine:
        @hookimpl
        def jobcore_stats(self, queue: Queue) -> StatsSection:
            return StatsSection("fine", {"ok": True}, "Fine:\n  ok")

    queue = jobcore_make_queue(tp, TupleKey(), IntKey(), NoText(), EmptyKey(), Fine())
    with caplog.at_level("ERROR", logger="jobcore"):
        stats = queue.stats()
    answered = json.loads(json.dumps(stats_json(stats), allow_nan=False))
    plugin_keys = set(answered) - STATS_KEYS
    assert plugin_keys == {"fine"}, plugin_keys
    text = stats_text(stats)
    assert "Fine:\n  ok" in text and "None" not in text
    assert caplog.text.count("failed in jobcore_stats") == 4, caplog.text
