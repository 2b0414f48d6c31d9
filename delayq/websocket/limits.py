"""Limits for a hostile peer: frames per second per socket, sockets per worker, idle
time (``[drivers:transport:websocket]``).

The frame size and the pings are uvicorn's (``ws_max_size``, ``ws_ping_interval``,
``ws_ping_timeout``: ``delayq.server``), enforced before a frame reaches the app.
Frames of one socket are served one at a time, and uvicorn stops reading a socket whose
frames queue up, so a flood on one socket costs the worker at most its rate of frames:
the others are served between them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from oslo_config import cfg

from delayq.conf import WEBSOCKET_GROUP

# Close codes (RFC 6455 section 7.4.1).
NORMAL = 1000
POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013


@dataclass(frozen=True)
class SocketLimits:
    """The options of ``[drivers:transport:websocket]`` the sockets keep to."""

    max_frame_size: int
    max_frames_per_second: float
    idle_timeout: float
    ping_interval: float
    ping_timeout: float
    max_sockets: int

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> SocketLimits:
        group = conf[WEBSOCKET_GROUP]
        return cls(max_frame_size=group.max_frame_size,
                   max_frames_per_second=group.max_frames_per_second,
                   idle_timeout=group.idle_timeout, ping_interval=group.ping_interval,
                   ping_timeout=group.ping_timeout, max_sockets=group.max_sockets)


class FrameRate:
    """A token bucket: *rate* frames per second on average, a burst of as many again."""

    __slots__ = ("rate", "burst", "tokens", "last")

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.burst = max(rate, 1.0) * 2
        self.tokens = self.burst
        self.last = time.monotonic()

    def take(self) -> bool:
        """Whether one more frame is within the rate (and count it)."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class SocketCount:
    """The sockets one worker holds (one app per worker, one event loop: no lock)."""

    __slots__ = ("held", "maximum")

    def __init__(self, maximum: int) -> None:
        self.held = 0
        self.maximum = maximum

    def admit(self) -> bool:
        """Take a place, if there is one."""
        if self.held >= self.maximum:
            return False
        self.held += 1
        return True

    def release(self) -> None:
        self.held -= 1
