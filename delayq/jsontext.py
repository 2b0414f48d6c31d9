"""JSON text out and in on a request's path, with the encoders and decoders made once.

API responses are written by orjson (``response``), which encodes a claim's answer in a
tenth of the time of the standard library's C encoder; what orjson refuses, and a
message body may hold, falls back to ``dumps``.

The encoders and decoders are made once, at import, with the standard library's own
settings otherwise (ASCII escapes, so lone surrogates survive; no ``NaN`` check, as
``json.dumps``).

No circular-reference check: every document encoded here was decoded from JSON or built
by delayq, so none refers to itself.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

#: As ``json.dumps(value)``: API responses.
dumps = json.JSONEncoder(check_circular=False, separators=(", ", ": ")).encode
#: As ``json.dumps(value, separators=(",", ":"))``: message bodies as stored.
dumps_compact = json.JSONEncoder(check_circular=False, separators=(",", ":")).encode


def response(value: Any) -> bytes:
    """An API response's document as JSON in UTF-8 (orjson's: no spaces, no escapes
    beyond JSON's own).

    orjson refuses strings holding lone surrogates (``"\\ud800"`` is valid JSON, but no
    UTF-8), integers beyond 64 bits and documents nested more than 254 deep; a message
    body may be any of them, so those documents are written by ``dumps`` instead, with
    ASCII escapes: every value goes back exactly as it came in.
    """
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        return dumps(value).encode()


def _reject_constant(name: str) -> None:
    # Python's json accepts NaN and Infinity, which are not JSON and could not be
    # handed back to other clients.
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    # Python reads a number beyond a float's range (1e400) as an infinity, which JSON
    # cannot write back: refused like the Infinity constant.
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} is beyond the range of a JSON number here")
    return value


_strict = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def loads_strict(text: str) -> Any:
    """Decode a request body's text as ``json.loads`` does (same errors, a
    ``JSONDecodeError``), but refusing ``NaN``, ``Infinity`` and numbers beyond a float's
    range (ValueError)."""
    return _strict.decode(text)


#: Decode a document delayq encoded itself (a stored body).
loads = json.JSONDecoder().decode
