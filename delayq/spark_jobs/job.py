"""One audit run: ask the store what to read, read the trail once, run the audits.

``make_plan`` talks to the store directly (from the machine running delayq-audit) before any
Spark work, so a wrong location, an unreachable store, an audit time the store has not
reached, or a scope that matches nothing fails fast with a clear message. ``run`` reads
the trail through the ``delayq`` data source and groups it per message in one Spark job
(``trail.Trail``), kept for the audits' queries, so every audit sees the same events and
the store is read once. With a state directory (``state``), the store is read only
after the state's watermark and the rest of the trail comes from the state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delayq.spark_jobs import (
    dead_letter_audit,
    delay_audit,
    output,
    scope,
    small_trail,
    source,
    state,
    store,
    trail,
)
from delayq.spark_jobs.output import DEAD_LETTER, DELAY
from delayq.spark_jobs.progress import Progress
from delayq.spark_jobs.store import StoreLocation, open_driver

RUNNERS = {DELAY: delay_audit.rows, DEAD_LETTER: dead_letter_audit.rows}
ROW_SCHEMAS = {DELAY: delay_audit.ROW_SCHEMA, DEAD_LETTER: dead_letter_audit.ROW_SCHEMA}
TITLES = {DELAY: "delay audit", DEAD_LETTER: "dead-letter audit"}
# Shuffle partitions per core of the session: the audits shuffle the trail once (grouped
# per message) and then only per-queue figures; Spark's default of 200 whatever the size
# costs more in task overhead than the work on a few cores.
SHUFFLE_PARTITIONS_PER_CORE = 2
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


@dataclass(frozen=True, slots=True)
class Request:
    """What the person asked for."""

    location: StoreLocation
    scope: scope.Scope
    audits: tuple[str, ...]
    as_of: float | None = None  # None: the store's clock when the audit starts
    partitions: int | None = None  # None: the session's default parallelism
    state: Path | None = None  # the state directory of incremental re-audits


@dataclass(frozen=True, slots=True)
class Plan:
    """What the store said before reading: its driver, the audit time, what to read."""

    driver: str
    as_of: float
    clock: float  # the store's clock when the plan was made
    read_queues: tuple[str, ...] | None  # None: every queue of the scope
    queue_count: int  # (project, queue) pairs the read covers
    missing: tuple[str, ...] = ()  # queues of --queues the store has no trail of
    nothing_audited: str | None = None  # why nothing is read, for people; None: read
    kept: state.State | None = None  # the --state directory
    saved: state.Saved | None = None  # what it held when the plan was made


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an audit found: the rows of each audit run and the events they came from;
    *nothing_audited* says why there are none, when no event was found."""

    rows: dict[str, list[dict[str, Any]]]
    events: int
    nothing_audited: str | None = None
    read_from_store: int | None = None  # events read from the store; None: all of them
    state: state.Saved | None = None  # the state written, with --state


def nothing(request: Request, reason: str) -> Outcome:
    """The outcome of an audit that found nothing to audit."""
    return Outcome({audit: [] for audit in request.audits}, 0, reason)


def make_plan(request: Request) -> Plan:
    """Open the store, take the audit time and list the queues to read.

    Raises ValueError for a bad location or an audit time later than the store's clock,
    StateError (a ValueError) for a --state directory of another store or project or of
    a newer format, StoreError when the store does not answer, NotImplementedError when
    its driver cannot read its trail. A scope that matches no queue gives a plan with
    ``nothing_audited``.
    """
    kept = (None if request.state is None else
            state.State(request.state, store.identity(request.location),
                        request.scope.project))
    saved = None if kept is None else kept.load()
    driver = open_driver(request.location)
    try:
        now = driver.now()
        if request.as_of is not None and request.as_of > now:
            raise ValueError(
                f"--as-of {output.rfc3339(request.as_of)} is later than the store's clock "
                f"({output.rfc3339(now)}): the audit would count as expired messages "
                "that have not expired yet")
        as_of = request.as_of if request.as_of is not None else now
        if request.state is not None:
            # A state holds the whole project's trail: --queues only picks the rows.
            read_queues = None
        else:
            sources = (scope.dead_letter_sources(driver, request.scope)
                       if DEAD_LETTER in request.audits else [])
            read_queues = scope.widened(request.scope.queues, sources)
        pairs = source.selected_pairs(driver, request.scope.project, read_queues)
    finally:
        driver.close()
    found = {queue for _, queue in pairs}
    listed = request.scope.queues or ()
    missing = tuple(queue for queue in listed if queue not in found)
    matched = bool(pairs) and (not listed or len(missing) < len(listed))
    return Plan(driver=driver.name, as_of=as_of, clock=now, read_queues=read_queues,
                queue_count=len(pairs), missing=missing,
                nothing_audited=None if matched else scope.nothing_matched(request.scope),
                kept=kept, saved=saved)


@contextmanager
def shuffle_partitions(spark: SparkSession, count: int) -> Iterator[None]:
    """Run the block with *count* shuffle partitions, then restore the session's own."""
    before = spark.conf.get(SHUFFLE_PARTITIONS)
    spark.conf.set(SHUFFLE_PARTITIONS, str(count))
    try:
        yield
    finally:
        if before is None:  # unset before (pyspark types get as Optional): unset again
            spark.conf.unset(SHUFFLE_PARTITIONS)
        else:
            spark.conf.set(SHUFFLE_PARTITIONS, before)


def _read(spark: SparkSession, request: Request, queues: tuple[str, ...] | None,
          partitions: int, after: float | None = None) -> DataFrame:
    """The events of *queues* (those later than *after*, when given): read here when
    they are few (``small_trail``), else through the data source in *partitions*."""
    small = small_trail.read(spark, request.location, request.scope.project, queues, after)
    if small is not None:
        return small
    source.register(spark)
    return source.read(spark, request.location, project=request.scope.project,
                       queues=queues, partitions=partitions, after=after)


def read_queues(spark: SparkSession, request: Request, plan: Plan, partitions: int,
                progress: Progress) -> tuple[str, ...] | None:
    """The queues whose trails the audits need: the plan's, and for the dead-letter
    audit with --queues the dead-letter queues those moved messages to (their stays are
    in their own trails; finding them reads the listed trails once more)."""
    if DEAD_LETTER not in request.audits or plan.read_queues is None:
        return plan.read_queues
    with progress.step("looking for the dead-letter queues the listed queues moved "
                       "messages to") as note:
        moves = trail.until(_read(spark, request, plan.read_queues, partitions), plan.as_of)
        targets = scope.move_targets(moves, plan.read_queues)
        note(", ".join(targets) or "none besides those listed")
    return scope.widened(plan.read_queues, targets)


def read_partitions(spark: SparkSession, request: Request, plan: Plan) -> int:
    """How many partitions read the store."""
    return request.partitions or source.default_parallelism(spark) or plan.queue_count or 1


def read_trail(spark: SparkSession, request: Request, plan: Plan,
               progress: Progress) -> tuple[trail.Trail, int]:
    """The trail the audits need as of the audit time, grouped and kept; with the
    number of events read."""
    partitions = read_partitions(spark, request, plan)
    queues = read_queues(spark, request, plan, partitions, progress)
    slices = max(1, min(partitions, plan.queue_count))
    with progress.step(f"reading the trail of {plan.queue_count} queue(s) in {slices} "
                       "partition(s) and grouping it per message") as note:
        events = _read(spark, request, queues, partitions)
        grouped = trail.Trail.of(events, plan.as_of).materialized()
        count = grouped.event_count()
        note(f"{count:,} events")
    return grouped, count


def held_events(partials: DataFrame) -> int:
    """How many events *partials* (``trail.partials``) hold."""
    total = partials.agg(F.sum("events")).first()
    assert total is not None  # an aggregate without grouping has one row, always
    return total[0] or 0


def read_incrementally(spark: SparkSession, request: Request, plan: Plan, kept: state.State,
                       saved: state.Saved | None, progress: Progress
                       ) -> tuple[trail.Trail, int, int, state.Saved]:
    """The trail as of the audit time from the state directory and the events of the
    store after its watermark, grouped and kept; with the number of events in it and
    of those read from the store, and the state written (``delayq.spark_jobs.state``).

    The events up to the new watermark go into the state as a new layer of their own;
    the few after it, up to the audit time, are merged in for this audit only.
    """
    partitions = read_partitions(spark, request, plan)
    since = None if saved is None else saved.watermark
    mark = state.watermark(plan.as_of, plan.clock)
    if since is not None:
        mark = max(mark, since)
    held_before = 0 if saved is None else saved.events
    start = "the whole trail" if since is None else f"the trail after {output.rfc3339(since)}"
    with progress.step(f"reading {start} of {plan.queue_count} queue(s), grouping it per "
                       f"message and keeping it in {request.state}") as note:
        fresh = trail.partials(trail.until(_read(spark, request, None, partitions, since),
                                           mark)).localCheckpoint(eager=True)
        added = held_events(fresh)
        if saved is None:
            layers = [kept.write(fresh, partitions)]
        elif added == 0:
            layers = saved.layers
        else:
            layers = [*saved.layers, kept.write(fresh, partitions)]
            if len(layers) > state.MAX_LAYERS:
                layers = [kept.write(kept.partials(spark, layers), partitions)]
        saved = kept.commit(layers, mark, held_before + added)
        note(f"{added:,} events added, {saved.events:,} held up to {output.rfc3339(mark)} "
             f"in {len(layers)} layer(s)")
    with progress.step("reading the trail after that from the store and grouping the "
                       "whole trail per message") as note:
        recent = trail.partials(trail.until(_read(spark, request, None, partitions, mark),
                                            plan.as_of))
        grouped = trail.Trail.of_partials(
            kept.partials(spark, saved.layers, recent), plan.as_of).materialized()
        count = grouped.event_count()
        note(f"{count:,} events, {count - held_before:,} of them read from the store")
    return grouped, count, count - held_before, saved


def run(spark: SparkSession, request: Request, plan: Plan, progress: Progress) -> Outcome:
    """The rows of each requested audit, or nothing when no event at or before the
    audit time was found."""
    cores = source.default_parallelism(spark) or 1
    read_from_store: int | None = None
    saved: state.Saved | None = None
    with shuffle_partitions(spark, max(2, cores * SHUFFLE_PARTITIONS_PER_CORE)):
        kept, previous = plan.kept, plan.saved
        if kept is not None and previous is not None and plan.as_of < previous.watermark:
            progress.say(f"--as-of is before the state's watermark "
                         f"({output.rfc3339(previous.watermark)}): reading the whole trail "
                         "and leaving the state as it is")
            kept = None
        if kept is None:
            grouped, count = read_trail(spark, request, plan, progress)
        else:
            grouped, count, read_from_store, saved = read_incrementally(
                spark, request, plan, kept, previous, progress)
        if count == 0:
            return nothing(request, f"no event at or before {output.rfc3339(plan.as_of)} "
                                    f"in the {plan.queue_count} queue(s) read")
        rows: dict[str, list[dict[str, Any]]] = {}
        for audit in request.audits:
            with progress.step(TITLES[audit]) as note:
                rows[audit] = RUNNERS[audit](grouped, request.scope.queues)
                note(f"{len(rows[audit])} row(s)")
    return Outcome(rows, count, read_from_store=read_from_store, state=saved)
