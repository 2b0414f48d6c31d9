"""Idempotent posts: a post under an ``Idempotency-Key`` header is stored at most once
per key, queue and project within ``[transport] idempotency_window``.

The rule lives here and in the broker (``Broker.post``), once for every driver: a post
with a key hands the driver a ``PostKey`` (the key, the digest of the request body, the
window). The driver's post step either stores the messages and the key together (the
key kept for the window, on the backend's clock) or, finding the key kept already,
stores nothing and raises ``KeyTaken`` with what it keeps (``StoredKey``). The broker
then answers as the first post did (its message ids) when the digests match, and refuses
the post (``errors.KeyReused``, 422) when they do not.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

HEADER = "Idempotency-Key"


@dataclass(frozen=True, slots=True)
class PostKey:
    """The key of one post: *key* (checked, ``validation.idempotency_key``), the digest
    of its request body, and the seconds the key is kept from the post that stores it."""

    key: str
    digest: str
    window: int


@dataclass(frozen=True, slots=True)
class StoredKey:
    """What a driver keeps of the post that stored its key: the digest of its body and
    the ids of its messages, in order."""

    digest: str
    ids: list[str]


class KeyTaken(Exception):  # noqa: N818 - a driver's answer, not an error of the request
    """Raised by a driver's post step that found its key kept: nothing was stored."""

    def __init__(self, stored: StoredKey) -> None:
        super().__init__(stored.digest)
        self.stored = stored


def digest(body: bytes) -> str:
    """The digest of a request body: SHA-256, in hex. Two posts under one key are the
    same post when their bodies are the same bytes."""
    return hashlib.sha256(body).hexdigest()


def encode_ids(ids: list[str]) -> str:
    """Message ids as a driver stores them with a key: comma-separated (no id has one)."""
    return ",".join(ids)


def decode_ids(text: str) -> list[str]:
    return text.split(",") if text else []
