"""Work done in child processes by the concurrency tests (importable for spawn)."""

from __future__ import annotations

import traceback

from delayq.broker import Broker
from delayq.synchronous import Synchronous
from delayq.validation import Limits
from tests.contract.drivers import DriverSpec, open_driver
from tests.contract.helpers import PROJECT


def claim_until_empty(spec: DriverSpec, queue: str, barrier, results, limit: int = 5) -> None:
    """Claim (ttl one hour) until nothing is left; report every id claimed.

    A failing claim is reported instead, as its traceback (a string).
    """
    driver = Synchronous(open_driver(spec))
    broker = Synchronous(Broker(driver.target, Limits()))
    barrier.wait(timeout=60)
    got: list[str] = []
    try:
        while True:
            claim = broker.claim(PROJECT, queue, ttl=3600, grace=60, limit=limit)
            if claim is None:
                break
            got.extend(m.id for m in claim.messages)
    except Exception:
        results.put(traceback.format_exc())
        raise
    finally:
        driver.close()
    results.put(got)


def claim_and_release_forever(spec: DriverSpec, queue: str, working) -> None:
    """Claim and release in a loop, so each claim dead-letters what it finds.

    Sets *working* once the first claim is done; runs until killed.
    """
    driver = Synchronous(open_driver(spec))
    broker = Synchronous(Broker(driver.target, Limits()))
    while True:
        claim = broker.claim(PROJECT, queue, ttl=60, grace=60, limit=3)
        if claim is not None:
            broker.release_claim(PROJECT, queue, claim.id)
        working.set()
