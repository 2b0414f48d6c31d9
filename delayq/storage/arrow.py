"""The audits' bulk reads as Arrow record batches (``base.Trail.event_batches``).

Only the audits read these, in processes that have pyarrow (the ``spark`` extra); the
service never imports this module.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

import pyarrow as pa

# Rows per record batch: large enough that building a batch costs little per row, small
# enough that a reader holds a few megabytes at a time.
BATCH_ROWS = 16384


def record_batches(rows: Iterable[tuple], schema: pa.Schema,
                   size: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """*rows* (tuples of *schema*'s column values) as Arrow record batches of *size* rows.

    Each chunk is turned into columns (``zip``) and pyarrow builds each column from
    them in C, a fifth faster than building structs from the tuples; an int time or due
    becomes a double as the schema says.
    """
    rows = iter(rows)
    while chunk := list(itertools.islice(rows, size)):
        columns = zip(*chunk, strict=True)
        yield pa.RecordBatch.from_arrays(
            [pa.array(column, type=field.type)
             for column, field in zip(columns, schema, strict=True)], schema=schema)


def conformed(batches: Iterable[pa.RecordBatch], schema: pa.Schema
              ) -> Iterator[pa.RecordBatch]:
    """*batches*, whose columns have *schema*'s names and types in its order, labelled
    with *schema* itself (its field nullability included), as a reader must hand them."""
    for batch in batches:
        yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)
