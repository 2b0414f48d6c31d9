"""Retry policies: how long a message waits after a failed delivery, attempt by attempt.

A policy is Zaqar's ``_retry_policy`` document, set as queue metadata or as a
subscription option. Its phases, in order, give the wait after each failed attempt:
``retries_with_no_delay`` waits of 0 s, ``minimum_delay_retries`` waits of
``minimum_delay``, the waits of ``retry_backoff_function`` rising from ``minimum_delay``
towards ``maximum_delay`` in steps of ``LINEAR_INTERVAL``, then ``maximum_delay_retries``
waits of ``maximum_delay``. After the last phase every further attempt waits
``maximum_delay``: a message keeps coming back until a claim dead-letters it
(``_max_claim_count``) or it expires.

An attempt is a claim that returned the message (its ``claim_count`` then): a push that
failed, or a consumer's claim that was released or expired without deleting it. The wait
runs from the failure: from the release, from the claim's expiry, or from a push's
failed answer.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

from delayq.errors import ValidationError

RETRY_POLICY = "_retry_policy"

RETRIES_WITH_NO_DELAY = "retries_with_no_delay"
MINIMUM_DELAY_RETRIES = "minimum_delay_retries"
MINIMUM_DELAY = "minimum_delay"
MAXIMUM_DELAY = "maximum_delay"
MAXIMUM_DELAY_RETRIES = "maximum_delay_retries"
RETRY_BACKOFF_FUNCTION = "retry_backoff_function"
IGNORE_SUBSCRIPTION_OVERRIDE = "ignore_subscription_override"

LINEAR, ARITHMETIC, GEOMETRIC, EXPONENTIAL = FUNCTIONS = (
    "linear", "arithmetic", "geometric", "exponential")
# Zaqar's defaults, for a key a policy leaves out.
DEFAULTS: dict[str, Any] = {
    RETRIES_WITH_NO_DELAY: 3,
    MINIMUM_DELAY_RETRIES: 3,
    MINIMUM_DELAY: 5,
    MAXIMUM_DELAY: 30,
    MAXIMUM_DELAY_RETRIES: 3,
    RETRY_BACKOFF_FUNCTION: LINEAR,
    IGNORE_SUBSCRIPTION_OVERRIDE: False,
}
COUNTS = (RETRIES_WITH_NO_DELAY, MINIMUM_DELAY_RETRIES, MAXIMUM_DELAY_RETRIES)
# Seconds between the backoff phase's steps, as in Zaqar; maximum_delay must be at
# least two of them above minimum_delay.
LINEAR_INTERVAL = 5
# Most attempts one phase may count: the waits of every attempt a policy names are
# handed to the store with each claim. A backoff phase that would take more steps of
# LINEAR_INTERVAL (maximum_delay more than 500 s above minimum_delay) spreads its rise
# over this many.
MAX_PHASE_RETRIES = 100
MAX_BACKOFF_STEPS = 100


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A checked ``_retry_policy``, every key present."""

    retries_with_no_delay: int
    minimum_delay_retries: int
    minimum_delay: int
    maximum_delay: int
    maximum_delay_retries: int
    retry_backoff_function: str
    ignore_subscription_override: bool

    def delays(self) -> tuple[int, ...]:
        """The wait, in seconds, after each failed attempt (1, 2, ...); attempts past
        the end wait as the last one."""
        rising = _BACKOFF[self.retry_backoff_function](self.minimum_delay,
                                                       self.maximum_delay)
        return ((0,) * self.retries_with_no_delay
                + (self.minimum_delay,) * self.minimum_delay_retries
                + tuple(rising)
                + (self.maximum_delay,) * self.maximum_delay_retries
                + (self.maximum_delay,))


def _linear(low: int, high: int) -> list[int]:
    if _steps(low, high) < MAX_BACKOFF_STEPS:
        return list(range(low, high, LINEAR_INTERVAL))
    n = MAX_BACKOFF_STEPS
    return [low + (high - low) * a // n for a in range(n)]


def _steps(low: int, high: int) -> int:
    """The backoff phase's steps: Zaqar's, one per ``LINEAR_INTERVAL``, at most
    ``MAX_BACKOFF_STEPS``."""
    return min((high - low) // LINEAR_INTERVAL, MAX_BACKOFF_STEPS)


def _arithmetic(low: int, high: int) -> list[int]:
    # Waits growing by an arithmetic progression of increments, from low to high.
    n = _steps(low, high)
    step = 2.0 * (high - low) / (n * (n - 1))
    return [int(low + (a - 1) * a * step / 2) for a in range(1, n + 1)]


def _ratio(low: int, high: int, n: int) -> float:
    return math.pow(10, math.log10(high / low) / (n - 1))


def _geometric(low: int, high: int) -> list[int]:
    n = _steps(low, high)
    k = _ratio(low, high, n)
    return [int(low * math.pow(k, a - 1)) for a in range(1, n + 1)]


def _exponential(low: int, high: int) -> list[int]:
    n = _steps(low, high)
    k = _ratio(low, high, n)
    base = low / k
    return [int(base * math.pow(k, a)) for a in range(1, n + 1)]


_BACKOFF: dict[str, Callable[[int, int], list[int]]] = {
    LINEAR: _linear, ARITHMETIC: _arithmetic, GEOMETRIC: _geometric,
    EXPONENTIAL: _exponential,
}


def parse(document: Any, where: str, max_delay: int) -> RetryPolicy:
    """*document*, a ``_retry_policy`` found at *where*, checked; ValidationError (400)
    naming the key otherwise. No wait may pass *max_delay* (``max_message_delay``)."""
    if not isinstance(document, dict):
        raise ValidationError(f"{where} must be a JSON object.")
    unknown = sorted(set(document) - set(DEFAULTS))
    if unknown:
        raise ValidationError(f"{where} has unknown keys: {', '.join(unknown)[:200]} "
                              f"(known: {', '.join(DEFAULTS)}).")
    values = {**DEFAULTS, **document}
    for key in (*COUNTS, MINIMUM_DELAY, MAXIMUM_DELAY):
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValidationError(f"{where}.{key} must be an integer of 0 or more; got "
                                  f"{json.dumps(value)[:60]}.")
    for key in COUNTS:
        if values[key] > MAX_PHASE_RETRIES:
            raise ValidationError(f"{where}.{key} must be at most {MAX_PHASE_RETRIES}.")
    function = values[RETRY_BACKOFF_FUNCTION]
    if function not in FUNCTIONS:
        raise ValidationError(f"{where}.{RETRY_BACKOFF_FUNCTION} must be one of "
                              f"{', '.join(FUNCTIONS)}; got {json.dumps(function)[:60]}.")
    if not isinstance(values[IGNORE_SUBSCRIPTION_OVERRIDE], bool):
        raise ValidationError(f"{where}.{IGNORE_SUBSCRIPTION_OVERRIDE} must be true or "
                              "false.")
    low, high = values[MINIMUM_DELAY], values[MAXIMUM_DELAY]
    if high - low < 2 * LINEAR_INTERVAL:
        raise ValidationError(f"{where}.{MAXIMUM_DELAY} must be at least "
                              f"{2 * LINEAR_INTERVAL} more than {MINIMUM_DELAY}.")
    if high > max_delay:
        raise ValidationError(f"{where}.{MAXIMUM_DELAY} must be at most {max_delay} "
                              "(max_message_delay).")
    if function in (GEOMETRIC, EXPONENTIAL) and low < 1:
        raise ValidationError(f"{where}.{MINIMUM_DELAY} must be at least 1 for a "
                              f"{function} backoff.")
    return RetryPolicy(**values)


@dataclass(frozen=True, slots=True)
class Backoff:
    """The waits a store applies to a queue's messages after failed attempts.

    ``delays[n - 1]`` is the wait after attempt *n*, the last one for every attempt
    past the end. From attempt ``dead_letter_at`` (the queue's ``_max_claim_count``) on
    there is no wait: the next claim moves the message to the dead-letter queue, and
    it should not wait for that.
    """

    delays: tuple[int, ...]
    dead_letter_at: int | None = None

    def after(self, attempt: int) -> int:
        """Seconds a message waits after its failed attempt *attempt* (1 or more)."""
        if self.dead_letter_at is not None and attempt >= self.dead_letter_at:
            return 0
        return self.delays[min(attempt, len(self.delays)) - 1]


@functools.lru_cache(maxsize=1024)  # a queue's claims all ask for the same one
def _backoff(policy_json: str, dead_letter_at: int | None) -> Backoff:
    policy = RetryPolicy(**{**DEFAULTS, **json.loads(policy_json)})
    return Backoff(_trimmed(policy.delays()), dead_letter_at)


def _trimmed(delays: tuple[int, ...]) -> tuple[int, ...]:
    """*delays* without the repeats of its last value at its end (the last one
    repeats anyway)."""
    end = len(delays)
    while end > 1 and delays[end - 2] == delays[-1]:
        end -= 1
    return delays[:end]


@overload
def backoff(policy: dict[str, Any], dead_letter_at: int | None) -> Backoff: ...


@overload
def backoff(policy: dict[str, Any] | None, dead_letter_at: int | None) -> Backoff | None: ...


def backoff(policy: dict[str, Any] | None, dead_letter_at: int | None) -> Backoff | None:
    """The Backoff of a stored (checked) *policy*, or None without one."""
    if policy is None:
        return None
    return _backoff(json.dumps(policy, sort_keys=True), dead_letter_at)


def effective(queue_policy: dict[str, Any] | None,
              subscription_policy: dict[str, Any] | None) -> dict[str, Any]:
    """The policy a push follows: the subscription's, unless either policy sets
    ``ignore_subscription_override`` (then the queue's), else the queue's; Zaqar's
    defaults when neither has one."""
    queue_policy = queue_policy or {}
    subscription_policy = subscription_policy or {}
    if (queue_policy.get(IGNORE_SUBSCRIPTION_OVERRIDE)
            or subscription_policy.get(IGNORE_SUBSCRIPTION_OVERRIDE)):
        return queue_policy
    return subscription_policy or queue_policy
