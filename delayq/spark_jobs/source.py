"""The ``delayq`` PySpark Python Data Source: a store's event trail or live messages.

::

    from delayq.spark_jobs import source
    source.register(spark)
    events = (spark.read.format("delayq")
              .option("config_file", "/etc/delayq/delayq.conf")  # or .option("uri", ...)
              .option("project", "shop").option("queues", "orders,orders-dlq")
              .load())                                           # kind=events by default

Options: ``config_file`` or ``uri`` (exactly one), ``project``, ``queues`` (comma-separated
names), ``kind`` = ``events`` | ``messages``, ``after`` (events only: POSIX seconds; only
the events later than that are read from the store), ``partitions`` (default: the
session's default parallelism when registered with ``register``, else one per queue).

Planning lists the ``(project, queue)`` pairs with ``Trail.queues`` and deals them
round-robin into at most ``partitions`` input partitions, so a cluster reads queues in
parallel and no partition holds more than one queue more than another. Each partition
opens its own driver from the same location (executors may be other machines), hands
Spark its rows as Arrow record batches (``queue_batches``) and closes the driver when
they are read.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from delayq import errors, jsontext
from delayq.encryption import SEALED, BodyCipher, is_sealed
from delayq.events import FIELDS, Event, body_text
from delayq.message import Message
from delayq.spark_jobs.store import StoreLocation, body_cipher, open_driver
from delayq.storage.arrow import record_batches
from delayq.synchronous import Synchronous

FORMAT = "delayq"
EVENTS = "events"
MESSAGES = "messages"
KINDS = (EVENTS, MESSAGES)
_SPARK_TYPES: dict[type, DataType] = {str: StringType(), float: DoubleType(), int: LongType()}


def _field(name: str, hint: Any) -> StructField:
    """A Spark field for a dataclass field typed ``T`` or ``T | None``."""
    if isinstance(hint, types.UnionType):
        (inner,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
        return StructField(name, _SPARK_TYPES[inner], nullable=True)
    return StructField(name, _SPARK_TYPES[hint], nullable=False)


# One column per field of delayq.events.Event, so the schema follows the trail's own
# definition: times and due/expires as double POSIX seconds.
EVENT_SCHEMA = StructType([_field(name, hint)
                           for name, hint in typing.get_type_hints(Event).items()])

MESSAGE_SCHEMA = StructType([
    StructField("project", StringType(), False),
    StructField("queue", StringType(), False),
    StructField("message_id", StringType(), False),
    StructField("body", StringType(), False),  # JSON text
    StructField("ttl", LongType(), False),
    StructField("created", DoubleType(), False),
    StructField("due", DoubleType(), False),
    StructField("expires", DoubleType(), False),
    StructField("claim_id", StringType(), True),
    StructField("claim_expires", DoubleType(), True),
    StructField("claim_count", LongType(), False),
    StructField("source_queue", StringType(), True),
    StructField("moved_at", DoubleType(), True),
    StructField("as_of", DoubleType(), False),
])

SCHEMAS = {EVENTS: EVENT_SCHEMA, MESSAGES: MESSAGE_SCHEMA}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The data source's options, checked."""

    location: StoreLocation
    project: str | None = None
    queues: tuple[str, ...] | None = None
    kind: str = EVENTS
    partitions: int | None = None
    after: float | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Options as Spark passes them (strings); raises ValueError naming a bad one."""
        kind = options.get("kind") or EVENTS
        if kind not in KINDS:
            raise ValueError(f"delayq option kind must be one of {', '.join(KINDS)}, "
                             f"not {kind!r}")
        after = parse_after(options.get("after"))
        if after is not None and kind != EVENTS:
            raise ValueError(f"delayq option after applies to kind {EVENTS} only")
        return cls(location=StoreLocation.from_options(options),
                   project=options.get("project") or None,
                   queues=parse_queues(options.get("queues")),
                   kind=kind,
                   partitions=parse_partitions(options.get("partitions")),
                   after=after)


def parse_queues(text: str | None) -> tuple[str, ...] | None:
    """Comma-separated queue names, blanks and repeats dropped; None when none given."""
    if not text:
        return None
    names = [name.strip() for name in text.split(",")]
    unique = tuple(dict.fromkeys(name for name in names if name))
    if not unique:
        raise ValueError(f"queues names no queue: {text!r}")
    return unique


def parse_partitions(text: str | None) -> int | None:
    """A positive partition count, or None when not given."""
    if text is None or text == "":
        return None
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"partitions must be a positive integer, not {text!r}") from None
    if count < 1:
        raise ValueError(f"partitions must be a positive integer, not {count}")
    return count


def parse_after(text: str | None) -> float | None:
    """POSIX seconds (``repr`` of a float, so no precision is lost on the way), or None
    when not given."""
    if text is None or text == "":
        return None
    try:
        after = float(text)
    except ValueError:
        raise ValueError(f"after must be POSIX seconds, not {text!r}") from None
    if not math.isfinite(after):
        raise ValueError(f"after must be POSIX seconds, not {text!r}")
    return after


def format_queues(queues: Sequence[str]) -> str:
    """The ``queues`` option naming *queues*."""
    return ",".join(queues)


# Reading


@dataclass
class QueueSlice(InputPartition):
    """One input partition: the ``(project, queue)`` pairs one task reads, in order."""

    pairs: tuple[tuple[str, str], ...]


def selected_pairs(driver: Synchronous, project: str | None,
                   queues: Sequence[str] | None) -> list[tuple[str, str]]:
    """The ``(project, queue)`` pairs with a trail or messages, narrowed to *queues*."""
    pairs = driver.trail.queues(project)
    if queues is None:
        return list(pairs)
    wanted = set(queues)
    return [(p, q) for p, q in pairs if q in wanted]


def deal(pairs: Sequence[tuple[str, str]], partitions: int) -> list[QueueSlice]:
    """*pairs* dealt round-robin into at most *partitions* slices, at least one.

    The trail gives no cheap size per queue, so balance means equal numbers of queues;
    dealing (not chunking) spreads a project's neighbouring queues over the tasks.
    """
    count = max(1, min(partitions, len(pairs)))
    return [QueueSlice(tuple(pairs[i::count])) for i in range(count)]


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of *schema*'s rows, as Spark expects the batches of a reader."""
    return to_arrow_schema(schema)


# Where an event row holds its body (the JSON text of a dead-lettered message's body).
EVENT_BODY = FIELDS.index("body")


def opened_body(body: object, cipher: BodyCipher | None, message_id: str = "") -> object:
    """*body* with a sealed (encrypted) body opened; None, no body, when no key of
    *cipher* opens it, so the audits count it but show nothing of it (ciphertext is
    no body's keys)."""
    if not is_sealed(body):
        return body
    if cipher is None:
        return None
    try:
        return cipher.open(body, message_id)
    except errors.BodyUndecryptable:
        return None


def opened_body_text(text: str | None, cipher: BodyCipher | None) -> str | None:
    """An event's body text, opened when it is sealed (``opened_body``)."""
    # A substring test first: only a text naming SEALED may hold a sealed body (the
    # drivers write it with their own separators), and nearly none does.
    if text is None or SEALED not in text:
        return text
    body = opened_body(jsontext.loads(text), cipher)
    return None if body is None else body_text(body)


def opened_event_batch(batch: pa.RecordBatch, cipher: BodyCipher | None
                       ) -> pa.RecordBatch:
    """A batch of events with the sealed bodies among them opened (``opened_body_text``);
    the batch itself when none is sealed, as nearly none is."""
    bodies = batch.column(EVENT_BODY)
    if not pc.any(pc.match_substring(bodies, SEALED)).as_py():
        return batch
    opened = [opened_body_text(text, cipher) for text in bodies.to_pylist()]
    return batch.set_column(EVENT_BODY, batch.schema.field(EVENT_BODY),
                            pa.array(opened, type=pa.string()))


def message_values(project: str, queue: str, message: Message,
                   cipher: BodyCipher | None = None) -> tuple:
    """A live message as MESSAGE_SCHEMA's column values, its body opened when sealed."""
    body = opened_body(message.body, cipher, message.id)
    return (project, queue, message.id, body_text(body), message.ttl,
            message.created, message.due, message.expires, message.claim_id,
            message.claim_expires, message.claim_count, message.source_queue,
            message.moved_at, message.as_of)


def queue_batches(driver: Synchronous, kind: str, project: str, queue: str,
                  cipher: BodyCipher | None = None, after: float | None = None
                  ) -> Iterator[pa.RecordBatch]:
    """The rows of one queue as Arrow record batches of ``arrow_schema(SCHEMAS[kind])``:
    its events (those later than *after*, when given) or its live messages, encrypted
    bodies opened with *cipher*."""
    schema = arrow_schema(SCHEMAS[kind])
    if kind == EVENTS:
        return (opened_event_batch(batch, cipher) for batch in
                driver.trail.event_batches(project, queue, schema, after=after))
    return record_batches((message_values(project, queue, m, cipher)
                           for m in driver.trail.messages(project, queue)), schema)


class DelayqReader(DataSourceReader):
    """Plans the queue slices on the Spark driver and reads one slice per task."""

    def __init__(self, options: ReadOptions, default_partitions: int | None) -> None:
        self.options = options
        self.default_partitions = default_partitions

    def partitions(self) -> list[QueueSlice]:
        driver = open_driver(self.options.location)
        try:
            pairs = selected_pairs(driver, self.options.project, self.options.queues)
        finally:
            driver.close()
        wanted = self.options.partitions or self.default_partitions or len(pairs)
        return deal(pairs, wanted)

    # pyspark's stub takes any InputPartition; Spark hands read only those this
    # reader's partitions made, or None, which the stub leaves out.
    def read(self, partition: QueueSlice | None  # type: ignore[override]
             ) -> Iterator[pa.RecordBatch]:
        # Spark hands None to the one task of a reader that planned no partition.
        pairs = partition.pairs if partition is not None else ()
        if not pairs:
            return
        kind, after = self.options.kind, self.options.after
        cipher = body_cipher(self.options.location)
        driver = open_driver(self.options.location)
        try:
            for project, queue in pairs:
                yield from queue_batches(driver, kind, project, queue, cipher, after)
        finally:
            driver.close()


class DelayqDataSource(DataSource):
    """``spark.read.format("delayq")``: the event trail or the live messages of a store."""

    # Set by register() to the session's default parallelism: the data source runs in a
    # Python worker that cannot ask the session itself.
    default_partitions: int | None = None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMAS[ReadOptions.parse(self.options).kind]

    def reader(self, schema: StructType) -> DelayqReader:
        return DelayqReader(ReadOptions.parse(self.options), self.default_partitions)


def default_parallelism(spark: SparkSession) -> int | None:
    """The session's default parallelism; None where it is not known (Spark Connect)."""
    try:
        return spark.sparkContext.defaultParallelism
    except Exception:  # Spark Connect sessions have no SparkContext
        return None


def register(spark: SparkSession) -> None:
    """Register the ``delayq`` format on *spark*, partitions defaulting to its parallelism."""
    bound = type("SessionDelayqDataSource", (DelayqDataSource,),
                 {"default_partitions": default_parallelism(spark), "__module__": __name__})
    spark.dataSource.register(bound)


def read(spark: SparkSession, location: StoreLocation, *, kind: str = EVENTS,
         project: str | None = None, queues: Sequence[str] | None = None,
         partitions: int | None = None, after: float | None = None) -> DataFrame:
    """A DataFrame of the store's events (those later than *after*, when given) or
    messages; register() must have run.

    The schema is given, so Spark does not start a Python process to ask for it.
    """
    reader = (spark.read.format(FORMAT).schema(SCHEMAS[kind])
              .options(**location.as_options()).option("kind", kind))
    if project is not None:
        reader = reader.option("project", project)
    if queues is not None:
        reader = reader.option("queues", format_queues(queues))
    if partitions is not None:
        reader = reader.option("partitions", str(partitions))
    if after is not None:
        reader = reader.option("after", repr(after))
    return reader.load()
