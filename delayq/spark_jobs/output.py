"""What delayq-audit writes into its output directory (docs/audits.md has the schema).

- ``audit.json``: ``generated_at``, ``as_of``, ``as_of_text``, ``source``, ``events``,
  ``nothing_audited``, ``missing_queues`` and a section per audit run (``delay``,
  ``dead_letter``), each ``{"queues": [row, ...]}``;
- ``delay.parquet/`` and ``dead_letter.parquet/``: the same rows, with each audit's
  ROW_SCHEMA (distributions as structs, the claim-count histogram a map);
- ``report.html``: see ``report``.

The rows are small (one per queue): Spark computes them, and this process writes them,
to JSON and with pyarrow to Parquet, so both always agree and land where the report
does.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from delayq.spark_jobs.scope import Scope

AUDIT_JSON = "audit.json"
REPORT_HTML = "report.html"
DELAY = "delay"
DEAD_LETTER = "dead_letter"
# The audits, in the order they run and appear in the outputs.
AUDITS = (DELAY, DEAD_LETTER)
PARQUET = {DELAY: "delay.parquet", DEAD_LETTER: "dead_letter.parquet"}
PARQUET_FILE = "part-00000.parquet"


def rfc3339(seconds: float) -> str:
    """POSIX *seconds* as an RFC 3339 UTC time: ``2026-05-09T07:35:25Z``, with
    microseconds when there are any."""
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    spec = "microseconds" if moment.microsecond else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def prepare(directory: str) -> Path:
    """The output directory as an absolute path, created if needed and checked
    writable; ValueError saying why when it cannot be one."""
    path = Path(directory).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--output {directory} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write into --output {directory}: {exc.strerror}") from exc
    return path


def document(*, as_of: float, driver: str, scope: Scope,
             rows: dict[str, list[dict[str, Any]]], generated_at: float, events: int = 0,
             nothing_audited: str | None = None, missing_queues: Sequence[str] = (),
             state: dict[str, Any] | None = None) -> dict[str, Any]:
    """The content of audit.json; *rows* maps each audit run to its rows (empty when
    *nothing_audited* says why nothing was); *state* says what a state directory held
    and what was read from the store (None: no state used)."""
    doc: dict[str, Any] = {
        "generated_at": rfc3339(generated_at),
        "as_of": as_of,
        "as_of_text": rfc3339(as_of),
        "source": {"driver": driver, "project": scope.project,
                   "queues": list(scope.queues) if scope.queues is not None else None},
        "events": events,
        "nothing_audited": nothing_audited,
        "missing_queues": list(missing_queues),
        "state": state,
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


def write_parquet(directory: Path, audit: str, rows: Sequence[dict[str, Any]],
                  schema: StructType) -> Path:
    """Write one audit's rows as a Parquet directory of one file, replacing an old one."""
    path = directory / PARQUET[audit]
    table = pa.Table.from_pylist(list(rows), schema=to_arrow_schema(schema))
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    pq.write_table(table, path / PARQUET_FILE)
    return path


def write_text(directory: Path, name: str, text: str) -> Path:
    """Write a UTF-8 text file of the outputs (the report)."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path
