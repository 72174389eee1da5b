"""The dashboard in Debian's Chromium against a real `jobcore serve` on 127.0.0.1."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from dashboard_harness import JOBCORE, Hub, sign_in

expect: Any
try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None

pytestmark = pytest.mark.slow


def status_of(page: Any, job_id: str) -> Any:
    return page.locator(f'tr[data-job-id="{job_id}"] [data-field="status"]')


def run_until(hub: Hub, job_id: str, status: str, worker: str = "w-test") -> None:
    """Run workers (each until the queue is empty) until the job has `status`."""
    for attempt in range(20):
        hub.cli(
            "run", "--until-empty", "--worker-id", f"{worker}-{attempt}", "--backoff-base", "0.05"
        )
        if json.loads(hub.cli("show", job_id, "--json").stdout)["status"] == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never became {status}")


def enqueue(hub: Hub, type_name: str, payload: dict[str, Any], *options: str) -> str:
    return hub.cli("enqueue", type_name, json.dumps(payload), *options).stdout.strip()


SLOW = 60_000  # ms: steps that wait for another process on a possibly loaded machine


def test_enqueued_job_appears_and_runs_live(hub: Hub, page: Any, shots: Path) -> None:
    sign_in(page, hub, hub.token("ops", "admin"), "/ui/jobs")
    expect(page.locator("#live-state")).to_have_text("Live", timeout=SLOW)
    page.evaluate("window.__sameDocument = true")

    # the job runs long enough that its `claimed` state is seen even on a loaded machine
    job_id = enqueue(hub, "noop", {"sleep": 8})
    expect(status_of(page, job_id)).to_have_text("pending", timeout=SLOW)
    worker = subprocess.Popen(
        [*JOBCORE, "run", "--until-empty", "--worker-id", "w-live"],
        env=hub.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # a worker process can take many seconds to start under load: wait for it, not less
        expect(status_of(page, job_id)).to_have_text("claimed", timeout=SLOW)
        expect(status_of(page, job_id)).to_have_text("completed", timeout=SLOW)
        assert worker.wait(timeout=120) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    expect(page.locator(f'tr[data-job-id="{job_id}"]')).to_contain_text("w-live")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    page.goto(f"{hub.url}/")
    expect(page.locator('[data-count="completed"]')).to_have_text("1")


def test_filters_and_search_narrow_the_list_and_stay_in_the_url(
    hub: Hub, page: Any, shots: Path
) -> None:
    enqueue(hub, "shell", {"command": "echo needle-one"}, "--queue", "mail")
    enqueue(hub, "shell", {"command": "echo hay"}, "--queue", "mail")
    enqueue(hub, "shell", {"command": "echo needle-two"})
    enqueue(hub, "noop", {}, "--queue", "mail")
    sign_in(page, hub, hub.token("ops", "admin"), "/ui/jobs")
    rows = page.locator("tbody tr[data-job-id]")
    expect(rows).to_have_count(4)

    page.get_by_label("pending", exact=True).check()
    page.get_by_label("Queue").fill("mail")
    page.get_by_label("Search payloads and errors").fill("needle")
    page.get_by_role("button", name="Apply filters").click()

    expect(page).to_have_url(re.compile(r"status=pending&queue=mail&q=needle"))
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("mail")
    page.screenshot(path=str(shots / "jobs-filtered.png"), full_page=True)

    page.reload()  # a bookmark gives the same list and the same form
    expect(rows).to_have_count(1)
    expect(page.get_by_label("Queue")).to_have_value("mail")
    expect(page.get_by_label("Search payloads and errors")).to_have_value("needle")
    expect(page.get_by_label("pending", exact=True)).to_be_checked()

    page.goto(f"{hub.url}/ui/jobs?type=noop")
    expect(rows).to_have_count(1)
    noop_id = rows.first.get_attribute("data-job-id") or ""
    page.get_by_label("Search payloads and errors").fill(noop_id)  # a pasted id opens the job
    page.get_by_role("button", name="Apply filters").click()
    expect(page).to_have_url(f"{hub.url}/ui/jobs/{noop_id}")


def test_failed_job_shows_every_attempt_with_worker_and_error(
    hub: Hub, page: Any, shots: Path
) -> None:
    job_id = enqueue(hub, "noop", {"fail": True}, "--max-attempts", "3")
    run_until(hub, job_id, "failed", worker="w-fail")
    sign_in(page, hub, hub.token("ops", "admin"), f"/ui/jobs/{job_id}")

    attempts = page.locator("table.attempts tbody tr")
    expect(attempts).to_have_count(3)
    for number in range(3):
        row = attempts.nth(number)
        expect(row).to_contain_text(re.compile(r"w-fail-\d+"))
        expect(row).to_contain_text("noop failed as asked")
    expect(attempts.nth(2)).to_contain_text("failed")
    time_cell = page.locator("dl.details time").first
    expect(time_cell).to_have_attribute("title", re.compile(r"UTC$"))
    utc_hour = int((time_cell.get_attribute("title") or "").split(" ")[1][:2])
    local = re.search(r"(\d\d):\d\d:\d\d", time_cell.inner_text())
    assert local is not None and int(local.group(1)) == (utc_hour + 9) % 24  # Asia/Tokyo
    page.screenshot(path=str(shots / "job-failed.png"), full_page=True)


def test_bulk_retry_of_failed_jobs_of_one_type(hub: Hub, page: Any, shots: Path) -> None:
    marker = hub.folder / "marker"
    ids = [
        enqueue(hub, "shell", {"command": f"test -f {marker}"}, "--max-attempts", "1")
        for _ in range(3)
    ]
    other = enqueue(hub, "noop", {"fail": True}, "--max-attempts", "1")
    hub.cli("run", "--until-empty", "--worker-id", "w-first")
    sign_in(page, hub, hub.token("ops", "admin"), "/ui/jobs?status=failed&type=shell")
    expect(page.locator("tbody tr[data-job-id]")).to_have_count(3)

    page.get_by_role("link", name="Retry all matching…").click()
    expect(page.get_by_role("heading", name="Retry 3 jobs?")).to_be_visible()
    page.screenshot(path=str(shots / "bulk-confirm.png"))
    marker.write_text("ok")
    page.get_by_role("button", name="Retry 3 jobs").click()
    expect(page.get_by_role("status").filter(has_text="Retried 3 job(s).")).to_be_visible()

    hub.cli("run", "--until-empty", "--worker-id", "w-second")
    for job_id in ids:
        shown = json.loads(hub.cli("show", job_id, "--json").stdout)
        assert shown["status"] == "completed" and shown["locked_by"] == "w-second"
    assert json.loads(hub.cli("show", other, "--json").stdout)["status"] == "failed"
    page.goto(f"{hub.url}/ui/jobs?status=completed&type=shell")
    expect(page.locator("tbody tr[data-job-id]")).to_have_count(3)


def test_dead_letters_group_by_signature_and_retry_one_group(hub: Hub, page: Any) -> None:
    shell = [
        enqueue(hub, "shell", {"command": f"exit {code}"}, "--max-attempts", "1") for code in (3, 4)
    ]
    other = enqueue(hub, "noop", {"fail": True}, "--max-attempts", "1")
    hub.cli("run", "--until-empty")
    sign_in(page, hub, hub.token("ops", "admin"), "/ui/dead-letters")
    groups = page.locator("tbody tr")
    expect(groups).to_have_count(2)
    group = groups.filter(has_text="exit code <n>")
    expect(group.locator("td").first).to_have_text("2")
    group.get_by_role("link", name="Retry these…").click()
    expect(page.get_by_role("heading", name="Retry 2 jobs?")).to_be_visible()
    page.get_by_role("button", name="Retry 2 jobs").click()
    expect(page.get_by_role("status").filter(has_text="Retried 2 job(s).")).to_be_visible()
    for job_id in shell:
        assert json.loads(hub.cli("show", job_id, "--json").stdout)["status"] == "pending"
    assert json.loads(hub.cli("show", other, "--json").stdout)["status"] == "failed"


def test_read_token_sees_no_action_and_forged_posts_are_refused(
    hub: Hub, page: Any, shots: Path
) -> None:
    failed = enqueue(hub, "noop", {"fail": True}, "--max-attempts", "1")
    waiting = enqueue(hub, "noop", {}, "--delay", "1h")
    hub.cli("run", "--until-empty")
    sign_in(page, hub, hub.token("viewer", "read"), "/ui/jobs")
    expect(page.locator("tbody tr[data-job-id]")).to_have_count(2)
    expect(page.locator('main form[method="post"]')).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("Retry|Cancel"))).to_have_count(0)
    expect(page.get_by_role("link", name=re.compile("all matching"))).to_have_count(0)
    page.goto(f"{hub.url}/ui/jobs/{failed}")
    expect(page.get_by_role("heading", name=re.compile("Job"))).to_be_visible()
    expect(page.locator("main button")).to_have_count(0)
    page.goto(f"{hub.url}/ui/dead-letters")
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.get_by_role("link", name="Retry these…")).to_have_count(0)

    csrf = page.locator('header input[name="csrf_token"]').get_attribute("value")
    forged = [
        (f"/ui/jobs/{failed}/retry", {"csrf_token": csrf}),
        (f"/ui/jobs/{waiting}/cancel", {"csrf_token": csrf}),
        ("/ui/bulk", {"csrf_token": csrf, "action": "retry", "status": "failed"}),
        ("/ui/dead-letters/retry", {"csrf_token": csrf, "signature": "RuntimeError: noop failed"}),
    ]
    for path, form in forged:
        answer = page.request.post(f"{hub.url}{path}", form=form, max_redirects=0)
        assert answer.status == 403, (path, answer.status)
    answer = page.request.post(f"{hub.url}/api/jobs/{failed}/retry", max_redirects=0)
    assert answer.status in (401, 403)
    assert json.loads(hub.cli("show", failed, "--json").stdout)["status"] == "failed"
    assert json.loads(hub.cli("show", waiting, "--json").stdout)["status"] == "scheduled"

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("Token")).to_be_visible()
    page.goto(f"{hub.url}/ui/jobs")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))


def test_action_without_csrf_token_is_refused(hub: Hub, page: Any) -> None:
    failed = enqueue(hub, "noop", {"fail": True}, "--max-attempts", "1")
    hub.cli("run", "--until-empty")
    sign_in(page, hub, hub.token("ops", "admin"), f"/ui/jobs/{failed}")
    for form in ({}, {"csrf_token": "0" * 40}):
        answer = page.request.post(f"{hub.url}/ui/jobs/{failed}/retry", form=form, max_redirects=0)
        assert answer.status == 403
    page.get_by_role("button", name="Retry job").click()
    expect(page.get_by_role("status").filter(has_text="Retried 1 job(s).")).to_be_visible()
    assert json.loads(hub.cli("show", failed, "--json").stdout)["status"] == "pending"


def test_page_reconnects_after_hub_restart_and_catches_up(hub: Hub, page: Any, shots: Path) -> None:
    sign_in(page, hub, hub.token("ops", "admin"), "/")
    live = page.locator("#live-state")
    expect(live).to_have_text("Live")
    expect(page.locator('[data-count="pending"]')).to_have_text("0")
    page.evaluate("window.__sameDocument = true")

    hub.stop()
    expect(live).to_have_text("Reconnecting…")
    enqueue(hub, "noop", {})
    enqueue(hub, "noop", {})
    hub.start()

    expect(live).to_have_text("Live", timeout=30_000)
    expect(page.locator('[data-count="pending"]')).to_have_text("2")
    assert page.evaluate("window.__sameDocument") is True


def test_updates_pause_while_hidden_and_catch_up_when_shown(hub: Hub, page: Any) -> None:
    sign_in(page, hub, hub.token("ops", "admin"), "/")
    expect(page.locator("#live-state")).to_have_text("Live")
    page.evaluate(
        """() => {
            Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
            document.dispatchEvent(new Event('visibilitychange'));
        }"""
    )
    expect(page.locator("#live-state")).to_have_text("Paused while hidden")
    refreshed = page.evaluate("document.body.getAttribute('data-refreshed')")
    enqueue(hub, "noop", {})
    page.wait_for_timeout(1500)  # a live page would have refetched within 0.4 s of the event
    assert page.evaluate("document.body.getAttribute('data-refreshed')") == refreshed
    expect(page.locator('[data-count="pending"]')).to_have_text("0")

    page.evaluate(
        """() => {
            Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
            document.dispatchEvent(new Event('visibilitychange'));
        }"""
    )
    expect(page.locator('[data-count="pending"]')).to_have_text("1")
    expect(page.locator("#live-state")).to_have_text("Live")


def test_every_view_renders_at_desktop_and_phone_width(hub: Hub, page: Any, shots: Path) -> None:
    done = enqueue(hub, "noop", {})
    enqueue(hub, "noop", {"fail": True}, "--max-attempts", "1", "--queue", "reports")
    enqueue(hub, "shell", {"command": "exit 3"}, "--max-attempts", "1")
    enqueue(hub, "noop", {}, "--delay", "1h", "--queue", "reports")
    hub.cli("run", "--until-empty", "--worker-id", "w-shots")
    enqueue(hub, "noop", {}, "--queue", "mail")
    sign_in(page, hub, hub.token("ops", "admin"), "/")
    views = {
        "overview": "/",
        "jobs": "/ui/jobs",
        "job": f"/ui/jobs/{done}",
        "workers": "/ui/workers",
        "dead-letters": "/ui/dead-letters",
    }
    for name, path in views.items():
        page.goto(f"{hub.url}{path}")
        expect(page.locator("h1")).to_be_visible()
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    expect(page.locator("main")).to_contain_text("exit")  # dead letters: the shell failure
    page.set_viewport_size({"width": 390, "height": 844})
    for name, path in views.items():
        page.goto(f"{hub.url}{path}")
        # nothing but the scrolling tables is wider than the phone's screen
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (name, width)
        page.screenshot(path=str(shots / f"{name}-phone.png"), full_page=True)


def test_keyboard_alone_signs_in_and_reaches_the_jobs(hub: Hub, page: Any) -> None:
    page.goto(f"{hub.url}/ui/jobs")
    page.keyboard.type(hub.token("ops", "admin"))  # the token field has focus
    page.keyboard.press("Enter")
    page.wait_for_url(f"{hub.url}/ui/jobs")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "token":
            break
        if page.evaluate("document.activeElement.name") == "q":
            break
    expect(page.get_by_label("Search payloads and errors")).to_be_focused()
