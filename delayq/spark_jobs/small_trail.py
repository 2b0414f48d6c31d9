"""Fast path: a small trail read in this process instead of through the data source.

A trail of at most ``MAX_EVENTS`` events is read through the store's driver here, in the
process running the audit, and handed to Spark as a DataFrame of local Arrow data.
Reading it through the ``delayq`` data source would start four Python workers (one
looks up data sources when the format is registered, one creates the data source, one
plans its partitions, one reads them), each starting Python and importing pyspark,
pyarrow and the store's driver, one after the other: a few seconds of a run's wall time
for what the store returns in milliseconds. A larger
trail goes through the data source, whose readers run on the executors in parallel.
A session delayq-audit starts for a small trail runs its JVM with ``JAVA_OPTIONS``.

The rows are the ones the data source gives (``source.queue_batches``, sealed bodies
opened), in the same schema, so the audits' figures do not depend on the path taken.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from delayq.spark_jobs import source
from delayq.spark_jobs.store import StoreLocation, body_cipher, open_driver

# The data source's Python workers take several seconds to start, one after the other;
# the largest trail read here takes well under a second (SQLite's batches cost about
# 2.5 µs an event, other drivers' rows a few µs more). One event more and the whole
# trail is left to the data source, whose readers share the work over the cores.
MAX_EVENTS = 100_000
# For the JVM of a session that audits a small trail: its queries run once each on a
# few rows, so the C2 compiler's optimisations never pay back the CPU they take, which
# on a machine of few cores is the CPU the session's start and queries wait for.
JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1",)


def read_events(location: StoreLocation, project: str | None,
                queues: Sequence[str] | None, after: float | None = None
                ) -> pa.Table | None:
    """The events of the trail of *queues* (None: every queue) of *project* (None:
    every project), those later than *after* when given, as an Arrow table of
    ``source.EVENT_SCHEMA``; None when there are more than ``MAX_EVENTS``."""
    cipher = body_cipher(location)
    driver = open_driver(location)
    taken: list[pa.RecordBatch] = []
    count = 0
    try:
        for pair_project, queue in source.selected_pairs(driver, project, queues):
            for batch in source.queue_batches(driver, source.EVENTS, pair_project, queue,
                                              cipher, after):
                taken.append(batch)
                count += batch.num_rows
                if count > MAX_EVENTS:
                    return None
    finally:
        driver.close()
    return pa.Table.from_batches(taken, source.arrow_schema(source.EVENT_SCHEMA))


def fits(location: StoreLocation, project: str | None,
         queues: Sequence[str] | None) -> bool:
    """Whether the trail of *queues* of *project* is small enough to read here."""
    return read_events(location, project, queues) is not None


def events_frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    """*table* (``read_events``) as a DataFrame with the data source's event schema;
    Spark holds the rows itself, so reading them starts no Python worker."""
    return spark.createDataFrame(table, schema=source.EVENT_SCHEMA)


def read(spark: SparkSession, location: StoreLocation, project: str | None,
         queues: Sequence[str] | None, after: float | None = None) -> DataFrame | None:
    """The trail of *queues* of *project* (after *after*) as ``source.read`` gives it,
    read here; None when it holds more than ``MAX_EVENTS`` events (read it through the
    data source)."""
    table = read_events(location, project, queues, after)
    return None if table is None else events_frame(spark, table)
