"""What an audit covers: a project (or all), some queues (or all), and the trails it
must read to report their rows exactly.

``--queues`` names the queues whose rows are reported: delay rows of those queues, and
dead-letter rows whose dead-letter queue or source queue is one of them. A move is
recorded in its source queue's trail while the stay that follows is in the dead-letter
queue's, so the dead-letter audit reads more than the listed trails: the sources whose
current ``_dead_letter_queue`` names a listed queue (``dead_letter_sources``) and the
queues the listed ones moved messages to (``move_targets``, known once their trails are
read). A source queue deleted since, or whose policy changed, is only found when listed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from delayq import events as ev
from delayq.queue import DEAD_LETTER_QUEUE
from delayq.synchronous import Synchronous


@dataclass(frozen=True, slots=True)
class Scope:
    """A project (None: every project) and queue names (None: every queue)."""

    project: str | None = None
    queues: tuple[str, ...] | None = None


def dead_letter_sources(driver: Synchronous, scope: Scope) -> list[str]:
    """Unlisted queues of the scope's project(s) whose dead-letter policy names a listed
    queue, and the queues whose policy names one of those (the dead-letter rate of a
    source counts what it received, moves into it included), by their metadata now;
    none when every queue is read anyway."""
    if scope.queues is None:
        return []
    policies: dict[str, str] = {}
    for project, queue in driver.trail.queues(scope.project):
        target = (driver.queues.get(project, queue) or {}).get(DEAD_LETTER_QUEUE)
        if target is not None:
            policies[queue] = target
    listed = set(scope.queues)

    def sources_of(names: set[str]) -> set[str]:
        return {queue for queue, target in policies.items()
                if target in names and queue not in listed}

    found = sources_of(listed)
    return sorted(found | sources_of(found))


def nothing_matched(scope: Scope) -> str:
    """Why a scope that matched no queue audits nothing, for people."""
    where = f"project {scope.project!r}" if scope.project is not None else "the store"
    if scope.queues is not None:
        names = ", ".join(scope.queues)
        return f"none of the queues {names} has messages or events in {where}"
    return f"{where} has no queue with messages or events"


def move_targets(events: DataFrame, read: Collection[str]) -> list[str]:
    """The dead-letter queues that moves in *events* went to, among those not *read*."""
    targets = (events.where(F.col("kind") == F.lit(ev.DEAD_LETTERED))
               .select("target").distinct().collect())
    return sorted(r["target"] for r in targets if r["target"] not in read)


def widened(queues: Sequence[str] | None, extra: Sequence[str]) -> tuple[str, ...] | None:
    """*queues* and *extra*, in that order; None (every queue) stays None."""
    if queues is None:
        return None
    return tuple(dict.fromkeys([*queues, *extra]))
