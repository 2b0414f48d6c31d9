"""Distributions as the audits report them: exact percentiles and a maximum, rounded.

Percentiles are Spark's exact ``percentile()``: linear interpolation between the two
closest ranks, p of sorted x[0..n-1] = x[i] + (x[i+1] - x[i]) * f where i + f = p * (n - 1)
(numpy's default). Seconds are reported as floats rounded to ``DIGITS`` decimals; the
rounding happens once, in Python, on the collected per-queue figures.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StructField, StructType

DIGITS = 6
# (name in the output, percentage)
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
MAX = "max"

DISTRIBUTION_TYPE = StructType(
    [StructField(name, DoubleType(), False) for name, _ in PERCENTILES]
    + [StructField(MAX, DoubleType(), False)])


def distribution(values: Column) -> Column:
    """Aggregate: struct(p50, p90, p99, max) of the non-null *values*, null when none.

    Callers pass ``F.when(condition, value)`` to take a subset of a group's rows.
    """
    found = F.percentile(values.cast("double"), [p for _, p in PERCENTILES])
    fields = [found[i].alias(name) for i, (name, _) in enumerate(PERCENTILES)]
    return F.when(F.count(values) > 0,
                  F.struct(*fields, F.max(values).cast("double").alias(MAX)))


def median(values: Column) -> Column:
    """Aggregate: the exact median of the non-null *values* (null when none)."""
    return F.percentile(values.cast("double"), 0.5)


def rounded(seconds: float | None) -> float | None:
    """*seconds* as reported: a float rounded to DIGITS decimals."""
    return None if seconds is None else round(float(seconds), DIGITS)


def summary(collected: Any) -> dict[str, float | None] | None:
    """A collected ``distribution()`` as ``{"p50", "p90", "p99", "max"}``, rounded."""
    if collected is None:
        return None
    return {field.name: rounded(collected[field.name]) for field in DISTRIBUTION_TYPE.fields}
