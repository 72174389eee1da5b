"""The dashboard's pause and resume (DESIGN §16) against a real hub: a confirmation page,
a CSRF-checked POST, the overview showing the pause; read tokens cannot."""

from __future__ import annotations

import re
from contextlib import closing
from pathlib import Path

import httpx
from hubproc import Hub, jobcore, make_tokens


def _signed_in(hub: Hub, token: str) -> httpx.Client:
    client = httpx.Client(base_url=hub.url, timeout=30)
    answer = client.post("/ui/login", data={"token": token, "next": "/"})
    assert answer.status_code == 303, answer.text
    return client


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1)


def test_pause_and_resume_a_queue_from_the_dashboard(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    hub = Hub(db)
    try:
        tokens = make_tokens(hub, db)
        jobcore(db, "enqueue", "noop", "{}", "--queue", "mail")
        with closing(_signed_in(hub, tokens.produce)) as client:
            overview = client.get("/").text
            assert "/ui/pause?action=pause&amp;kind=queue&amp;name=mail" in overview
            confirm = client.get(
                "/ui/pause", params={"action": "pause", "kind": "queue", "name": "mail"}
            )
            assert confirm.status_code == 200 and "Pause queue mail?" in confirm.text
            form = {"action": "pause", "kind": "queue", "name": "mail", "reason": "SMTP down"}
            stale = client.post("/ui/pause", data={**form, "csrf_token": "nope"})
            assert stale.status_code == 403
            assert jobcore(db, "queues", "--json").stdout.count('"paused": true') == 0
            done = client.post("/ui/pause", data={**form, "csrf_token": _csrf(confirm.text)})
            assert done.status_code == 303 and done.headers["location"] == "/?done=paused&n=1"
            overview = client.get("/?done=paused&n=1").text
            assert (
                "PAUSED</strong> queue <strong>mail</strong>" in overview
                and "SMTP down" in overview
            )
            assert "token producer" in overview
            assert "/ui/pause?action=resume&amp;kind=queue&amp;name=mail" in overview
            assert '"paused": true' in jobcore(db, "queues", "--json").stdout
            resume = client.get(
                "/ui/pause", params={"action": "resume", "kind": "queue", "name": "mail"}
            )
            client.post(
                "/ui/pause",
                data={
                    "action": "resume",
                    "kind": "queue",
                    "name": "mail",
                    "csrf_token": _csrf(resume.text),
                },
            )
            assert '"paused": true' not in jobcore(db, "queues", "--json").stdout
            bad = client.get("/ui/pause", params={"action": "pause", "kind": "shelf", "name": "x"})
            assert bad.status_code == 400
        with closing(_signed_in(hub, tokens.read)) as reader:
            assert "/ui/pause?" not in reader.get("/").text
            refused = reader.get(
                "/ui/pause", params={"action": "pause", "kind": "queue", "name": "mail"}
            )
            assert refused.status_code == 403
    finally:
        assert hub.terminate() == 0, hub.output()[-3000:]
