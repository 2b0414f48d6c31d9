"""``delayq.steps``: one generator, driven blocking or awaited on a loop, gives the same
results and sees the same exceptions at the same place."""

from __future__ import annotations

import asyncio

import pytest

from delayq import errors, steps


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


def test_called_steps_make_their_one_call_when_they_run():
    calls = []

    def store(value, *, twice):
        calls.append(value)
        return value * 2 if twice else value

    made = steps.called(store, 21, twice=True)
    assert calls == []  # making the steps ran nothing
    assert steps.drive(made) == 42
    assert asyncio.run(steps.on_loop(steps.called(store, 5, twice=False))) == 5
    assert calls == [21, 5]


def test_storage_unavailable_on_the_loop_is_reported_before_it_is_raised():
    reported = []

    def down():
        raise errors.StorageUnavailable("down", store="sqlite")
        yield  # steps

    with pytest.raises(errors.StorageUnavailable):
        asyncio.run(steps.on_loop(down(), lambda: reported.append("unavailable")))
    with pytest.raises(KeyError):
        asyncio.run(steps.on_loop(steps.called({}.__getitem__, "x"),
                                  lambda: reported.append("unavailable")))
    assert reported == ["unavailable"]  # once: a KeyError is no unavailable store


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
