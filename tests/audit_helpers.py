"""Helpers of the audit tests (tests/test_audit_*.py): expected figures worked out without
Spark, and checks of the outputs ``delayq-audit`` writes.

``dist`` is the contract's percentile rule written out plainly: p of sorted x[0..n-1] is
x[i] + (x[i+1] - x[i]) * f where i + f = p * (n - 1), rounded to 6 decimals.
"""

from __future__ import annotations

import json
import math
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

AUDIT_SCRIPT = Path(sys.executable).parent / "delayq-audit"

DELAY_FIELDS = ("project", "queue", "messages", "delayed", "delay_seconds", "delivered",
                "lateness_seconds", "early_deliveries", "early_delivery_ids",
                "expired_before_due", "waiting")
DEAD_LETTER_FIELDS = ("project", "queue", "source", "moved", "moved_messages", "received",
                      "dead_letter_rate", "claim_count", "time_in_dlq_seconds", "left",
                      "still_in_dlq", "endings", "latest_moved_ids", "top_keys",
                      "top_values")


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between the two closest ranks (numpy's default)."""
    x = sorted(values)
    rank = p * (len(x) - 1)
    i = math.floor(rank)
    f = rank - i
    if i + 1 >= len(x):
        return float(x[i])
    return x[i] + (x[i + 1] - x[i]) * f


def dist(values: list[float]) -> dict[str, float] | None:
    """{p50, p90, p99, max} of *values* as the audit reports them; None for no values."""
    if not values:
        return None
    return {"p50": round(percentile(values, 0.5), 6), "p90": round(percentile(values, 0.9), 6),
            "p99": round(percentile(values, 0.99), 6), "max": round(float(max(values)), 6)}


def claim_counts(counts: list[int]) -> dict[str, Any]:
    """The dead-letter audit's claim_count figure for these counts at the move."""
    histogram: dict[str, int] = {}
    for count in counts:
        histogram[str(count)] = histogram.get(str(count), 0) + 1
    return {"histogram": histogram, "p50": round(percentile(counts, 0.5), 6),
            "max": max(counts)}


def delay_row(project: str, queue: str, *, messages: int, delays: list[float] = (),
              lateness: list[float] = (), expired_before_due: int = 0,
              waiting: int = 0) -> dict[str, Any]:
    """One expected delay-audit row; *delays* of the delayed messages, *lateness* of the
    delivered ones."""
    return {"project": project, "queue": queue, "messages": messages,
            "delayed": len(delays), "delay_seconds": dist(list(delays)),
            "delivered": len(lateness), "lateness_seconds": dist(list(lateness)),
            "early_deliveries": 0, "early_delivery_ids": [],
            "expired_before_due": expired_before_due, "waiting": waiting}


ENDINGS = ("deleted", "popped", "expired", "redriven", "dead_lettered", "purged")


def dead_letter_row(project: str, queue: str, source: str, *, counts: list[int],
                    times: list[float], top_keys: list[tuple[str, int]],
                    top_values: list[tuple[str, str, int]], received: int,
                    endings: dict[str, int], latest: list[str],
                    messages: int | None = None) -> dict[str, Any]:
    """One expected dead-letter-audit row: *counts* at each move, *times* in the DLQ of
    the moved messages that left it, *endings* how they left (kinds not given: 0),
    *received* by the source, *latest* moved ids; *messages* distinct ones moved
    (default: one per move)."""
    moved = len(counts)
    return {"project": project, "queue": queue, "source": source, "moved": moved,
            "moved_messages": moved if messages is None else messages,
            "received": received, "dead_letter_rate": round(moved / received, 6),
            "claim_count": claim_counts(counts), "time_in_dlq_seconds": dist(list(times)),
            "left": len(times), "still_in_dlq": moved - len(times),
            "endings": {kind: endings.get(kind, 0) for kind in ENDINGS},
            "latest_moved_ids": latest,
            "top_keys": [{"key": k, "count": n} for k, n in top_keys],
            "top_values": [{"key": k, "value": v, "count": n} for k, v, n in top_values]}


def rfc3339(text: str) -> float:
    """POSIX seconds of an RFC 3339 time (``Z`` or an offset; a zone is required)."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", text), text
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed.timestamp()


def load_audit(directory: Path) -> dict[str, Any]:
    path = directory / "audit.json"
    assert path.is_file(), f"no {path}; the output directory holds {sorted(directory.iterdir())}"
    return json.loads(path.read_text())


def rows(audit: dict[str, Any], section: str) -> list[dict[str, Any]]:
    return audit[section]["queues"]


def parquet_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a Spark-written Parquet directory, read with pyarrow (not Spark)."""
    import pyarrow.parquet as pq

    assert path.is_dir() or path.is_file(), f"no {path}"
    return pq.read_table(str(path)).to_pylist()


NOT_INLINE = r"""(?!["']?\s*(?:data:|#))"""
ASSET = re.compile(
    r"<script\b[^>]*\bsrc\s*=|<link\b[^>]*\bhref\s*=\s*" + NOT_INLINE
    + r"|<(?:img|image|iframe|embed|object|source|audio|video|use)\b[^>]*\b(?:src|href|data)"
    + r"\s*=\s*" + NOT_INLINE + r"|url\(\s*" + NOT_INLINE + r"|@import",
    re.IGNORECASE)


def check_report(path: Path, queues: list[str], raw_texts_never_shown: list[str] = ()
                 ) -> str:
    """report.html is a self-contained page with inline SVG naming every queue; returns it.

    Self-contained: no script, stylesheet, image or font is loaded from anywhere, remote
    or local (``data:`` URIs and in-page ``#`` references are fine; plain ``<a href>``
    links are not assets).
    """
    import html

    assert path.is_file(), f"no {path}"
    page = path.read_text(encoding="utf-8")
    assert "<svg" in page.lower()
    assert "<html" in page.lower()
    assets = [m.group(0) for m in ASSET.finditer(page)]
    assert assets == [], f"report.html loads assets: {assets[:5]}"
    for queue in queues:
        assert html.escape(queue) in page, f"queue {queue!r} is not in the report"
    for text in raw_texts_never_shown:  # shown escaped, if at all
        assert text not in page, f"{text!r} is in the report unescaped"
    return page
