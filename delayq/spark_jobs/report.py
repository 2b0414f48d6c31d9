"""report.html: the audit as a page a person would rather look at than read.

One self-contained file: inline CSS, inline SVG charts (``charts``), no script and
nothing loaded from anywhere. It is made from the audit.json document alone, so it
always shows the same figures. Every text that comes from the store (project and queue
names, body keys and values, message ids) is HTML-escaped.

Sections: a summary (early deliveries on a green card when delayed messages were
audited and none came early, red when some did, grey when none was delayed), then per
delayed queue the delay distribution, the lateness of first deliveries, what became of
the delayed messages and the ids of early ones, then per dead-letter queue and source
the moves and the dead-letter rate, how the moved messages left, the claim counts at the
move, the time spent in the dead-letter queue, the latest moved ids and the most common
body keys and values with their share of the moved messages. Tables and panels put what
matters first: early and late queues, the most moved. When nothing was audited, the page
says why and shows no figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from delayq.spark_jobs.charts import (
    ALT,
    BAD,
    GOOD,
    MAIN,
    MAX_BARS,
    MUTED,
    WARN,
    body_key,
    count,
    distribution_chart,
    esc,
    histogram,
    none,
    number,
    percent,
    seconds,
    share_bar,
    stacked_bar,
)
from delayq.spark_jobs.output import DEAD_LETTER, DELAY

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
td code { white-space: nowrap; word-break: normal; }
code { font: 13px ui-monospace, SFMono-Regular, Menlo, monospace; background: var(--panel);
       padding: 0 4px; border-radius: 4px; word-break: break-all; }
.queue { border: 1px solid var(--line); border-radius: 10px; padding: 14px 18px;
         margin: 14px 0; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(330px, 1fr));
        gap: 8px 24px; }
.none { color: var(--muted); font-style: italic; }
.card.neutral .n { color: var(--muted); }
.ids code { display: inline-block; margin: 2px 4px 2px 0; }
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

# How a stay in a dead-letter queue ended (audit.json's ``endings``), as the page says it.
ENDINGS = (("deleted", "deleted", GOOD), ("popped", "popped", "#4ac26b"),
           ("redriven", "redriven", MAIN), ("dead_lettered", "moved on", ALT),
           ("expired", "expired", BAD), ("purged", "purged", MUTED))


# Blocks


def card(label: str, value: Any, tone: str = "") -> str:
    shown = count(value) if isinstance(value, int) else value
    return (f'<div class="card {tone}"><div class="n">{esc(shown)}</div>'
            f'<div class="l">{esc(label)}</div></div>')


def verdict(early: int) -> str:
    """Early deliveries as a badge: green when 0 (delays honoured), red otherwise."""
    return f'<span class="badge {"good" if early == 0 else "bad"}">{count(early)}</span>'


def table(head: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1,
          name: str = "") -> str:
    """A table of already-escaped cells; the first *text_columns* are left-aligned.
    *name* is its class, for whoever reads the page."""
    left = ' class="t"'

    def cells(tag: str, values: Sequence[str]) -> str:
        return "".join(f"<{tag}{left if i < text_columns else ''}>{v}</{tag}>"
                       for i, v in enumerate(values))

    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    named = f' class="{name}"' if name else ""
    return f"<table{named}><tr>{cells('th', head)}</tr>{body}</table>"


def queue_title(row: dict[str, Any], *, with_source: bool = False) -> str:
    source = f" ← <code>{esc(row['source'])}</code>" if with_source else ""
    return (f'<h3><code>{esc(row["queue"])}</code>{source} '
            f'<small class="none">project {esc(row["project"])}</small></h3>')


def id_list(ids: Sequence[str]) -> str:
    return '<p class="ids">' + "".join(f"<code>{esc(i)}</code>" for i in ids) + "</p>"


# Order: what matters first


def _late(row: dict[str, Any]) -> float:
    figures = row["lateness_seconds"]
    return figures["p99"] if figures is not None else float("-inf")


def delayed_first(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The delay rows of queues with delayed messages: the most early deliveries first,
    then the latest (lateness p99), then by name."""
    delayed = [r for r in rows if r["delayed"] > 0]
    return sorted(delayed, key=lambda r: (-r["early_deliveries"], -_late(r), r["project"],
                                          r["queue"]))


def most_moved_first(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (-r["moved"], r["project"], r["queue"], r["source"]))


# Sections


def header(doc: dict[str, Any]) -> str:
    src = doc["source"]
    scope = [f"{esc(src['driver'])} store"]
    if src.get("project") is not None:
        scope.append(f"project {esc(src['project'])}")
    if src.get("queues") is not None:
        scope.append("queues " + ", ".join(esc(q) for q in src["queues"]))
    if doc.get("nothing_audited") is None:
        scope.append(f"{count(doc.get('events', 0))} events")
    return (f'<header><h1>delayq audit</h1><p>as of {esc(doc["as_of_text"])} · '
            f'{" · ".join(scope)} · generated {esc(doc["generated_at"])}</p></header>')


def early_card(rows: Sequence[dict[str, Any]]) -> str:
    """Green only when delayed messages were audited and none came early."""
    delayed = sum(r["delayed"] for r in rows)
    early = sum(r["early_deliveries"] for r in rows)
    if early:
        return card("early deliveries", early, "bad")
    if delayed == 0:
        return card("no delayed message to check", "–", "neutral")
    return card(f"early deliveries of {count(delayed)} delayed", early, "good")


def delay_summary(rows: Sequence[dict[str, Any]]) -> str:
    delayed = delayed_first(rows)
    plain = sorted((r for r in rows if r["delayed"] == 0),
                   key=lambda r: (r["project"], r["queue"]))
    out = ['<h4>delays</h4><div class="cards">', early_card(rows),
           card("delayed queues", len(delayed)),
           card("messages posted", sum(r["messages"] for r in rows)),
           card("delayed", sum(r["delayed"] for r in rows)),
           card("delivered (delayed)", sum(r["delivered"] for r in rows)),
           card("expired before due", sum(r["expired_before_due"] for r in rows)),
           card("still waiting", sum(r["waiting"] for r in rows)), "</div>"]
    if delayed:
        out.append(table(
            ["queue", "project", "delayed", "delivered", "early", "expired before due",
             "waiting", "lateness p50", "lateness p99"],
            [[f"<code>{esc(r['queue'])}</code>", esc(r["project"]), count(r["delayed"]),
              count(r["delivered"]), verdict(r["early_deliveries"]),
              count(r["expired_before_due"]), count(r["waiting"]),
              *_lateness_cells(r["lateness_seconds"])] for r in delayed], text_columns=2,
            name="delays"))
    if plain:
        names = ", ".join(f"<code>{esc(r['queue'])}</code> ({count(r['messages'])})"
                          for r in plain)
        out.append(f'<p class="axis">Posted to without a delay (messages): {names}</p>')
    return "".join(out)


def dead_letter_summary(rows: Sequence[dict[str, Any]]) -> str:
    out = ['<h4>dead letters</h4><div class="cards">',
           card("moved to a dead-letter queue", sum(r["moved"] for r in rows)),
           card("distinct messages moved", sum(r["moved_messages"] for r in rows)),
           card("left the dead-letter queue", sum(r["left"] for r in rows)),
           card("still in a dead-letter queue", sum(r["still_in_dlq"] for r in rows)),
           "</div>"]
    if rows:
        out.append(table(
            ["dead-letter queue", "source", "project", "moved", "source received",
             "dead-letter rate", *(label for _, label, _ in ENDINGS), "still there"],
            [[f"<code>{esc(r['queue'])}</code>", f"<code>{esc(r['source'])}</code>",
              esc(r["project"]), count(r["moved"]), count(r["received"]),
              percent(r["dead_letter_rate"]),
              *(count(r["endings"][kind]) for kind, _, _ in ENDINGS),
              count(r["still_in_dlq"])] for r in most_moved_first(rows)], text_columns=3,
            name="dead-letters"))
    else:
        out.append('<p class="none">No message was moved to a dead-letter queue.</p>')
    return "".join(out)


def summary(doc: dict[str, Any]) -> str:
    out = ["<h2>Summary</h2>"]
    if DELAY in doc:
        out.append(delay_summary(doc[DELAY]["queues"]))
    if DEAD_LETTER in doc:
        out.append(dead_letter_summary(doc[DEAD_LETTER]["queues"]))
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
    early = row["early_deliveries"]
    ids = (f'<h4>delivered early (up to {len(row["early_delivery_ids"])} of '
           f'{count(early)}, earliest first)</h4>{id_list(row["early_delivery_ids"])}'
           if early else "")
    return (f'<section class="queue">{queue_title(row)}'
            f'<div class="cards">{card("messages", row["messages"])}'
            f'{card("delayed", row["delayed"])}'
            f'{card("early deliveries", early, "good" if early == 0 else "bad")}'
            f'{card("expired before due", row["expired_before_due"])}</div>{ids}'
            f'<div class="grid"><div><h4>delay (due − posted)</h4>'
            f'{distribution_chart(row["delay_seconds"], MAIN)}</div>'
            f'<div><h4>lateness (first delivery − due)</h4>'
            f'{distribution_chart(row["lateness_seconds"], WARN)}</div></div>'
            f'<h4>what became of the delayed messages</h4>{outcome}{other}</section>')


def dead_letter_queue(row: dict[str, Any]) -> str:
    claims = row["claim_count"]
    endings = stacked_bar([*((label, row["endings"][kind], color)
                             for kind, label, color in ENDINGS),
                           ("still there", row["still_in_dlq"], WARN)])
    messages = row["moved_messages"]
    keys = table(["key", "messages", "of moved messages"],
                 [[body_key(k["key"]), count(k["count"]), share_bar(k["count"], messages)]
                  for k in row["top_keys"]])
    values = table(["key", "value", "messages", "of moved messages"],
                   [[body_key(v["key"]), f"<code>{esc(v['value'])}</code>",
                     count(v["count"]), share_bar(v["count"], messages)]
                    for v in row["top_values"]], text_columns=2)
    again = row["moved"] - messages
    rate = card(f"dead-letter rate (of {count(row['received'])} received)",
                percent(row["dead_letter_rate"]))
    moved_note = (f'<p class="axis">{count(row["moved"])} moves of {count(messages)} '
                  f'messages: {count(again)} moved again after a redrive</p>'
                  if again else "")
    return (f'<section class="queue">{queue_title(row, with_source=True)}'
            f'<div class="cards">{card("moved", row["moved"])}'
            f'{rate}'
            f'{card("median claim count at the move", number(claims["p50"]))}'
            f'{card("max claim count at the move", claims["max"])}'
            f'{card("still in the dead-letter queue", row["still_in_dlq"])}</div>{moved_note}'
            f'<h4>how the moved messages left</h4>{endings}'
            f'<div class="grid"><div><h4>claim count at the move</h4>'
            f'{histogram(claim_buckets(claims["histogram"]), ALT)}'
            f'<p class="axis">messages moved, by claims before the move</p></div>'
            f'<div><h4>time in the dead-letter queue (of those that left)</h4>'
            f'{distribution_chart(row["time_in_dlq_seconds"], MAIN)}</div></div>'
            f'<h4>latest moved (newest first)</h4>{id_list(row["latest_moved_ids"])}'
            f'<div class="grid"><div><h4>most common body keys</h4>'
            f'{keys if row["top_keys"] else none()}</div>'
            f'<div><h4>most common values</h4>'
            f'{values if row["top_values"] else none()}</div></div></section>')


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
        delayed = delayed_first(doc[DELAY]["queues"])
        parts.append("<h2>Delayed queues</h2>")
        parts.extend(map(delay_queue, delayed) if delayed else [
            '<p class="none">No message was posted with a delay.</p>'])
    if DEAD_LETTER in doc:
        rows = most_moved_first(doc[DEAD_LETTER]["queues"])
        parts.append("<h2>Dead-letter queues</h2>")
        parts.extend(map(dead_letter_queue, rows) if rows else [none()])
    parts.append("</main>")
    return page(doc, parts)


def page(doc: dict[str, Any], parts: Sequence[str]) -> str:
    """The HTML document around *parts*."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>delayq audit, as of {esc(doc['as_of_text'])}</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")
