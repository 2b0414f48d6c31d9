"""``delayq.offload.Offload``: where a blocking call runs.

``inline`` calls block the event loop's thread, ``threads`` calls run in a pool
thread, and ``auto`` runs calls inline until one is slow or finds the store
unavailable, then in threads for a while."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from delayq import errors, offload
from delayq.offload import AUTO, INLINE, THREADS, Offload


def on_loop_thread(calls: Offload, *work) -> list[bool]:
    """For each blocking callable in *work*, awaited through *calls*: whether it ran on
    the loop's thread."""
    async def main() -> list[bool]:
        loop_thread = threading.get_ident()
        threads: list[int] = []

        def run(fn) -> None:
            threads.append(threading.get_ident())
            fn()
        for fn in work:
            with contextlib.suppress(errors.StorageUnavailable):
                await calls(run, fn)
        return [thread == loop_thread for thread in threads]
    try:
        return asyncio.run(main())
    finally:
        calls.shutdown()


def slow() -> None:
    time.sleep(offload.SLOW_CALL + 0.02)


def unavailable() -> None:
    raise errors.StorageUnavailable("down", store="sqlite")


def test_auto_runs_brief_calls_inline():
    assert on_loop_thread(Offload(AUTO), *[lambda: None] * 3) == [True, True, True]


def test_auto_sends_the_calls_after_a_slow_one_to_threads_for_a_while(monkeypatch):
    assert on_loop_thread(Offload(AUTO), slow, lambda: None) == [True, False]
    monkeypatch.setattr(offload, "THREADS_AFTER_SLOW", 0.0)
    assert on_loop_thread(Offload(AUTO), slow, lambda: None) == [True, True]


def test_auto_sends_the_calls_after_an_unavailable_store_to_threads():
    assert on_loop_thread(Offload(AUTO), unavailable, lambda: None) == [True, False]


def test_threads_mode_always_uses_the_pool():
    assert on_loop_thread(Offload(THREADS), lambda: None, lambda: None) == [False, False]


def test_inline_mode_stays_inline_after_a_slow_call():
    assert on_loop_thread(Offload(INLINE), slow, lambda: None) == [True, True]


def test_in_thread_uses_the_pool_whatever_the_mode():
    calls = Offload(INLINE)

    async def main() -> bool:
        return await calls.in_thread(threading.get_ident) != threading.get_ident()
    try:
        assert asyncio.run(main())
    finally:
        calls.shutdown()


def test_set_mode_changes_where_the_next_calls_run():
    calls = Offload(INLINE)
    calls.set_mode(THREADS)
    assert on_loop_thread(calls, lambda: None) == [False]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="storage_calls"):
        Offload("fast")
    with pytest.raises(ValueError, match="storage_calls"):
        Offload(INLINE).set_mode("fast")
