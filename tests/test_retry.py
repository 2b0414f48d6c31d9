"""``delayq.retry``: Zaqar's ``_retry_policy`` turned into the wait after each attempt."""

from __future__ import annotations

import re

import pytest

from delayq import retry
from delayq.errors import ValidationError

MAX_DELAY = 900


def waits(policy: dict, attempts: int, dead_letter_at: int | None = None) -> list[int]:
    backoff = retry.backoff(retry.parse(policy, "p", MAX_DELAY) and policy, dead_letter_at)
    return [backoff.after(n) for n in range(1, attempts + 1)]


def test_zaqars_defaults_give_its_phases_then_the_maximum():
    # 3 retries at once, 3 after 5 s, linear 5..25 in steps of 5, 3 after 30 s, then 30.
    assert waits({}, 16) == [0, 0, 0, 5, 5, 5, 5, 10, 15, 20, 25, 30, 30, 30, 30, 30]


@pytest.mark.parametrize(("function", "rising"), [
    ("linear", list(range(10, 110, 5))),
    # Zaqar's formulas: each function rises from the minimum towards the maximum in
    # (maximum - minimum) / 5 steps.
    ("arithmetic", None),
    ("geometric", None),
    ("exponential", None),
])
def test_each_backoff_function_rises_from_minimum_to_maximum(function, rising):
    policy = {"retries_with_no_delay": 0, "minimum_delay_retries": 0,
              "maximum_delay_retries": 0, "minimum_delay": 10, "maximum_delay": 110,
              "retry_backoff_function": function}
    got = waits(policy, 25)
    steps = got[:20]
    assert steps[0] == 10 and all(a <= b for a, b in zip(steps, steps[1:], strict=False))
    assert all(10 <= w <= 110 for w in got)
    assert got[20:] == [110] * 5  # past the phases: the maximum
    if function == "linear":
        assert steps == rising
    else:
        assert steps[-1] >= 99  # the last step reaches (about) the maximum
        assert len(set(steps)) > 10  # and climbs through many values


def test_an_attempt_at_max_claim_count_waits_nothing():
    policy = {"retries_with_no_delay": 0, "minimum_delay": 20, "maximum_delay": 60}
    assert waits(policy, 4, dead_letter_at=3) == [20, 20, 0, 0]


@pytest.mark.parametrize(("policy", "named"), [
    ([], "must be a JSON object"),
    ({"minimum_delay": "5"}, "p.minimum_delay must be an integer"),
    ({"minimum_delay": -1}, "p.minimum_delay must be an integer of 0 or more"),
    ({"retries_with_no_delay": True}, "retries_with_no_delay must be an integer"),
    ({"maximum_delay_retries": 101}, "at most 100"),
    ({"retry_backoff_function": "cubic"}, "must be one of linear"),
    ({"ignore_subscription_override": "yes"}, "must be true or false"),
    ({"minimum_delay": 25, "maximum_delay": 30}, "at least 10 more than minimum_delay"),
    ({"maximum_delay": 901}, "at most 900 (max_message_delay)"),
    ({"minimum_delay": 0, "retry_backoff_function": "geometric"}, "at least 1"),
    ({"retries": 3}, "unknown keys: retries"),
])
def test_a_bad_policy_is_refused_naming_the_key(policy, named):
    with pytest.raises(ValidationError, match=re.escape(named)):
        retry.parse(policy, "p", MAX_DELAY)


def test_the_subscription_policy_wins_unless_either_says_to_ignore_it():
    queue = {"minimum_delay": 1, "maximum_delay": 20}
    mine = {"minimum_delay": 2, "maximum_delay": 30}
    assert retry.effective(queue, mine) == mine
    assert retry.effective(queue, None) == queue
    assert retry.effective(None, mine) == mine
    assert retry.effective(None, None) == {}
    assert retry.effective({**queue, "ignore_subscription_override": True}, mine) == {
        **queue, "ignore_subscription_override": True}
    assert retry.effective(queue, {**mine, "ignore_subscription_override": True}) == queue


@pytest.mark.parametrize("function", ["linear", "arithmetic", "geometric", "exponential"])
def test_a_long_rise_is_spread_over_a_hundred_steps(function):
    # A week's rise in steps of 5 s would be 120,960 waits, handed to the store with
    # every claim: it takes 100 steps instead, rising from the minimum to the maximum.
    policy = {"retries_with_no_delay": 0, "minimum_delay_retries": 0,
              "maximum_delay_retries": 0, "minimum_delay": 60, "maximum_delay": 604800,
              "retry_backoff_function": function}
    backoff = retry.backoff(retry.parse(policy, "p", 604800) and policy, None)
    assert len(backoff.delays) <= 101
    steps = [backoff.after(n) for n in range(1, 102)]
    assert steps[0] == 60 and steps[-1] == 604800
    assert all(a <= b for a, b in zip(steps, steps[1:], strict=False))
