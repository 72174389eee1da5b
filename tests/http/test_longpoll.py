"""Long-poll claims: answered by an enqueue from any process, bounded per agent, cancellable."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from hubproc import Hub, Tokens, jobcore


def wait_claim(hub: Hub, token: str, queue: str, wait: float) -> tuple[httpx.Response, float]:
    with hub.client(token, timeout=wait + 30) as client:
        started = time.monotonic()
        answer = client.post(
            "/api/jobs/claim", json={"worker_id": "agent-1", "queues": [queue], "wait": wait}
        )
        return answer, time.monotonic() - started


def test_an_enqueue_from_another_process_answers_a_waiting_claim(hub: Hub, tokens: Tokens) -> None:
    queue = f"lp-{uuid.uuid4().hex[:6]}"
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(wait_claim, hub, tokens.agent, queue, 20)
        time.sleep(0.5)
        assert not waiting.done()
        job_id = jobcore(hub.db, "enqueue", "noop", "{}", "--queue", queue).stdout.strip()
        answer, elapsed = waiting.result(30)
    assert answer.status_code == 200
    assert answer.json()["id"] == job_id
    assert elapsed < 20  # answered by the enqueue, not by the end of the wait


def test_an_enqueue_over_http_answers_a_waiting_claim(hub: Hub, tokens: Tokens) -> None:
    queue = f"lp-{uuid.uuid4().hex[:6]}"
    with ThreadPoolExecutor(1) as pool, hub.client(tokens.produce) as producer:
        waiting = pool.submit(wait_claim, hub, tokens.agent, queue, 20)
        time.sleep(0.3)
        job_id = producer.post("/api/jobs", json={"type": "noop", "queue": queue}).json()["id"]
        answer, elapsed = waiting.result(30)
    assert answer.json()["id"] == job_id
    assert elapsed < 20


def test_a_claim_that_finds_nothing_answers_204_after_wait(hub: Hub, tokens: Tokens) -> None:
    answer, elapsed = wait_claim(hub, tokens.agent, "lp-empty", 0.5)
    assert answer.status_code == 204
    assert elapsed >= 0.45


def test_concurrent_long_polls_per_agent_are_capped(hub: Hub, tokens: Tokens) -> None:
    queue = f"lp-{uuid.uuid4().hex[:6]}"
    with ThreadPoolExecutor(6) as pool:
        held = [pool.submit(wait_claim, hub, tokens.agent, queue, 3) for _ in range(4)]
        time.sleep(0.8)
        over, _ = wait_claim(hub, tokens.agent, queue, 3)
        assert over.status_code == 429
        assert "max_claims_per_agent" in over.json()["error"]
        assert all(f.result(30)[0].status_code == 204 for f in held)
    # without waiting there is no cap
    assert wait_claim(hub, tokens.agent, queue, 0)[0].status_code == 204


def test_a_departed_long_poll_claims_nothing(hub: Hub, tokens: Tokens) -> None:
    queue = f"lp-{uuid.uuid4().hex[:6]}"

    def give_up() -> Any:
        try:
            wait_claim_short = httpx.post(
                hub.url + "/api/jobs/claim",
                json={"worker_id": "agent-1", "queues": [queue], "wait": 20},
                headers={"Authorization": f"Bearer {tokens.agent}"},
                timeout=0.5,
            )
            return wait_claim_short
        except httpx.TimeoutException:
            return None

    thread = threading.Thread(target=give_up)
    thread.start()
    thread.join()
    time.sleep(0.3)  # the hub notices the disconnect
    with hub.client(tokens.produce) as producer:
        job_id = producer.post("/api/jobs", json={"type": "noop", "queue": queue}).json()["id"]
    answer, _ = wait_claim(hub, tokens.agent, queue, 5)
    assert answer.status_code == 200
    assert answer.json()["id"] == job_id
