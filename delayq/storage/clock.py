"""A clock that follows a backend server's clock, for drivers whose backend cannot compare
times inside its own atomic operations.

Every API process computes due times and claim expiries with the same server's clock, so
hosts whose own clocks disagree (NTP off, a VM paused) still agree on when a message is
due. The server is asked for its time once every ``interval`` seconds; in between, the
process's monotonic clock advances the last answer, which a step of the host's wall clock
does not disturb.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

MS = 1000


class ServerClock:
    """POSIX seconds, in whole milliseconds, on the server's clock.

    *fetch* returns the server's time in POSIX milliseconds at the middle of the call (a
    fetch of one request: the time in the server's answer); it is called at the first
    reading and again whenever the last answer is *interval* seconds old. The error of a
    reading is at most half the round trip of the request the server stamped, plus a
    millisecond. One thread fetches at a time: threads finding the answer stale together
    wait for one fetch.
    """

    def __init__(self, fetch: Callable[[], int], interval: float = 30.0) -> None:
        self._fetch = fetch
        self._interval = interval
        self._lock = threading.Lock()
        self._fetching = threading.Lock()
        self._base_ms: int | None = None  # server time at _base_mono
        self._base_mono = 0.0

    def _sync(self) -> None:
        """Ask the server for its time now (under ``_fetching``)."""
        sent = time.monotonic()
        server_ms = self._fetch()
        received = time.monotonic()
        with self._lock:
            self._base_ms = server_ms
            self._base_mono = (sent + received) / 2

    def _stale(self, now: float) -> bool:
        return self._base_ms is None or now - self._base_mono >= self._interval

    def __call__(self) -> float:
        if self._stale(time.monotonic()):
            with self._fetching:
                # Another thread may have fetched while this one waited.
                if self._stale(time.monotonic()):
                    self._sync()
        with self._lock:
            elapsed_ms = math.floor((time.monotonic() - self._base_mono) * MS)
            return (self._base_ms + elapsed_ms) / MS
