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
of nesting in one pass over the bodies; the caller walks again, twice as deep, in the
rare case that objects were left deeper.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
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
    """The pairs of a walk ``depth`` levels deep, and the bodies it did not finish."""

    pairs: DataFrame  # *keys, key, value
    deeper: DataFrame  # one row per body with objects nested deeper than depth


def _entry(key: Column, value: Column) -> Column:
    return F.struct(key.alias("key"), value.alias("v"))


def _is_object(entry: Column) -> Column:
    return _members(entry["v"]).isNotNull()


def _member_entries(value: Column, key: Callable[[Column], Column]) -> Column:
    """The members of the variant object *value* as entries, each keyed by
    ``key(member name)``."""
    return F.transform(F.map_entries(_members(value)),
                       lambda member: _entry(key(member["key"]), member["value"]))


def _children(level: Column) -> Column:
    """The members of the objects among *level*'s entries, one level down, their keys
    prefixed with their parent's."""
    return F.flatten(F.transform(F.filter(level, _is_object), lambda parent: _member_entries(
        parent["v"], lambda name: F.concat(parent["key"], F.lit(SEPARATOR), name))))


@contextmanager
def key_values(bodies: DataFrame, keys: Sequence[str], depth: int = DEPTH) -> Iterator[Walk]:
    """Every ``(key, value)`` of the bodies of *bodies* (a DataFrame with the columns
    *keys* and ``body``, JSON text) down to *depth* levels of nesting, with the *keys* of
    the row the body came from: columns ``*keys, key, value`` (value null where the key
    holds an object or array). Bodies with objects nested deeper are in ``Walk.deeper``:
    the caller walks again, deeper, when it is not empty.

    Each body's entries, level by level, are arrays on its own row (one column per
    level, so a level is built once), exploded once. No body (a driver that did not
    record it) has no keys. The pairs are kept for the queries of the block, and
    released when it ends.
    """
    parsed = bodies.where(F.col("body").isNotNull()).select(
        *keys, F.coalesce(F.try_parse_json("body"), F.col("body").cast("variant")).alias("v"))
    # A body that is not an object is one entry, ROOT; an object's first level is its
    # members.
    value = F.col("v")
    levels = parsed.select(*keys, F.when(
        _members(value).isNull(), F.array(_entry(F.lit(ROOT), value))).otherwise(
        _member_entries(value, lambda name: name)).alias("l1"))
    for level in range(2, depth + 1):
        levels = levels.select("*", _children(F.col(f"l{level - 1}")).alias(f"l{level}"))
    last = F.col(f"l{depth}")
    walked = levels.select(*keys, F.concat(*(F.col(f"l{n}") for n in range(1, depth + 1)))
                           .alias("entries"), F.exists(last, _is_object).alias("deeper"))
    pairs = walked.select(*keys, F.explode("entries").alias("e")).select(
        *keys, F.col("e.key").alias("key"), _scalar_text(F.col("e.v")).alias("value"))
    pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield Walk(pairs, walked.where("deeper"))
    finally:
        pairs.unpersist()
