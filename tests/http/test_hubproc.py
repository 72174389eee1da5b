"""The test harness's hubs never outlive their test (a leaked one warned in a later test)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from hubproc import RUNNING, Hub


def test_a_hub_that_ignores_sigterm_is_killed_and_reported(tmp_path: Path) -> None:
    hub = Hub(tmp_path / "jobs.db")
    assert hub in RUNNING
    hub.proc.send_signal(signal.SIGSTOP)  # it cannot act on the SIGTERM
    with pytest.raises(AssertionError, match=r"did not exit within 0\.5 s of SIGTERM"):
        hub.terminate(timeout=0.5)
    assert hub.proc.returncode == -signal.SIGKILL
    assert hub not in RUNNING
