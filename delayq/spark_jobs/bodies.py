"""The keys and scalar values of message bodies, for the dead-letter audit's top lists.

A body's keys are dotted paths into nested objects (``{"order": {"kind": "refund"}}``
has the keys ``order`` and ``order.kind``); arrays are values, their elements are not
walked. Each key whose value is a scalar (string, number, boolean, null) also yields a
``(key, value)`` pair, the value written as JSON text (``"refund"`` with its quotes,
``7``, ``true``, ``null``). A body that is not a JSON object has the single key ``ROOT``
(the empty string), with the body as its value when it is a scalar.
"""

from __future__ import annotations

import json
from typing import Any

ROOT = ""
SEPARATOR = "."


def scalar_text(value: Any) -> str | None:
    """*value* as JSON text when it is a scalar; None for objects and arrays."""
    if isinstance(value, dict | list):
        return None
    return json.dumps(value)


def key_values(body: Any) -> list[tuple[str, str | None]]:
    """Every ``(dotted key, scalar value as JSON text or None)`` of a decoded body."""
    if not isinstance(body, dict):
        return [(ROOT, scalar_text(body))]
    found: list[tuple[str, str | None]] = []
    # An explicit stack, not recursion: a body may nest deeper than Python's stack.
    pending: list[tuple[str, dict[str, Any]]] = [("", body)]
    while pending:
        prefix, obj = pending.pop()
        for key, value in obj.items():
            path = prefix + key
            found.append((path, scalar_text(value)))
            if isinstance(value, dict):
                pending.append((path + SEPARATOR, value))
    return found


def body_key_values(text: str | None) -> list[tuple[str, str | None]]:
    """key_values() of a body given as JSON text (as the trail stores it).

    No body (a driver that did not record it) has no keys; text that is not JSON is
    taken as the string it is.
    """
    if text is None:
        return []
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    return key_values(body)
