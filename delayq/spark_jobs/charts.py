"""What report.html is drawn with: colours, numbers and durations for people, and inline
SVG charts (bars, a stacked bar, a histogram, a share bar). Every text drawn is
HTML-escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from delayq.spark_jobs.bodies import ROOT

GOOD, BAD, MAIN, WARN, MUTED, ALT = (
    "#1a7f37", "#cf222e", "#0969da", "#bf8700", "#8c959f", "#8250df")
MAX_BARS = 20  # widest claim-count histogram drawn with its empty counts
QUANTILES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("max", "max"))

# Text


def esc(value: Any) -> str:
    """*value* as HTML text: escaped, lone surrogates (valid in JSON, not in UTF-8)
    replaced."""
    text = str(value).encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return html.escape(text, quote=True)


def count(value: int) -> str:
    """A count with thousands separators: 1,234,567."""
    return f"{value:,}"


def percent(fraction: float | None) -> str:
    """A fraction as a percentage of three significant digits: 3.14%, 100%, 0.05%;
    a dash when there is none."""
    return "–" if fraction is None else f"{100 * fraction:.3g}%"


def number(value: float) -> str:
    """A figure without a useless ``.0``."""
    return f"{value:g}"


def seconds(value: float) -> str:
    """A duration for people: 0.25 s, 42 s, 12.5 min, 3.1 h, 2.0 d."""
    size = abs(value)
    if size < 10:
        return f"{value:.3g} s"
    if size < 120:
        return f"{value:.0f} s"
    if size < 7200:
        return f"{value / 60:.1f} min"
    if size < 172800:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} d"


def body_key(key: str) -> str:
    """A body key for the tables; the key of a body that is not an object says so."""
    return '<span class="none">(whole body)</span>' if key == ROOT else f"<code>{esc(key)}</code>"


# Charts


def bar_chart(bars: Sequence[tuple[str, float]], color: str,
              fmt: Callable[[float], str] = seconds) -> str:
    """Horizontal bars, one per (label, value), scaled to the largest magnitude."""
    width, label_w, value_w, row_h = 360, 40, 80, 22
    span = max((abs(v) for _, v in bars), default=0) or 1
    plot = width - label_w - value_w
    parts = []
    for i, (label, value) in enumerate(bars):
        y = i * row_h
        length = max(1.0, plot * abs(value) / span) if value else 0
        parts.append(
            f'<text x="0" y="{y + 15}">{esc(label)}</text>'
            f'<rect x="{label_w}" y="{y + 4}" width="{length:.1f}" height="14" rx="3" '
            f'fill="{BAD if value < 0 else color}"><title>{esc(label)}: {value:g} s'
            f'</title></rect>'
            f'<text x="{label_w + length + 6:.1f}" y="{y + 15}">{esc(fmt(value))}</text>')
    height = row_h * len(bars)
    return (f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img">{"".join(parts)}</svg>')


def distribution_chart(figures: dict[str, float] | None, color: str) -> str:
    """p50/p90/p99/max bars of a distribution, or a note that there is none."""
    if figures is None:
        return '<p class="none">none</p>'
    return bar_chart([(label, figures[name]) for name, label in QUANTILES], color)


def stacked_bar(parts: Sequence[tuple[str, int, str]]) -> str:
    """One bar split into (label, count, color) parts in proportion, with a legend."""
    total = sum(n for _, n, _ in parts)
    width, height = 360, 18
    if total == 0:
        return '<p class="none">none</p>'
    x = 0.0
    rects = []
    for label, n, color in parts:
        if n:
            w = width * n / total
            rects.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" '
                         f'fill="{color}"><title>{esc(label)}: {n:,}</title></rect>')
            x += w
    legend = "".join(f'<span><i style="background:{color}"></i>{esc(label)} {n:,}</span>'
                     for label, n, color in parts)
    return (f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img">{"".join(rects)}</svg><div class="legend">{legend}</div>')


def histogram(buckets: Sequence[tuple[str, int]], color: str) -> str:
    """Vertical bars, one per (label, count), with the count above each bar and the
    label below it."""
    if not buckets:
        return '<p class="none">none</p>'
    bar_w, gap, plot_h = 34, 10, 110
    top = max(n for _, n in buckets) or 1
    parts = []
    for i, (label, n) in enumerate(buckets):
        x = i * (bar_w + gap)
        h = max(1.0, plot_h * n / top)
        y = 18 + plot_h - h
        parts.append(
            f'<rect x="{x}" y="{y:.1f}" width="{bar_w}" height="{h:.1f}" rx="3" '
            f'fill="{color}"><title>{esc(label)}: {n:,}</title></rect>'
            f'<text x="{x + bar_w / 2}" y="{y - 4:.1f}" text-anchor="middle">{n:,}</text>'
            f'<text x="{x + bar_w / 2}" y="{plot_h + 34}" text-anchor="middle">'
            f'{esc(label)}</text>')
    width = len(buckets) * (bar_w + gap)
    height = plot_h + 40
    return (f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img">{"".join(parts)}</svg>')




def share_bar(part: int, whole: int) -> str:
    """A small bar of part / whole, with the percentage."""
    width = 80
    fraction = part / whole if whole else 0
    return (f'<svg viewBox="0 0 {width} 10" width="{width}" height="10" role="img">'
            f'<rect width="{width}" height="10" rx="2" fill="#eaeef2"/>'
            f'<rect width="{width * fraction:.1f}" height="10" rx="2" fill="{ALT}"/></svg> '
            f'{percent(fraction if whole else None)}')


def none() -> str:
    return '<p class="none">none</p>'
