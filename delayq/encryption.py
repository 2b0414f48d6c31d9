"""Message bodies encrypted at rest: the queues whose ``_enable_encrypt_messages`` is true.

The broker seals a body before the driver stores it and opens every sealed body a
driver hands back, so drivers store opaque JSON and every reader (the API, the pusher,
dead-letter moves and redrives, the audits) sees plaintext, or nothing.

The cipher is Zaqar's choice, AES-256, and its key is derived as Zaqar derives it: the
SHA-256 digest of the configured key's UTF-8 text (``[transport]
message_encryption_key``). Two things differ from Zaqar, on purpose:

- The mode is GCM, not CBC without a MAC: its tag refuses a body altered in the store,
  and tells which of several keys sealed a body (key rotation tries them in turn)
  instead of decrypting it into garbage.
- Every body is sealed as its compact JSON text, never pickled: unpickling what a store
  holds would run whatever code someone who can write the store put there.

A sealed body is a JSON object with the single member ``SEALED``: what a driver stores,
what a dead-letter move carries to another queue (whatever that queue's flag), and what
the event trail keeps of a dead-lettered body. Whether a stored body is sealed is read
from the body, not from its queue's flag, so turning the flag off or on leaves every
message readable. A client may not post a body of that shape (``is_sealed``, checked in
``delayq.validation``): no one can plant a body that decrypts to nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from delayq import errors, jsontext

# The one member of a sealed body; its value is ALGORITHM, ":", then the base64 of the
# nonce and the ciphertext with its tag.
SEALED = "$delayq_sealed_body"
ALGORITHM = "AES256-GCM"
PREFIX = f"{ALGORITHM}:"
NONCE_BYTES = 12  # GCM's standard nonce: random, never reused with a key in practice


def is_sealed(body: Any) -> bool:
    """Whether *body* has the shape of a sealed body (an object whose only member is
    ``SEALED``). Cheap: every message a driver returns is asked."""
    return type(body) is dict and len(body) == 1 and SEALED in body


def derive_key(text: str) -> bytes:
    """The AES-256 key of configured key *text*: its SHA-256 digest, as Zaqar's."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class BodyCipher:
    """Seals bodies with the first of the configured keys; opens them with any of them.

    Keys are given in order: a rotation puts the new key first and keeps the old ones
    after it until no stored body needs them.
    """

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("BodyCipher needs at least one key.")
        self._ciphers = [AESGCM(derive_key(key)) for key in keys]

    def seal(self, body: Any) -> dict[str, str]:
        """*body* encrypted with the first key, as a sealed body."""
        # ASCII escapes (dumps_compact): lone surrogates, valid JSON, survive the trip.
        plaintext = jsontext.dumps_compact(body).encode("ascii")
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[0].encrypt(nonce, plaintext, None)
        return {SEALED: PREFIX + base64.b64encode(nonce + sealed).decode("ascii")}

    def open(self, body: Any, message_id: str = "") -> Any:
        """The plaintext of sealed *body*; any other body as it is.

        BodyUndecryptable when no key opens it: its key left the configuration, or the
        stored text was altered.
        """
        if not is_sealed(body):
            return body
        value = body[SEALED]
        try:
            if not isinstance(value, str) or not value.startswith(PREFIX):
                raise ValueError("not a sealed value")
            raw = base64.b64decode(value[len(PREFIX):], validate=True)
        except (ValueError, binascii.Error):
            raise errors.BodyUndecryptable.of(message_id) from None
        nonce, sealed = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        for cipher in self._ciphers:
            try:
                plaintext = cipher.decrypt(nonce, sealed, None)
            except InvalidTag:
                continue
            return jsontext.loads(plaintext.decode("ascii"))
        raise errors.BodyUndecryptable.of(message_id)


def from_keys(keys: Sequence[str] | None) -> BodyCipher | None:
    """The cipher of configured *keys* (empty ones ignored), or None without any."""
    kept = [key for key in keys or () if key]
    return BodyCipher(kept) if kept else None
