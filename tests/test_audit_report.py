"""report.html as a browser shows it (headless Chromium, tests/chromium.py), for audit
documents made here with what the audits' figures look like at scale: millions of
messages, early deliveries, a message moved twice, names with HTML in them, nothing
audited. The figures of a real audit are checked against the page in
tests/test_audit_scenario.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from delayq.spark_jobs import output, report
from delayq.spark_jobs.scope import Scope
from tests.audit_helpers import ENDINGS, dist
from tests.chromium import rendered

AS_OF = 1_790_000_000.0
GREEN, RED, GREY = "rgb(218, 251, 225)", "rgb(255, 235, 233)", "rgb(246, 248, 250)"


def delay_row(queue: str, *, messages: int, delayed: int, lateness: list[float] = (),
              early: list[str] = (), early_count: int | None = None) -> dict[str, Any]:
    delivered = len(lateness) or delayed
    return {"project": "shop", "queue": queue, "messages": messages, "delayed": delayed,
            "delay_seconds": dist([30.0]) if delayed else None, "delivered": delivered,
            "lateness_seconds": dist(list(lateness)) if lateness else None,
            "early_deliveries": len(early) if early_count is None else early_count,
            "early_delivery_ids": list(early), "expired_before_due": 0,
            "waiting": delayed - delivered}


def dead_row(queue: str, source: str, *, moved: int, messages: int, received: int,
             keys: list[tuple[str, int]] = (), **endings: int) -> dict[str, Any]:
    left = sum(endings.values())
    return {"project": "shop", "queue": queue, "source": source, "moved": moved,
            "moved_messages": messages, "received": received,
            "dead_letter_rate": round(moved / received, 6),
            "claim_count": {"histogram": {"3": moved}, "p50": 3.0, "max": 3},
            "time_in_dlq_seconds": dist([60.0]), "left": left, "still_in_dlq": moved - left,
            "endings": {kind: endings.get(kind, 0) for kind in ENDINGS},
            "latest_moved_ids": [f"{source}-id-{n}" for n in range(min(moved, 10))],
            "top_keys": [{"key": k, "count": n} for k, n in keys], "top_values": []}


def write(tmp_path: Path, rows: dict[str, list[dict[str, Any]]],
          nothing: str | None = None, missing: tuple[str, ...] = ()) -> Path:
    doc = output.document(as_of=AS_OF, driver="sqlite", scope=Scope(), rows=rows,
                          generated_at=AS_OF + 5, events=0 if nothing else 7_654_321,
                          nothing_audited=nothing, missing_queues=missing)
    return output.write_text(tmp_path, output.REPORT_HTML, report.render(doc))


def cards(page) -> dict[str, tuple[str, str]]:
    """Each summary card's label: its figure and its background colour."""
    return {label: (figure, colour) for figure, label, colour in page.evaluate(
        "[...document.querySelectorAll('main > .cards > .card')].map(c => ["
        "c.querySelector('.n').innerText,"
        " c.querySelector('.l').innerText, getComputedStyle(c).backgroundColor])")}


def table(page, name: str) -> list[list[str]]:
    return page.evaluate(f"[...document.querySelector('table.{name}').rows]"
                         ".map(r => [...r.cells].map(c => c.innerText))")


def panels(page) -> list[str]:
    return page.evaluate(
        "[...document.querySelectorAll('section.queue h3')].map(h => h.innerText)")


def test_what_matters_comes_first_with_thousands_separators(tmp_path):
    path = write(tmp_path, {
        output.DELAY: [
            delay_row("bulk", messages=2_500_000, delayed=1_234_567, lateness=[0.5, 5.0]),
            delay_row("late", messages=40, delayed=30, lateness=[2.0, 90.0]),
            delay_row("broken", messages=12, delayed=10, lateness=[1.0],
                      early=["m-early-1", "m-early-2"]),
            delay_row("plain", messages=4_321, delayed=0),
        ],
        output.DEAD_LETTER: [
            dead_row("dlq", "few", moved=12, messages=12, received=1_000, deleted=12),
            dead_row("dlq", "many", moved=9_876_543, messages=9_000_000, received=50_000_000,
                     deleted=8_000_000, expired=1_000_000, redriven=876_543),
        ],
    })
    with rendered(path) as page:
        text = page.text
        shown = cards(page)
        delays = table(page, "delays")
        dead = table(page, "dead-letters")
        titles = panels(page)
        early_ids = page.evaluate("[...[...document.querySelectorAll('section.queue')][0]"
                                  ".querySelectorAll('.ids code')].map(c => c.innerText)")
    assert "7,654,321 events" in text
    assert shown["early deliveries"] == ("2", RED)
    assert shown["messages posted"][0] == "2,504,373"
    assert shown["moved to a dead-letter queue"][0] == "9,876,555"
    # Early deliveries first, then the latest (lateness p99); the plain queue is no
    # delayed queue: not in the table, no panel, only named.
    assert [row[0] for row in delays[1:]] == ["broken", "late", "bulk"]
    assert delays[3][2:4] == ["1,234,567", "2"]
    assert "Posted to without a delay (messages): plain (4,321)" in text
    assert titles[:3] == ["broken project shop", "late project shop", "bulk project shop"]
    assert "DELIVERED EARLY (UP TO 2 OF 2, EARLIEST FIRST)" in text
    assert early_ids == ["m-early-1", "m-early-2"]
    # The most moved first, every count with separators, the rate of what was received.
    assert dead[1] == ["dlq", "many", "shop", "9,876,543", "50,000,000", "19.8%",
                       "8,000,000", "0", "876,543", "0", "1,000,000", "0", "0"]
    assert dead[2][:6] == ["dlq", "few", "shop", "12", "1,000", "1.2%"]
    assert titles[3:] == ["dlq ← many project shop", "dlq ← few project shop"]
    assert "9,876,543 moves of 9,000,000 messages: 876,543 moved again after a redrive" \
        in text
    assert "1234567" not in text and "9876543" not in text


def test_body_key_shares_count_each_message_once(tmp_path):
    """Two messages, each moved twice (redriven in between): a key both have is in
    100% of the moved messages, not 50% of the moves."""
    path = write(tmp_path, {output.DEAD_LETTER: [
        dead_row("dlq", "jobs", moved=4, messages=2, received=4, keys=[("job", 2),
                                                                        ("retry", 1)],
                 redriven=2)]})
    with rendered(path) as page:
        keys = page.evaluate("[...document.querySelectorAll('section.queue table')][0]"
                             ".innerText")
    assert keys.splitlines() == ["key\tmessages\tof moved messages", "job\t2\t 100%",
                                 "retry\t1\t 50%"]


def test_no_delayed_message_is_no_all_clear(tmp_path):
    path = write(tmp_path, {output.DELAY: [delay_row("plain", messages=3, delayed=0)]})
    with rendered(path) as page:
        shown = cards(page)
        text = page.text
    assert shown["no delayed message to check"] == ("–", GREY)
    assert not any(colour == GREEN for _, colour in shown.values())
    assert "No message was posted with a delay." in text


def test_nothing_audited_shows_why_and_no_figure(tmp_path):
    path = write(tmp_path, {output.DELAY: [], output.DEAD_LETTER: []},
                 nothing="none of the queues ordrs has messages or events in the store",
                 missing=("ordrs",))
    with rendered(path) as page:
        text = page.text
        shown = cards(page)
        every_card = page.evaluate("document.querySelectorAll('.card').length")
    assert "Nothing audited none of the queues ordrs has messages or events in the store" \
        in " ".join(text.split())
    assert "Not in the store (no messages or events): ordrs" in text
    assert shown == {} and every_card == 0
    assert "early" not in text and " events ·" not in text


def test_names_are_shown_as_written(tmp_path):
    name = "<b>orders</b> & 'co'"
    path = write(tmp_path, {output.DELAY: [delay_row(name, messages=1, delayed=1,
                                                     lateness=[1.0])]})
    with rendered(path) as page:
        titles = panels(page)
        bold = page.evaluate("document.querySelectorAll('main b').length")
    assert titles == [f"{name} project shop"]
    assert bold == 0
