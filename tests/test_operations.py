"""``delayq.operations``: an operation written once, run blocking or awaited on a loop,
gives the same results and sees the same exceptions at the same place."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from delayq import errors
from delayq.operations import Steps, drive, on_loop, operation


@dataclass
class Echo:
    """A store call for the tests: its reply is its value, or its exception raised;
    awaited, after a turn of the loop."""

    value: object
    calls: list

    def wait(self) -> object:
        self.calls.append(self.value)
        if isinstance(self.value, Exception):
            raise self.value
        return self.value

    async def awaited(self) -> object:
        await asyncio.sleep(0)  # a real wait: other tasks run here
        return self.wait()


class Store:
    """Operations of both kinds, as a driver writes them."""

    def __init__(self) -> None:
        self.calls: list = []

    @operation
    def two_calls(self, fail_second: bool = False) -> Steps[list]:
        first = yield Echo((1, 2), self.calls)
        try:
            second = yield Echo(ValueError("refused") if fail_second else 3, self.calls)
        except ValueError as exc:
            return [first, f"caught {exc}"]
        return [first, second]

    @operation
    def plain(self, value: int, *, twice: bool) -> int:
        self.calls.append(value)
        return value * 2 if twice else value

    @operation
    def lookup(self, key: str) -> object:
        return {}[key]


def run_both(store: Store, *args, **kwargs) -> tuple:
    blocking = store.two_calls(*args, **kwargs)
    awaited = asyncio.run(on_loop(store.two_calls.steps(*args, **kwargs)))
    return blocking, awaited


def test_called_and_awaited_operations_give_the_same_result():
    store = Store()
    assert run_both(store) == ([(1, 2), 3], [(1, 2), 3])
    assert store.calls == [(1, 2), 3, (1, 2), 3]


def test_a_failed_call_raises_inside_the_steps_at_its_yield():
    assert run_both(Store(), fail_second=True) == (
        [(1, 2), "caught refused"], [(1, 2), "caught refused"])


def test_an_exception_the_steps_do_not_catch_reaches_the_caller():
    def unguarded():
        yield Echo(KeyError("gone"), [])

    with pytest.raises(KeyError, match="gone"):
        drive(unguarded())
    with pytest.raises(KeyError, match="gone"):
        asyncio.run(on_loop(unguarded()))


def test_a_plain_operation_makes_its_call_when_its_steps_run():
    store = Store()
    made = store.plain.steps(21, twice=True)
    assert store.calls == []  # making the steps ran nothing
    assert drive(made) == 42
    assert asyncio.run(on_loop(store.plain.steps(5, twice=False))) == 5
    assert store.plain(7, twice=True) == 14
    assert store.calls == [21, 5, 7]


def test_storage_unavailable_on_the_loop_is_reported_before_it_is_raised():
    reported = []

    def down():
        raise errors.StorageUnavailable("down", store="sqlite")
        yield  # steps

    with pytest.raises(errors.StorageUnavailable):
        asyncio.run(on_loop(down(), lambda: reported.append("unavailable")))
    with pytest.raises(KeyError):
        asyncio.run(on_loop(Store().lookup.steps("x"),
                            lambda: reported.append("unavailable")))
    assert reported == ["unavailable"]  # once: a KeyError is no unavailable store


def test_cancelling_the_awaiting_task_raises_cancelled_error_at_the_yield():
    seen = []

    class Forever:
        async def awaited(self):
            await asyncio.Event().wait()

    def waits():
        try:
            yield Forever()
        except asyncio.CancelledError:
            seen.append("cancelled at the yield")
            raise

    async def main() -> None:
        task = asyncio.ensure_future(on_loop(waits()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled at the yield"]


class Overriding(Store):
    """A subclass that overrides an operation and reaches the one it overrides."""

    @operation
    def plain(self, value: int, *, twice: bool) -> int:
        return 1000 + super().plain(value, twice=twice)


def test_an_overriding_operation_stays_in_force_after_reaching_the_overridden_one():
    store = Overriding()
    assert store.plain(1, twice=False) == 1001
    assert store.plain(2, twice=True) == 1004  # not the base operation, kept by super()
    assert store.calls == [1, 2]
