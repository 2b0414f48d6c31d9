"""JSON text out and in on a request's path, with the encoders and decoders made once.

API responses are written by orjson (``response``), which encodes a claim's answer in a
tenth of the time of the standard library's C encoder; what orjson refuses, and a
message body may hold, falls back to ``dumps``.

``json.dumps`` and ``JSONEncoder.encode`` build a new C encoder object on every call, and
``json.loads`` checks its arguments and sniffs the encoding of bytes each time: on a
small document that costs more than the encoding or decoding itself, and a request does
two or three. The functions here call C encoders built once at import, with the
standard library's own settings otherwise (ASCII escapes, so lone surrogates survive;
no ``NaN`` check, as ``json.dumps``).

No circular-reference check: every document encoded here was decoded from JSON or built
by delayq, so none refers to itself.
"""

from __future__ import annotations

import json
import json.decoder
import math
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring_ascii
from typing import Any

import orjson


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder(item_separator: str, key_separator: str) -> Callable[[Any], str]:
    """An ``encode(obj) -> str`` with these separators."""
    if c_make_encoder is None:  # a Python without the _json accelerator
        return json.JSONEncoder(separators=(item_separator, key_separator)).encode
    chunks = c_make_encoder(None, _refuse, encode_basestring_ascii, None, key_separator,
                            item_separator, False, False, True)

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


#: As ``json.dumps(value)``: API responses.
dumps = _encoder(", ", ": ")
#: As ``json.dumps(value, separators=(",", ":"))``: message bodies as stored.
dumps_compact = _encoder(",", ":")


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


# The decoders' C scanners, called without decode()'s Python around them.
_scan = json.JSONDecoder().scan_once
_scan_strict = json.JSONDecoder(parse_constant=_reject_constant,
                                parse_float=_finite_float).scan_once
_whitespace = json.decoder.WHITESPACE.match
WHITESPACE = " \t\n\r"  # JSON's whitespace characters


def loads_strict(text: str) -> Any:
    """Decode a request body's text as ``json.loads`` does (same errors, a
    ``JSONDecodeError``), but refusing ``NaN``, ``Infinity`` and numbers beyond a float's
    range (ValueError).

    What ``JSONDecoder.decode`` does, without its two Python calls around the scanner.
    Whitespace is skipped only where there is some: most bodies have none around them.
    """
    start = _whitespace(text, 0).end() if text[:1] in WHITESPACE else 0
    try:
        value, end = _scan_strict(text, start)
    except StopIteration as err:
        raise json.JSONDecodeError("Expecting value", text, err.value) from None
    if end != len(text):
        end = _whitespace(text, end).end()
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
    return value


def loads(text: str) -> Any:
    """Decode a document delayq encoded itself (a stored body): one JSON value, with
    no whitespace around it, so decode()'s whitespace skipping and trailing-text check
    are left out."""
    return _scan(text, 0)[0]
