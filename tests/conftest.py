"""Shared fixtures: the test plugin is importable here and in worker subprocesses."""

from __future__ import annotations

import sys
from pathlib import Path

HELPERS = Path(__file__).parent / "helpers"
sys.path.insert(0, str(HELPERS))
