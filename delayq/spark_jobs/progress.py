"""What delayq-audit tells the person running it, on stderr, while it runs.

Each step prints a line when it starts (Spark's console progress bar then shows its
stages) and one when it ends, with what it found and how long it took.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

PREFIX = "delayq-audit:"


class Progress:
    """Timed progress lines on a stream (stderr by default)."""

    def __init__(self, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._started = clock()

    @property
    def elapsed(self) -> float:
        """Seconds since this Progress was made."""
        return self._clock() - self._started

    def say(self, text: str) -> None:
        """Print one line."""
        stream = self._stream or sys.stderr
        stream.write(f"{PREFIX} {text}\n")
        stream.flush()

    @contextmanager
    def step(self, text: str) -> Iterator[Callable[[str], None]]:
        """Announce a step; the caller may note its result with the yielded function.

        Prints ``text ...`` now and ``text: <result> (<seconds>s)`` when the block ends
        without an error.
        """
        result: list[str] = []
        self.say(f"{text} ...")
        began = self._clock()
        yield result.append
        took = self._clock() - began
        found = f": {result[-1]}" if result else ": done"
        self.say(f"{text}{found} ({took:.1f}s)")
