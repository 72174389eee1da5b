"""Medians with min-max, and the machine description."""

from __future__ import annotations

import os
import platform
import statistics
from dataclasses import dataclass, field

import apsw


@dataclass
class Series:
    name: str  # e.g. "drain, 1 process x 4 threads"
    sync: str  # FULL | NORMAL | -
    system: str  # jobcore | raw | huey
    unit: str  # jobs/s | ms | us/claim | MB | % core
    values: list[float] = field(default_factory=list)
    higher_is_better: bool = True

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "sync": self.sync,
            "system": self.system,
            "unit": self.unit,
            "median": self.median,
            "min": min(self.values, default=None),
            "max": max(self.values, default=None),
            "values": self.values,
        }


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
    }
