"""One audit run: ask the store what to read, read the trail once, run the audits.

``make_plan`` talks to the store directly (from the machine running delayq-audit) before any
Spark work, so a wrong location or an unreachable store fails fast with a clear message.
``run`` reads the trail through the ``delayq`` data source, cut at the audit time and
persisted, so every audit sees the same events and the store is read once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from delayq.spark_jobs import dead_letter_audit, delay_audit, scope, source, trail
from delayq.spark_jobs.output import DEAD_LETTER, DELAY
from delayq.spark_jobs.progress import Progress
from delayq.spark_jobs.store import StoreLocation, open_driver

RUNNERS = {DELAY: delay_audit.run, DEAD_LETTER: dead_letter_audit.run}
ROW_SCHEMAS = {DELAY: delay_audit.ROW_SCHEMA, DEAD_LETTER: dead_letter_audit.ROW_SCHEMA}
TITLES = {DELAY: "delay audit", DEAD_LETTER: "dead-letter audit"}


@dataclass(frozen=True, slots=True)
class Request:
    """What the person asked for."""

    location: StoreLocation
    scope: scope.Scope
    audits: tuple[str, ...]
    as_of: float | None = None  # None: the store's clock when the audit starts
    partitions: int | None = None  # None: the session's default parallelism


@dataclass(frozen=True, slots=True)
class Plan:
    """What the store said before reading: its driver, the audit time, what to read."""

    driver: str
    as_of: float
    read_queues: tuple[str, ...] | None  # None: every queue of the scope
    queue_count: int  # (project, queue) pairs the read covers


def make_plan(request: Request) -> Plan:
    """Open the store, take the audit time and list the queues to read.

    Raises ValueError for a bad location, StoreError when the store does not answer,
    NotImplementedError when its driver cannot read its trail.
    """
    driver = open_driver(request.location)
    try:
        as_of = request.as_of if request.as_of is not None else driver.now()
        sources = (scope.dead_letter_sources(driver, request.scope)
                   if DEAD_LETTER in request.audits else [])
        read_queues = scope.widened(request.scope.queues, sources)
        pairs = source.selected_pairs(driver, request.scope.project, read_queues)
        return Plan(driver=driver.name, as_of=as_of, read_queues=read_queues,
                    queue_count=len(pairs))
    finally:
        driver.close()


def _read(spark: SparkSession, request: Request, as_of: float,
          queues: tuple[str, ...] | None, partitions: int) -> DataFrame:
    events = source.read(spark, request.location, project=request.scope.project,
                         queues=queues, partitions=partitions)
    return trail.until(events, as_of)


def read_trail(spark: SparkSession, request: Request, plan: Plan,
               progress: Progress) -> DataFrame:
    """The trail the audits need, at or before the audit time, persisted."""
    source.register(spark)
    partitions = (request.partitions or source.default_parallelism(spark)
                  or plan.queue_count or 1)
    slices = max(1, min(partitions, plan.queue_count))
    with progress.step(f"reading the trail of {plan.queue_count} queue(s) in "
                       f"{slices} partition(s)") as note:
        events = _read(spark, request, plan.as_of, plan.read_queues, partitions)
        events = events.persist(StorageLevel.MEMORY_AND_DISK)
        note(f"{events.count()} events")
    if DEAD_LETTER not in request.audits or plan.read_queues is None:
        return events
    # Stays in dead-letter queues that were not listed are in their own trails.
    targets = tuple(scope.move_targets(events, plan.read_queues))
    if not targets:
        return events
    with progress.step(f"reading the trail of dead-letter queue(s) {', '.join(targets)}"
                       ) as note:
        more = _read(spark, request, plan.as_of, targets, partitions)
        combined = events.unionByName(more).persist(StorageLevel.MEMORY_AND_DISK)
        note(f"{combined.count()} events in all")
    events.unpersist()
    return combined


def run(spark: SparkSession, request: Request, plan: Plan, progress: Progress
        ) -> dict[str, list[dict[str, Any]]]:
    """The rows of each requested audit."""
    events = read_trail(spark, request, plan, progress)
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        for audit in request.audits:
            with progress.step(TITLES[audit]) as note:
                rows[audit] = RUNNERS[audit](events, plan.as_of, request.scope.queues)
                note(f"{len(rows[audit])} row(s)")
    finally:
        events.unpersist()
    return rows
