"""Review: `GET /api/jobs?q=` (and the dashboard's counts) could not find any non-ASCII
text, nor text holding `"` or `\\`: payloads are stored as ASCII-escaped JSON
(`café` is `caf\\u00e9`), and the query was compared with that raw text. `q='"'`
matched every job."""

from __future__ import annotations

from pathlib import Path

from hubproc import Hub, Tokens
from jobcore_http.dashboard.filters import JobFilter
from jobcore_http.dashboard.reader import Reader
from jobcore_http.store import hub_store_for

from jobcore import Queue

TEXTS = ["review café crème", 'review "quoted" word', "review back\\slash", "review 東京 Zürich"]


def test_search_finds_non_ascii_quotes_and_backslashes(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.admin) as admin:
        for text in TEXTS:
            assert admin.post(
                "/api/jobs", json={"type": "record", "payload": {"log": text}}
            ).is_success

        def found(q: str) -> list[str]:
            answer = admin.get("/api/jobs", params={"q": q, "type": "record"})
            assert answer.status_code == 200, answer.text
            return sorted(job["payload"]["log"] for job in answer.json()["jobs"])

        assert found("café") == ["review café crème"]
        assert found("東京") == ["review 東京 Zürich"]
        assert found("Zürich") == ["review 東京 Zürich"]
        assert found('"quoted"') == ['review "quoted" word']
        assert found("back\\slash") == ["review back\\slash"]
        assert found('"') == ['review "quoted" word']  # not every job's JSON quotes
        assert found("\\") == ["review back\\slash"]


def test_dashboard_counts_match_the_hub_search(tmp_path: Path) -> None:
    with Queue(str(tmp_path / "jobs.db")) as queue:
        for text in TEXTS:
            queue.enqueue("shell", {"command": f"echo {text}"})
        reader = Reader(queue, hub_store_for(queue.storage))
        for q, expected in (("café", 1), ('"quoted"', 1), ("\\", 1), ('"', 1), ("review", 4)):
            listed = reader.store.search_jobs(JobFilter(q=q).for_hub(), before=None, limit=100)
            assert len(listed.jobs) == expected, q
            assert reader.count(JobFilter(q=q)) == expected, q
        reader.close()
