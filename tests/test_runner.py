"""``delayq.api.runner.Runner``: where the API's storage calls run.

A driver whose calls are brief round trips is called on the event loop (no thread
hand-off); a slow or failed call sends the next ones to the thread pool for a while; a
driver without brief calls, or ``storage_calls = threads``, always uses the pool."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from delayq import errors
from delayq.api import runner
from delayq.api.runner import Runner
from delayq.broker import Broker
from delayq.storage.sqlite.driver import Driver
from delayq.validation import Limits


@pytest.fixture
def broker(tmp_path):
    driver = Driver(str(tmp_path / "runner.sqlite"))
    yield Broker(driver, Limits())
    driver.close()


def thread_of_calls(run: Runner, *work) -> list[bool]:
    """For each callable in *work*, run through *run*: whether it ran on the loop's
    thread."""
    async def main() -> list[bool]:
        loop_thread = threading.get_ident()
        on_loop = []
        for fn in work:
            def call(fn=fn) -> None:
                on_loop.append(threading.get_ident() == loop_thread)
                fn()
            with contextlib.suppress(errors.StorageUnavailable):
                await run(call)
        return on_loop
    return asyncio.run(main())


def test_brief_calls_run_on_the_event_loop(broker):
    run = Runner(broker)
    assert broker.driver.calls_are_brief
    assert thread_of_calls(run, *[lambda: None] * 3) == [True, True, True]


def test_a_slow_call_sends_the_next_ones_to_threads_for_a_while(broker, monkeypatch):
    run = Runner(broker)
    slow = lambda: time.sleep(runner.SLOW_CALL + 0.02)  # noqa: E731
    assert thread_of_calls(run, slow, lambda: None) == [True, False]
    monkeypatch.setattr(runner, "THREADS_AFTER_SLOW", 0.0)
    run = Runner(broker)
    assert thread_of_calls(run, slow, lambda: None) == [True, True]


def test_an_unavailable_store_sends_the_next_calls_to_threads(broker):
    def unavailable() -> None:
        raise errors.StorageUnavailable("down", store="sqlite")
    run = Runner(broker)
    assert thread_of_calls(run, unavailable, lambda: None) == [True, False]


def test_threads_mode_and_drivers_without_brief_calls_use_the_pool(broker, monkeypatch):
    assert thread_of_calls(Runner(broker, mode="threads"), lambda: None) == [False]
    monkeypatch.setattr(type(broker.driver), "calls_are_brief", False)
    assert thread_of_calls(Runner(broker), lambda: None) == [False]
    assert thread_of_calls(Runner(broker, mode="inline"), lambda: None) == [True]


def test_inline_mode_stays_inline_after_a_slow_call(broker):
    run = Runner(broker, mode="inline")
    slow = lambda: time.sleep(runner.SLOW_CALL + 0.02)  # noqa: E731
    assert thread_of_calls(run, slow, lambda: None) == [True, True]


def test_an_unknown_mode_is_refused(broker):
    with pytest.raises(ValueError, match="storage_calls"):
        Runner(broker, mode="fast")
