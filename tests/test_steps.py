"""``delayq.steps``: one generator, driven blocking or awaited on a loop, gives the same
results and sees the same exceptions at the same place."""

from __future__ import annotations

import asyncio

import pytest

from delayq import steps


class Echo:
    """A store call for the tests: blocking, or awaited after a turn of the loop."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, *args):
        self.calls.append(args)
        if args and isinstance(args[0], Exception):
            raise args[0]
        return args

    async def on_loop(self, *args):
        await asyncio.sleep(0)  # a real wait: other tasks run here
        return self(*args)


def two_calls(echo: Echo, fail_second: bool = False) -> steps.Steps[list]:
    first = yield echo, 1, 2
    try:
        second = yield echo, (ValueError("refused") if fail_second else 3)
    except ValueError as exc:
        return [first, f"caught {exc}"]
    return [first, second]


def run_both(make) -> tuple:
    blocking = steps.drive(make())
    awaited = asyncio.run(steps.on_loop(make()))
    return blocking, awaited


def test_driven_and_awaited_steps_give_the_same_result():
    echo = Echo()
    assert run_both(lambda: two_calls(echo)) == ([(1, 2), (3,)], [(1, 2), (3,)])
    assert echo.calls == [(1, 2), (3,), (1, 2), (3,)]


def test_a_failed_call_raises_inside_the_steps_at_its_yield():
    echo = Echo()
    assert run_both(lambda: two_calls(echo, fail_second=True)) == (
        [(1, 2), "caught refused"], [(1, 2), "caught refused"])


def test_an_exception_the_steps_do_not_catch_reaches_the_caller():
    def unguarded():
        yield Echo(), KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        steps.drive(unguarded())
    with pytest.raises(KeyError, match="gone"):
        asyncio.run(steps.on_loop(unguarded()))


def test_finished_steps_wait_for_nothing():
    assert steps.drive(steps.finished("done")) == "done"
    assert asyncio.run(steps.on_loop(steps.finished(None))) is None


def test_cancelling_the_awaiting_task_raises_cancelled_error_at_the_yield():
    seen = []

    class Forever:
        async def on_loop(self):
            await asyncio.Event().wait()

    def waits():
        try:
            yield (Forever(),)
        except asyncio.CancelledError:
            seen.append("cancelled at the yield")
            raise

    async def main() -> None:
        task = asyncio.ensure_future(steps.on_loop(waits()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled at the yield"]


def test_drive_made_makes_the_steps_where_it_runs():
    echo = Echo()
    assert steps.drive_made(two_calls, (echo,), {}) == [(1, 2), (3,)]
