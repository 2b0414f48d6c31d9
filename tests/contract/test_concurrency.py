"""Claims under contention, across threads and processes, on every driver.

These run on the real clock: the processes share the backend, not a fake clock.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
from collections import Counter

from tests.contract.drivers import skip_unless_shared_across_processes
from tests.contract.helpers import PROJECT, claim, create, post
from tests.contract.workers import claim_and_release_forever, claim_until_empty

SPAWN = multiprocessing.get_context("spawn")
MESSAGES = 300  # per run (Swift: SWIFT_SHARE of it)
WORN_OUT = 200  # messages a dead-letter run moves (Swift: SWIFT_SHARE of it)
# A Swift request takes tens of milliseconds: its runs move fewer messages, with as many
# threads and processes, so they contend as hard for each.
SWIFT_SHARE = 0.4


def sized(spec, count: int) -> int:
    """*count* messages for *spec*'s driver, a multiple of 20 (posts go by 20)."""
    if spec.name == "swift":
        count = int(count * SWIFT_SHARE)
    return count - count % 20


def assert_each_exactly_once(claimed: list[str], posted: list[str]) -> None:
    duplicates = [mid for mid, n in Counter(claimed).items() if n > 1]
    assert duplicates == []
    assert sorted(claimed) == sorted(posted)


def claim_in_threads(broker, queue: str, threads: int) -> list[str]:
    """Every message id the claims of *threads* threads returned, each claiming until none.

    A claim that fails fails the test with its own error: a claimer that died quietly
    would only show up as messages missing from the result.
    """
    barrier = threading.Barrier(threads)
    found: list[list[str]] = [[] for _ in range(threads)]
    failures: list[BaseException] = []

    def work(slot: int) -> None:
        try:
            barrier.wait()
            while (result := claim(broker, queue, limit=3)) is not None:
                found[slot].extend(m.id for m in result.messages)
        except BaseException as exc:
            failures.append(exc)
            raise

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert not worker.is_alive(), "a claimer still runs after 120 s"
    if failures:
        raise failures[0]
    return [mid for ids in found for mid in ids]


def claim_in_processes(spec, queue: str, processes: int) -> list[str]:
    barrier = SPAWN.Barrier(processes)
    results = SPAWN.Queue()
    children = [SPAWN.Process(target=claim_until_empty, args=(spec, queue, barrier, results))
                for _ in range(processes)]
    for child in children:
        child.start()
    reports = [results.get(timeout=120) for _ in children]
    for report in reports:
        assert not isinstance(report, str), f"a claimer failed:\n{report}"
    found = [mid for ids in reports for mid in ids]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    return found


def test_concurrent_threads_never_share_a_message(live_broker, spec):
    posted = [mid for chunk in range(sized(spec, MESSAGES) // 20)
              for mid in post(live_broker, "q", *range(20))]
    assert_each_exactly_once(claim_in_threads(live_broker, "q", threads=8), posted)


def test_concurrent_processes_never_share_a_message(live_broker, spec):
    skip_unless_shared_across_processes(spec)
    posted = [mid for chunk in range(sized(spec, MESSAGES) // 20)
              for mid in post(live_broker, "q", *range(20))]
    assert_each_exactly_once(claim_in_processes(spec, "q", processes=4), posted)


def _worn_out_messages(broker, count: int) -> list[str]:
    """*count* messages in 'q' that the next claim must dead-letter.

    Each is claimed once and released: a second claim would already move them.
    """
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    posted = [mid for _ in range(count // 20) for mid in post(broker, "q", *range(20))]
    claims = []
    while (result := claim(broker, "q", limit=20)) is not None:
        claims.append(result.id)
    for claim_id in claims:
        broker.release_claim(PROJECT, "q", claim_id)
    assert broker.stats(PROJECT, "q").free == count
    assert broker.stats(PROJECT, "dlq").total == 0
    return posted


def assert_all_moved_once(broker, posted: list[str]) -> None:
    assert broker.stats(PROJECT, "q").total == 0
    assert broker.stats(PROJECT, "dlq").total == len(posted)
    moved = [m.id for i in range(0, len(posted), 50)
             for m in broker.get_messages(PROJECT, "dlq", posted[i:i + 50])]
    assert_each_exactly_once(moved, posted)
    assert {m.claim_count for m in broker.get_messages(PROJECT, "dlq", posted[:50])} == {1}


def test_dead_letter_move_under_concurrent_thread_claims_happens_once(live_broker, spec):
    posted = _worn_out_messages(live_broker, sized(spec, WORN_OUT))
    assert claim_in_threads(live_broker, "q", threads=8) == []
    assert_all_moved_once(live_broker, posted)


def test_dead_letter_move_under_concurrent_process_claims_happens_once(live_broker, spec):
    skip_unless_shared_across_processes(spec)
    posted = _worn_out_messages(live_broker, sized(spec, WORN_OUT))
    assert claim_in_processes(spec, "q", processes=4) == []
    assert_all_moved_once(live_broker, posted)


def test_killed_claimer_never_leaves_a_message_in_both_queues_or_neither(live_broker, spec):
    skip_unless_shared_across_processes(spec)
    rng = random.Random(7)
    interrupted = 0
    for round_ in range(5):
        source = f"q{round_}"
        create(live_broker, source, _max_claim_count=1, _dead_letter_queue="dlq")
        moved_before = live_broker.stats(PROJECT, "dlq").total
        posted = [mid for _ in range(sized(spec, MESSAGES) // 20)
                  for mid in post(live_broker, source, *range(20))]
        working = SPAWN.Event()
        child = SPAWN.Process(target=claim_and_release_forever, args=(spec, source, working))
        child.start()
        assert working.wait(timeout=60)
        # Kill once moves are under way (slower drivers take a while to get there).
        deadline = time.monotonic() + 60
        while (live_broker.stats(PROJECT, "dlq").total <= moved_before
               and time.monotonic() < deadline):
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.1))
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
        assert child.exitcode == -signal.SIGKILL

        def present(queue: str, ids: list[str] = posted) -> set[str]:
            return {m.id for i in range(0, len(ids), 50)
                    for m in live_broker.get_messages(PROJECT, queue, ids[i:i + 50])}

        in_source, in_target = present(source), present("dlq")
        assert not in_source & in_target
        assert in_source | in_target == set(posted)
        assert live_broker.stats(PROJECT, source).total == len(in_source)
        interrupted += bool(in_source and in_target)
    assert interrupted, "no kill landed while messages were moving; the test proved nothing"
