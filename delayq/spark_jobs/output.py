"""What delayq-audit writes into its output directory (docs/audits.md has the schema).

- ``audit.json``: ``generated_at``, ``as_of``, ``as_of_text``, ``source`` and a section
  per audit run (``delay``, ``dead_letter``), each ``{"queues": [row, ...]}``;
- ``delay.parquet/`` and ``dead_letter.parquet/``: the same rows, written by Spark with
  each audit's ROW_SCHEMA (distributions as structs, the claim-count histogram a map);
- ``report.html``: see ``report``.

The rows are small (one per queue): Spark computes them, Python writes the JSON from the
collected rows, and Spark writes those same rows to Parquet, so both always agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from delayq.spark_jobs.scope import Scope

AUDIT_JSON = "audit.json"
REPORT_HTML = "report.html"
DELAY = "delay"
DEAD_LETTER = "dead_letter"
# The audits, in the order they run and appear in the outputs.
AUDITS = (DELAY, DEAD_LETTER)
PARQUET = {DELAY: "delay.parquet", DEAD_LETTER: "dead_letter.parquet"}


def rfc3339(seconds: float) -> str:
    """POSIX *seconds* as an RFC 3339 UTC time: ``2026-05-09T07:35:25Z``, with
    microseconds when there are any."""
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    spec = "microseconds" if moment.microsecond else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def check(directory: str) -> Path:
    """The output directory as an absolute path; ValueError when it cannot be one."""
    path = Path(directory).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--output {directory} exists and is not a directory")
    return path


def prepare(directory: str) -> Path:
    """The output directory, created if needed; ValueError when it cannot be one."""
    path = check(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create --output {directory}: {exc.strerror}") from exc
    return path


def document(*, as_of: float, driver: str, scope: Scope,
             rows: dict[str, list[dict[str, Any]]], generated_at: float) -> dict[str, Any]:
    """The content of audit.json; *rows* maps each audit run to its rows."""
    doc: dict[str, Any] = {
        "generated_at": rfc3339(generated_at),
        "as_of": as_of,
        "as_of_text": rfc3339(as_of),
        "source": {"driver": driver, "project": scope.project,
                   "queues": list(scope.queues) if scope.queues is not None else None},
    }
    for audit in AUDITS:
        if audit in rows:
            doc[audit] = {"queues": rows[audit]}
    return doc


def write_json(directory: Path, doc: dict[str, Any]) -> Path:
    """Write audit.json; non-ASCII text is escaped so any key a body had survives."""
    path = directory / AUDIT_JSON
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=True) + "\n", encoding="ascii")
    return path


def write_parquet(spark: SparkSession, directory: Path, audit: str,
                  rows: Sequence[dict[str, Any]], schema: StructType) -> Path:
    """Write one audit's rows as a Parquet directory (one file), replacing an old one.

    The path is a file:// URI: a bare path would be taken from the cluster's default
    filesystem (HDFS on YARN), not the directory the JSON and report are written to.
    """
    path = directory / PARQUET[audit]
    frame = spark.createDataFrame(list(rows), schema)
    frame.coalesce(1).write.mode("overwrite").parquet(path.as_uri())
    return path


def write_text(directory: Path, name: str, text: str) -> Path:
    """Write a UTF-8 text file of the outputs (the report)."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path
