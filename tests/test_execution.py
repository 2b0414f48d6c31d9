"""``delayq.api.execution.Execution``: where the API runs an operation.

A driver whose calls are brief round trips is called on the event loop (no thread
hand-off); a slow or failed call sends the next operations to the thread pool for a
while; a driver without brief calls, or ``storage_calls = threads``, always uses the
pool."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from delayq import errors
from delayq.api import execution
from delayq.api.execution import Execution
from delayq.operations import operation
from delayq.storage.sqlite.driver import Driver
from delayq.synchronous import Synchronous


@pytest.fixture
def driver(tmp_path):
    driver = Synchronous(Driver(str(tmp_path / "execution.sqlite")))
    yield driver
    driver.close()


class Work:
    """An operation running a given function, noting the thread it ran on."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    @operation
    def run(self, fn) -> None:
        self.threads.append(threading.get_ident())
        fn()


def thread_of_calls(execute: Execution, *work) -> list[bool]:
    """For each callable in *work*, run as an operation by *execute*: whether it ran on
    the loop's thread."""
    async def main() -> list[bool]:
        loop_thread = threading.get_ident()
        ran = Work()
        for fn in work:
            with contextlib.suppress(errors.StorageUnavailable):
                await execute(ran.run, fn)
        return [thread == loop_thread for thread in ran.threads]
    return asyncio.run(main())


def test_brief_calls_run_on_the_event_loop(driver):
    execute = Execution(driver)
    assert driver.calls_are_brief
    assert thread_of_calls(execute, *[lambda: None] * 3) == [True, True, True]


def test_a_slow_call_sends_the_next_ones_to_threads_for_a_while(driver, monkeypatch):
    execute = Execution(driver)
    slow = lambda: time.sleep(execution.SLOW_CALL + 0.02)  # noqa: E731
    assert thread_of_calls(execute, slow, lambda: None) == [True, False]
    monkeypatch.setattr(execution, "THREADS_AFTER_SLOW", 0.0)
    execute = Execution(driver)
    assert thread_of_calls(execute, slow, lambda: None) == [True, True]


def test_an_unavailable_store_sends_the_next_calls_to_threads(driver):
    def unavailable() -> None:
        raise errors.StorageUnavailable("down", store="sqlite")
    execute = Execution(driver)
    assert thread_of_calls(execute, unavailable, lambda: None) == [True, False]


def test_threads_mode_and_drivers_without_brief_calls_use_the_pool(driver, monkeypatch):
    assert thread_of_calls(Execution(driver, mode="threads"), lambda: None) == [False]
    monkeypatch.setattr(type(driver), "calls_are_brief", False)
    assert thread_of_calls(Execution(driver), lambda: None) == [False]
    assert thread_of_calls(Execution(driver, mode="inline"), lambda: None) == [True]


def test_inline_mode_stays_inline_after_a_slow_call(driver):
    execute = Execution(driver, mode="inline")
    slow = lambda: time.sleep(execution.SLOW_CALL + 0.02)  # noqa: E731
    assert thread_of_calls(execute, slow, lambda: None) == [True, True]


def test_an_unknown_mode_is_refused(driver):
    with pytest.raises(ValueError, match="storage_calls"):
        Execution(driver, mode="fast")
