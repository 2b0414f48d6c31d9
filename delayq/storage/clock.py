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
from dataclasses import dataclass

MS = 1000


@dataclass(frozen=True)
class Stamp:
    """The server's time in POSIX milliseconds, and the span of this process's monotonic
    clock within which the server took it: the request the server stamped was sent at
    *sent* and answered at *received*."""

    server_ms: int
    sent: float
    received: float


def timed(request: Callable[[], int]) -> Callable[[], Stamp]:
    """A fetch of one *request* whose answer carries the server's time (POSIX ms): the
    server took that time within the request's round trip."""

    def fetch() -> Stamp:
        sent = time.monotonic()
        server_ms = request()
        return Stamp(server_ms, sent, time.monotonic())

    return fetch


class ServerClock:
    """POSIX seconds, in whole milliseconds, on the server's clock.

    *fetch* returns a ``Stamp``; it is called at the first reading and again whenever the
    last answer is *interval* seconds old. A stamp is placed at the middle of the request
    the server stamped, so the error of a reading is at most half that request's round
    trip plus a millisecond. One thread fetches at a time: threads finding the answer
    stale together wait for one fetch.
    """

    def __init__(self, fetch: Callable[[], Stamp], interval: float = 30.0) -> None:
        self._fetch = fetch
        self._interval = interval
        self._lock = threading.Lock()
        self._fetching = threading.Lock()
        self._base_ms = 0  # server time at _base_mono
        self._base_mono = 0.0
        self._synced = False

    def _sync(self) -> None:
        """Ask the server for its time now (under ``_fetching``)."""
        stamp = self._fetch()
        with self._lock:
            self._base_ms = stamp.server_ms
            self._base_mono = (stamp.sent + stamp.received) / 2
            self._synced = True

    def _stale(self, now: float) -> bool:
        return not self._synced or now - self._base_mono >= self._interval

    def __call__(self) -> float:
        if self._stale(time.monotonic()):
            with self._fetching:
                # Another thread may have fetched while this one waited.
                if self._stale(time.monotonic()):
                    self._sync()
        with self._lock:
            elapsed_ms = math.floor((time.monotonic() - self._base_mono) * MS)
            return (self._base_ms + elapsed_ms) / MS
