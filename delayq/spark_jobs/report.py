"""report.html: the audit as a page a person would rather look at than read.

One self-contained file: inline CSS, inline SVG charts drawn here, no script and nothing
loaded from anywhere. It is made from the audit.json document alone, so it always shows
the same figures. Every text that comes from the store (project and queue names, body
keys and values) is HTML-escaped.

Sections: a summary (early deliveries green when 0, red otherwise), then per queue the
delay distribution, the lateness of first deliveries and what became of the delayed
messages, then per dead-letter queue and source the moves, the claim counts at the
move, the time spent in the dead-letter queue and the most common body keys and values.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from delayq.spark_jobs.bodies import ROOT
from delayq.spark_jobs.output import DEAD_LETTER, DELAY

GOOD, BAD, MAIN, WARN, MUTED, ALT = (
    "#1a7f37", "#cf222e", "#0969da", "#bf8700", "#8c959f", "#8250df")
MAX_BARS = 20  # widest claim-count histogram drawn with its empty counts
QUANTILES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("max", "max"))

CSS = """
:root { --good: #1a7f37; --bad: #cf222e; --ink: #1f2328; --muted: #59636e;
        --line: #d1d9e0; --panel: #f6f8fa; --warn: #bf8700; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--ink); margin: 0; background: #fff; }
header { background: #24292f; color: #fff; padding: 20px 32px; }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: #d0d7de; }
main { padding: 8px 32px 40px; max-width: 1180px; }
h2 { margin: 32px 0 8px; font-size: 19px; border-bottom: 1px solid var(--line);
     padding-bottom: 6px; }
h3 { margin: 0 0 8px; font-size: 16px; }
h3 code { font-size: 15px; }
h2 small, h3 small { font-weight: normal; }
h4 { margin: 12px 0 4px; font-size: 13px; color: var(--muted); text-transform: uppercase;
     letter-spacing: .04em; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 8px;
        padding: 10px 16px; min-width: 150px; }
.card .n { font-size: 26px; font-weight: 600; }
.card .l { color: var(--muted); font-size: 13px; }
.card.good { background: #dafbe1; border-color: var(--good); }
.card.good .n { color: var(--good); }
.card.bad { background: #ffebe9; border-color: var(--bad); }
.card.bad .n { color: var(--bad); }
.badge { display: inline-block; border-radius: 10px; padding: 0 8px; font-weight: 600;
         color: #fff; }
.badge.good { background: var(--good); }
.badge.bad { background: var(--bad); }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 14px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: right;
         vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
td.t, th.t { text-align: left; }
code { font: 13px ui-monospace, SFMono-Regular, Menlo, monospace; background: var(--panel);
       padding: 0 4px; border-radius: 4px; word-break: break-all; }
.queue { border: 1px solid var(--line); border-radius: 10px; padding: 14px 18px;
         margin: 14px 0; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(330px, 1fr));
        gap: 8px 24px; }
.none { color: var(--muted); font-style: italic; }
.nothing { background: #fff8c5; border: 1px solid var(--warn); border-radius: 10px;
           padding: 6px 20px; margin: 24px 0; }
.nothing h2 { border: 0; color: #7d4e00; }
.warn { background: #fff8c5; border-left: 4px solid var(--warn); padding: 6px 12px; }
.axis { color: var(--muted); font-size: 12px; margin: 0; }
.legend span { margin-right: 14px; font-size: 13px; white-space: nowrap; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
            margin-right: 4px; }
svg text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
           fill: #1f2328; }
"""


# Text


def esc(value: Any) -> str:
    """*value* as HTML text: escaped, lone surrogates (valid in JSON, not in UTF-8)
    replaced."""
    text = str(value).encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return html.escape(text, quote=True)


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
    total = sum(count for _, count, _ in parts)
    width, height = 360, 18
    if total == 0:
        return '<p class="none">none</p>'
    x = 0.0
    rects = []
    for label, count, color in parts:
        if count:
            w = width * count / total
            rects.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" '
                         f'fill="{color}"><title>{esc(label)}: {count}</title></rect>')
            x += w
    legend = "".join(f'<span><i style="background:{color}"></i>{esc(label)} {count}</span>'
                     for label, count, color in parts)
    return (f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img">{"".join(rects)}</svg><div class="legend">{legend}</div>')


def histogram(buckets: Sequence[tuple[str, int]], color: str) -> str:
    """Vertical bars, one per (label, count), with the count above each bar and the
    label below it."""
    if not buckets:
        return '<p class="none">none</p>'
    bar_w, gap, plot_h = 34, 10, 110
    top = max(count for _, count in buckets) or 1
    parts = []
    for i, (label, count) in enumerate(buckets):
        x = i * (bar_w + gap)
        h = max(1.0, plot_h * count / top)
        y = 18 + plot_h - h
        parts.append(
            f'<rect x="{x}" y="{y:.1f}" width="{bar_w}" height="{h:.1f}" rx="3" '
            f'fill="{color}"><title>{esc(label)}: {count}</title></rect>'
            f'<text x="{x + bar_w / 2}" y="{y - 4:.1f}" text-anchor="middle">{count}</text>'
            f'<text x="{x + bar_w / 2}" y="{plot_h + 34}" text-anchor="middle">'
            f'{esc(label)}</text>')
    width = len(buckets) * (bar_w + gap)
    height = plot_h + 40
    return (f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img">{"".join(parts)}</svg>')


# Blocks


def card(label: str, value: Any, tone: str = "") -> str:
    return (f'<div class="card {tone}"><div class="n">{esc(value)}</div>'
            f'<div class="l">{esc(label)}</div></div>')


def verdict(early: int) -> str:
    """Early deliveries as a badge: green when 0 (delays honoured), red otherwise."""
    return f'<span class="badge {"good" if early == 0 else "bad"}">{early}</span>'


def table(head: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1) -> str:
    """A table of already-escaped cells; the first *text_columns* are left-aligned."""
    left = ' class="t"'

    def cells(tag: str, values: Sequence[str]) -> str:
        return "".join(f"<{tag}{left if i < text_columns else ''}>{v}</{tag}>"
                       for i, v in enumerate(values))

    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    return f"<table><tr>{cells('th', head)}</tr>{body}</table>"


def queue_title(row: dict[str, Any], *, with_source: bool = False) -> str:
    source = f" ← <code>{esc(row['source'])}</code>" if with_source else ""
    return (f'<h3><code>{esc(row["queue"])}</code>{source} '
            f'<small class="none">project {esc(row["project"])}</small></h3>')


# Sections


def header(doc: dict[str, Any]) -> str:
    src = doc["source"]
    scope = [f"{esc(src['driver'])} store"]
    if src.get("project") is not None:
        scope.append(f"project {esc(src['project'])}")
    if src.get("queues") is not None:
        scope.append("queues " + ", ".join(esc(q) for q in src["queues"]))
    return (f'<header><h1>delayq audit</h1><p>as of {esc(doc["as_of_text"])} · '
            f'{" · ".join(scope)} · generated {esc(doc["generated_at"])}</p></header>')


def summary(doc: dict[str, Any]) -> str:
    out = ["<h2>Summary</h2>"]
    if DELAY in doc:
        rows = doc[DELAY]["queues"]
        early = sum(r["early_deliveries"] for r in rows)
        out.append("<h4>delays</h4>")
        out.append('<div class="cards">'
                   + card("early deliveries", early, "good" if early == 0 else "bad")
                   + card("queues with posts", len(rows))
                   + card("messages posted", sum(r["messages"] for r in rows))
                   + card("delayed", sum(r["delayed"] for r in rows))
                   + card("delivered (delayed)", sum(r["delivered"] for r in rows))
                   + card("expired before due", sum(r["expired_before_due"] for r in rows))
                   + card("still waiting", sum(r["waiting"] for r in rows)) + "</div>")
        out.append(table(
            ["queue", "project", "messages", "delayed", "delivered", "early",
             "expired before due", "waiting", "lateness p50", "lateness p99"],
            [[f"<code>{esc(r['queue'])}</code>", esc(r["project"]), str(r["messages"]),
              str(r["delayed"]), str(r["delivered"]), verdict(r["early_deliveries"]),
              str(r["expired_before_due"]), str(r["waiting"]),
              *_lateness_cells(r["lateness_seconds"])] for r in rows], text_columns=2))
    if DEAD_LETTER in doc:
        rows = doc[DEAD_LETTER]["queues"]
        out.append("<h4>dead letters</h4>")
        out.append('<div class="cards">'
                   + card("dead-letter queue × source pairs", len(rows))
                   + card("moved to a dead-letter queue", sum(r["moved"] for r in rows))
                   + card("left the dead-letter queue", sum(r["left"] for r in rows))
                   + card("still in a dead-letter queue", sum(r["still_in_dlq"] for r in rows))
                   + "</div>")
    return "".join(out)


def claim_buckets(histogram_: dict[str, int]) -> list[tuple[str, int]]:
    """The claim-count histogram as bars in increasing count, the counts between the
    smallest and the largest included (as zeros) when that stays readable."""
    counts = {int(claims): n for claims, n in histogram_.items()}
    if not counts:
        return []
    low, high = min(counts), max(counts)
    keys = range(low, high + 1) if high - low < MAX_BARS else sorted(counts)
    return [(str(claims), counts.get(claims, 0)) for claims in keys]


def share_bar(count: int, total: int) -> str:
    """A small bar of count / total, for the top-keys tables."""
    width = 80
    filled = width * count / total if total else 0
    return (f'<svg viewBox="0 0 {width} 10" width="{width}" height="10" role="img">'
            f'<rect width="{width}" height="10" rx="2" fill="#eaeef2"/>'
            f'<rect width="{filled:.1f}" height="10" rx="2" fill="{ALT}"/></svg> '
            f'{100 * count / total if total else 0:.0f}%')


def number(value: float) -> str:
    """A figure without a useless ``.0``."""
    return f"{value:g}"


def _lateness_cells(figures: dict[str, float] | None) -> list[str]:
    if figures is None:
        return ["–", "–"]
    return [esc(seconds(figures["p50"])), esc(seconds(figures["p99"]))]


def delay_queue(row: dict[str, Any]) -> str:
    ended_otherwise = (row["delayed"] - row["delivered"] - row["expired_before_due"]
                       - row["waiting"])
    outcome = stacked_bar([
        ("delivered", row["delivered"], GOOD),
        ("expired before due", row["expired_before_due"], BAD),
        ("waiting", row["waiting"], MAIN),
        ("other undelivered", ended_otherwise, MUTED),
    ])
    other = ('<p class="axis">other undelivered: due but not claimed yet, or deleted, purged '
             'or expired after due without a delivery</p>' if ended_otherwise else "")
    return (f'<section class="queue">{queue_title(row)}'
            f'<div class="cards">{card("messages", row["messages"])}'
            f'{card("delayed", row["delayed"])}'
            f'{card("early deliveries", row["early_deliveries"], _tone(row))}'
            f'{card("expired before due", row["expired_before_due"])}</div>'
            f'<div class="grid"><div><h4>delay (due − posted)</h4>'
            f'{distribution_chart(row["delay_seconds"], MAIN)}</div>'
            f'<div><h4>lateness (first delivery − due)</h4>'
            f'{distribution_chart(row["lateness_seconds"], WARN)}</div></div>'
            f'<h4>what became of the delayed messages</h4>{outcome}{other}</section>')


def _tone(row: dict[str, Any]) -> str:
    return "good" if row["early_deliveries"] == 0 else "bad"


def dead_letter_queue(row: dict[str, Any]) -> str:
    claims = row["claim_count"]
    stay = stacked_bar([("left", row["left"], GOOD), ("still in the DLQ",
                                                       row["still_in_dlq"], WARN)])
    messages = row["moved"]
    keys = table(["key", "messages", "of moved"],
                 [[body_key(k["key"]), str(k["count"]), share_bar(k["count"], messages)]
                  for k in row["top_keys"]])
    values = table(["key", "value", "messages", "of moved"],
                   [[body_key(v["key"]), f"<code>{esc(v['value'])}</code>", str(v["count"]),
                     share_bar(v["count"], messages)] for v in row["top_values"]],
                   text_columns=2)
    return (f'<section class="queue">{queue_title(row, with_source=True)}'
            f'<div class="cards">{card("moved", row["moved"])}'
            f'{card("median claim count at the move", number(claims["p50"]))}'
            f'{card("max claim count at the move", claims["max"])}'
            f'{card("still in the dead-letter queue", row["still_in_dlq"])}</div>'
            f'<div class="grid"><div><h4>claim count at the move</h4>'
            f'{histogram(claim_buckets(claims["histogram"]), ALT)}'
            f'<p class="axis">messages moved, by claims before the move</p></div>'
            f'<div><h4>time in the dead-letter queue (of those that left)</h4>'
            f'{distribution_chart(row["time_in_dlq_seconds"], MAIN)}'
            f'<h4>moved messages</h4>{stay}</div></div>'
            f'<div class="grid"><div><h4>most common body keys</h4>'
            f'{keys if row["top_keys"] else _none()}</div>'
            f'<div><h4>most common values</h4>'
            f'{values if row["top_values"] else _none()}</div></div></section>')


def _none() -> str:
    return '<p class="none">none</p>'


def nothing_audited(reason: str) -> str:
    """The page's whole content when nothing was audited: why, and no figure at all
    (zeros would read as an all-clear)."""
    return (f'<section class="nothing"><h2>Nothing audited</h2><p>{esc(reason)}</p>'
            '<p>No figure is shown: there was nothing to count. Check the store, '
            '<code>--project</code>, <code>--queues</code> and <code>--as-of</code>.</p>'
            '</section>')


def missing(queues: Sequence[str]) -> str:
    """A note naming the queues of --queues the store had no trail of."""
    names = ", ".join(f"<code>{esc(q)}</code>" for q in queues)
    return f'<p class="warn">Not in the store (no messages or events): {names}</p>'


def render(doc: dict[str, Any]) -> str:
    """The report page of an audit.json document."""
    parts = [header(doc), "<main>"]
    if doc.get("missing_queues"):
        parts.append(missing(doc["missing_queues"]))
    if doc.get("nothing_audited") is not None:
        parts += [nothing_audited(doc["nothing_audited"]), "</main>"]
        return page(doc, parts)
    parts.append(summary(doc))
    if DELAY in doc:
        rows = doc[DELAY]["queues"]
        parts.append("<h2>Delayed queues</h2>")
        parts.extend(map(delay_queue, rows) if rows else [_none()])
    if DEAD_LETTER in doc:
        rows = doc[DEAD_LETTER]["queues"]
        parts.append("<h2>Dead-letter queues</h2>")
        parts.extend(map(dead_letter_queue, rows) if rows else [_none()])
    parts.append("</main>")
    return page(doc, parts)


def page(doc: dict[str, Any], parts: Sequence[str]) -> str:
    """The HTML document around *parts*."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>delayq audit, as of {esc(doc['as_of_text'])}</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")
