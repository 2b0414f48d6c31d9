"""The keys and scalar values of message bodies, for the dead-letter audit's top lists.

A body's keys are dotted paths into nested objects (``{"order": {"kind": "refund"}}``
has the keys ``order`` and ``order.kind``); arrays are values, their elements are not
walked. Each key whose value is a scalar (string, number, boolean, null) also yields a
``(key, value)`` pair, the value written as compact JSON text by Spark (``"refund"``
with its quotes, ``7``, ``true``, ``null``; numbers in their shortest exact form, so
``2.50`` is ``2.5``). A body that is not a JSON object has the single key ``ROOT`` (the
empty string), with the body as its value when it is a scalar; text that is not JSON is
taken as the string it is.

Bodies are parsed by Spark into variants (``try_parse_json``) and walked down DEPTH levels
of nesting in one query; the caller walks again, twice as deep, in the rare case that
objects were left deeper.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

ROOT = ""
SEPARATOR = "."
OBJECT = "map<string,variant>"
# Levels of nesting a first walk goes down: bodies seldom nest deeper, so the query that
# counts the keys usually finds that nothing is left to walk.
DEPTH = 4


def _members(value: Column) -> Column:
    """The members of a variant object as a map; null for any other value."""
    return value.try_cast(OBJECT)


def _scalar_text(value: Column) -> Column:
    """A variant as JSON text when it is a scalar; null for objects and arrays."""
    text = F.to_json(value)
    return F.when(~F.substring(text, 1, 1).isin("{", "["), text)


@dataclass(frozen=True, slots=True)
class Walk:
    """The pairs of a walk ``depth`` levels deep, and the objects it left unwalked."""

    pairs: DataFrame  # *keys, key, value
    deeper: DataFrame  # one row per object nested deeper than depth


@contextmanager
def key_values(bodies: DataFrame, keys: Sequence[str], depth: int = DEPTH) -> Iterator[Walk]:
    """Every ``(key, value)`` of the bodies of *bodies* (a DataFrame with the columns
    *keys* and ``body``, JSON text) down to *depth* levels of nesting, with the *keys* of
    the row the body came from: columns ``*keys, key, value`` (value null where the key
    holds an object or array). Objects nested deeper are left in ``Walk.deeper``: the
    caller walks again, deeper, when it is not empty.

    No body (a driver that did not record it) has no keys. The parsed bodies and the
    pairs are kept for the queries of the block, and released when it ends.
    """
    parsed = bodies.where(F.col("body").isNotNull()).select(
        *keys, F.coalesce(F.try_parse_json("body"), F.col("body").cast("variant")).alias("v"))
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        found = [parsed.where(_members(F.col("v")).isNull()).select(
            *keys, F.lit(ROOT).alias("key"), _scalar_text(F.col("v")).alias("value"))]
        level = parsed.select(*keys, F.lit(ROOT).alias("prefix"),
                              _members(F.col("v")).alias("members"))
        for _ in range(depth):
            entries = level.where(F.col("members").isNotNull()).select(
                *keys, "prefix", F.explode("members").alias("name", "v")).select(
                *keys, F.concat("prefix", "name").alias("key"), "v")
            found.append(entries.select(*keys, "key", _scalar_text(F.col("v")).alias("value")))
            level = entries.select(*keys, F.concat("key", F.lit(SEPARATOR)).alias("prefix"),
                                   _members(F.col("v")).alias("members"))
        pairs = found[0]
        for more in found[1:]:
            pairs = pairs.unionByName(more)
        pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            yield Walk(pairs, level.where(F.col("members").isNotNull()))
        finally:
            pairs.unpersist()
    finally:
        parsed.unpersist()
