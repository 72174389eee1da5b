"""A search keeps its time budget inside the scan, and `q` has a length limit (real hub).

Before the fix the budget (200 ms) was checked only between windows of 5,000 ids: one
read-scope `q` search over large payloads scanned a whole window, 5-6 s. Now the first
window is one id (every page still makes progress), windows grow only while quick, and
a window still running at the deadline is stopped inside its scan (SQLite progress
handler; PostgreSQL `statement_timeout`): the page ends early with a `next_cursor`.
"""

from __future__ import annotations

import jobcore_test_plugin
from hubproc import BIG, NEEDLE, Hub, Tokens
from hubproc import search_pages as walk

from jobcore import Config, Queue, make_plugin_manager


def test_a_slow_search_stops_at_its_budget_and_pages_on(hub: Hub, tokens: Tokens) -> None:
    pm = make_plugin_manager(plugins=(("test", jobcore_test_plugin),))
    with Queue(str(hub.db), config=Config(env={}), pm=pm) as queue:
        made = queue.enqueue_many("record", [{"log": BIG} for _ in range(8)], queue="budget")
        match = queue.enqueue("record", {"log": BIG + NEEDLE}, queue="budget").job.id
        queue.enqueue("record", {"log": "small"}, queue="budget")
    assert len(made) == 8
    with hub.client(tokens.read) as reader:
        found, pages, first = walk(reader, q=NEEDLE, queue="budget", limit=50)
        assert found == [match]
        # 8 rows of 400 kB cannot all be compared within 200 ms: the first page stopped
        assert first is not None and pages >= 2, (pages, first)


def test_q_longer_than_the_limit_is_400_naming_it(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.read) as reader:
        answer = reader.get("/api/jobs", params={"q": "x" * 201})
        assert answer.status_code == 400, answer.text
        assert "200" in answer.json()["error"]
        assert reader.get("/api/jobs", params={"q": "x" * 200}).status_code == 200
    with hub.client(tokens.produce) as producer:
        answer = producer.post("/api/jobs/cancel", json={"q": "x" * 201})
        assert answer.status_code == 400, answer.text
