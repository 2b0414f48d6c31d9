"""Stopping the listener of a worker's signals (``delayq.api.wakeups``) ends it, even when
the store's library swallows the cancellation, as ``asyncio.wait_for`` does on Python
3.11 when the cancellation arrives as the awaited operation completes."""

from __future__ import annotations

import asyncio
import contextlib

from delayq.api.longpoll import LongPoll
from delayq.api.wakeups import Wakeups
from delayq.push.pusher import Pusher
from delayq.push.settings import PushSettings
from delayq.storage.base.signals import Receive, Signals


class SwallowsOneCancellation(Signals):
    """A store whose library, connecting when the first cancellation comes, loses it
    and goes on listening."""

    def __init__(self) -> None:
        super().__init__()
        self.listening = asyncio.Event()
        self.ended = False

    async def listen(self, receive: Receive) -> None:
        try:
            self.listening.set()
            # Swallowed, as a library's wait_for may.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
            await asyncio.sleep(3600)
        finally:
            self.ended = True


def test_stop_ends_a_listener_that_swallows_a_cancellation():
    async def scenario() -> None:
        signals = SwallowsOneCancellation()
        wakeups = Wakeups(signals, LongPoll(None, 1.0), Pusher(None, PushSettings()))
        await wakeups.start()
        await signals.listening.wait()
        # asyncio.wait, which cancels nothing: a timeout that cancelled stop() would
        # cancel the listener itself.
        stopping = asyncio.get_running_loop().create_task(wakeups.stop())
        done, _ = await asyncio.wait({stopping}, timeout=5)
        assert stopping in done
        assert signals.ended

    asyncio.run(scenario())
