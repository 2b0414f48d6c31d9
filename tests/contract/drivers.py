"""The drivers the contract suite runs against, and how to open each.

To add a driver, add an entry to ``DRIVERS``: a function that takes pytest's
``tmp_path`` and returns ``DriverSpec`` options, plus an ``open_driver`` branch. The test
ids then carry the driver's name (``test_x[sqlite]``, ``test_x[redis]``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delayq.storage.base import Driver


@dataclass(frozen=True)
class DriverSpec:
    """Everything needed to open the same backend again, in this or another process."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)


def _sqlite(tmp_path: Path) -> DriverSpec:
    return DriverSpec("sqlite", {"path": str(tmp_path / "contract.sqlite")})


DRIVERS: dict[str, Callable[[Path], DriverSpec]] = {
    "sqlite": _sqlite,
}


def open_driver(spec: DriverSpec, clock: Callable[[], float] = time.time) -> Driver:
    """A connected driver for *spec*; *clock* replaces the backend clock where it can."""
    if spec.name == "sqlite":
        from delayq.storage.sqlite.driver import Driver as SqliteDriver

        return SqliteDriver(spec.options["path"], clock=clock)
    raise ValueError(f"unknown driver {spec.name}")


class FakeClock:
    """A clock that only moves when told to, so time rules are tested to the instant."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
