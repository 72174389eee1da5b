"""Scheduled times of cron expressions in a time zone across DST changes, and of `every`
(real zoneinfo dates: Europe/Paris springs forward on 2026-03-29 at 01:00Z and falls
back on 2026-10-25 at 01:00Z)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from jobcore_cron.timing import Cron, Every

PARIS = ZoneInfo("Europe/Paris")


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def _times(timing: Cron | Every, after: str, count: int) -> list[str]:
    return [
        datetime.fromtimestamp(at / 1000, tz=UTC).strftime("%m-%dT%H:%MZ")
        for at in itertools.islice(timing.times_after(_ms(after)), count)
    ]


def test_a_daily_time_skipped_by_spring_forward_runs_once_when_the_gap_ends() -> None:
    # 02:30 does not exist on 03-29: the run comes at 03:00 CEST (01:00Z), once
    assert _times(Cron("30 2 * * *", PARIS), "2026-03-27T12:00:00+00:00", 4) == [
        "03-28T01:30Z",
        "03-29T01:00Z",
        "03-30T00:30Z",
        "03-31T00:30Z",
    ]


def test_a_daily_time_repeated_by_fall_back_runs_once_at_its_first_pass() -> None:
    # 02:30 happens at 00:30Z (CEST) and again at 01:30Z (CET): only the first runs
    assert _times(Cron("30 2 * * *", PARIS), "2026-10-24T12:00:00+00:00", 3) == [
        "10-25T00:30Z",
        "10-26T01:30Z",
        "10-27T01:30Z",
    ]


def test_hourly_schedules_follow_elapsed_time_across_both_changes() -> None:
    # spring forward: the skipped 02:30 does not run; runs stay an hour apart
    assert _times(Cron("30 * * * *", PARIS), "2026-03-29T00:00:00+00:00", 3) == [
        "03-29T00:30Z",
        "03-29T01:30Z",
        "03-29T02:30Z",
    ]
    # fall back: the repeated 02:30 runs on both passes; still an hour apart
    assert _times(Cron("30 * * * *", PARIS), "2026-10-24T23:00:00+00:00", 4) == [
        "10-24T23:30Z",
        "10-25T00:30Z",
        "10-25T01:30Z",
        "10-25T02:30Z",
    ]
    assert _times(Cron("*/20 * * * *", PARIS), "2026-03-29T00:30:00+00:00", 3) == [
        "03-29T00:40Z",
        "03-29T01:00Z",  # 03:00 CEST, the first local time after the gap
        "03-29T01:20Z",
    ]


def test_a_run_at_the_gap_start_and_one_after_it_land_on_one_instant_once() -> None:
    # 02:00 (skipped, moved to 03:00) and 03:00 itself are one run
    assert _times(Cron("0 2,3 * * *", PARIS), "2026-03-28T12:00:00+00:00", 3) == [
        "03-29T01:00Z",
        "03-30T00:00Z",
        "03-30T01:00Z",
    ]


def test_new_york_and_aliases() -> None:
    new_york = ZoneInfo("America/New_York")  # springs forward 2026-03-08 07:00Z
    assert _times(Cron("@daily", new_york), "2026-03-07T06:00:00+00:00", 2) == [
        "03-08T05:00Z",
        "03-09T04:00Z",
    ]


def test_every_runs_on_utc_multiples_of_its_interval() -> None:
    assert _times(Every(300_000), "2026-01-01T10:02:59+00:00", 3) == [
        "01-01T10:05Z",
        "01-01T10:10Z",
        "01-01T10:15Z",
    ]
    # strictly after: a time on the grid is not returned again
    assert next(Every(1000).times_after(5000)) == 6000


def test_a_long_outage_is_planned_without_walking_it() -> None:
    from jobcore_cron.scheduler import plan
    from jobcore_cron.spec import parse_schedule

    day = 86_400_000
    now = _ms("2026-06-01T12:00:00.400+00:00")
    last = now - 30 * day  # a month of every-second runs missed
    schedule = {"type": "noop", "every": "1s", "grace": "10s", "catchup_window": "60d"}
    latest = parse_schedule("s", {**schedule, "every": "1m", "policy": "latest"}, "test")
    later = now + 30_000  # 12:00:30.4: the 12:00 run is 30s late, past its 10s grace
    assert plan(latest, last, later) == ([now - 400], later)  # the newest one only
    skip = parse_schedule("s", {**schedule, "policy": "skip"}, "test")
    assert plan(skip, last, now) == (list(range(now - 9400, now, 1000)), now)  # on time
    every = parse_schedule("s", {**schedule, "policy": "all"}, "test")
    runs, mark = plan(every, last, now)  # the oldest first, a thousand per pass
    assert len(runs) == 1000 and runs[0] == last - last % 1000 + 1000 and mark == runs[-1]
    # a daily cron a year behind: the newest time, found by looking back from now
    daily = parse_schedule(
        "d", {"type": "noop", "cron": "0 3 * * *", "policy": "latest", "catchup_window": "2d"}, "t"
    )
    assert plan(daily, now - 400 * day, now) == ([_ms("2026-06-01T03:00:00+00:00")], now)


def test_the_next_minute_away_from_a_dst_change_reads_a_few_local_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a scheduler computes this in its write transaction every minute: it must not walk the
    # three hours of DST slack each side (360 local times, ~75ms) when no change is near
    import croniter

    calls = []
    real = croniter.croniter.get_next

    def counted(self: object, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(croniter.croniter, "get_next", counted)
    minutely = Cron("* * * * *", PARIS)
    assert _times(minutely, "2026-06-01T12:00:30+00:00", 1) == ["06-01T12:01Z"]
    assert len(calls) <= 3, len(calls)
    calls.clear()  # next to a change the slack is still walked, and the order still right
    assert _times(minutely, "2026-10-25T00:59:30+00:00", 2) == ["10-25T01:00Z", "10-25T01:01Z"]
    assert len(calls) > 300
