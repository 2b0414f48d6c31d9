"""A socket's authentication, as Zaqar's WebSocket transport does it.

With ``auth_strategy = keystone`` a socket starts unauthenticated: its frames are
refused (403, ``Not authentified.``) until an ``authenticate`` frame carries a token
Keystone confirms, checked by the HTTP API's own ``KeystoneTokens``. The token's
credentials then serve every frame (its project, not the frames' X-Project-ID, as on
HTTP), and the socket is closed (4003, ``Authentication expired.``) when the token
expires, unless an ``authenticate`` with a newer token came first. A frame carrying a
pre-signed URL's headers (``URL-Signature``...) is served without authentication, as
Zaqar does: the app checks the signature, as on HTTP.

Without a strategy, ``authenticate`` is answered 200 (python-zaqarclient always sends
one) and each frame's X-Project-ID names its project, as on HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from delayq import errors, signed_urls
from delayq.api import auth
from delayq.offload import Offload

NOT_AUTHENTIFIED = "Not authentified."
AUTHENTICATION_FAILED = "Authentication failed."
AUTHENTIFIED = "Authentified."
EXPIRED = "Authentication expired."
# Zaqar's close code for an expired authentication (4000-4999: the application's own).
EXPIRED_CODE = 4003


class Session:
    """One socket's authentication state."""

    def __init__(self, tokens: auth.KeystoneTokens | None, offload: Offload) -> None:
        self.tokens = tokens
        self.offload = offload
        self.credentials: dict[str, Any] | None = None
        self.expires: datetime | None = None

    @property
    def required(self) -> bool:
        return self.tokens is not None

    async def authenticate(self, headers: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and body answering an ``authenticate`` frame."""
        if self.tokens is None:
            return 200, {"message": AUTHENTIFIED}
        token = headers.get(auth.TOKEN_HEADER)
        service = headers.get(auth.SERVICE_TOKEN_HEADER)
        try:
            identity = await self.offload(
                self.tokens.identity, token if isinstance(token, str) else None,
                service if isinstance(service, str) else None)
        except errors.NotAuthenticated:
            # As Zaqar: a failed attempt leaves the socket as it was, free to try again.
            return 401, {"error": AUTHENTICATION_FAILED}
        except errors.IdentityUnavailable as exc:
            return 503, {"error": exc.description}
        self.credentials = identity.credentials
        self.expires = identity.expires
        return 200, {"message": AUTHENTIFIED}

    def seconds_left(self) -> float | None:
        """Seconds until the authentication expires; None when it never will (no
        strategy, or not authenticated)."""
        if self.credentials is None or self.expires is None:
            return None
        return (self.expires - datetime.now(UTC)).total_seconds()

    def expired(self) -> bool:
        left = self.seconds_left()
        return left is not None and left <= 0

    def admits(self, headers: Mapping[str, Any]) -> bool:
        """Whether a frame with *headers* may be served: authenticated, or no strategy,
        or signed."""
        return (not self.required or self.credentials is not None
                or signed_urls.SIGNATURE_HEADER in headers)
