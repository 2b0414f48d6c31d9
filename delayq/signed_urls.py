"""Pre-signed URLs: narrow access to one queue without credentials, as Zaqar makes them.

A signature is the hex HMAC-SHA256, under ``[signed_url] secret_key``, of::

    <paths, sorted, joined by ','>\\n<methods, sorted, joined by ','>\\n<project>\\n<expires>

where each ``\\n`` is the two characters backslash and n, not a newline, and *expires* is
the UTC expiry written ``%Y-%m-%dT%H:%M:%S``. That is Zaqar's exact text, so a signature
made by either service with the same key is accepted by the other.

A signed request carries the signed values in headers (``URL-Signature``,
``URL-Expires``, ``URL-Methods``, ``URL-Paths``, and the project in ``X-Project-ID``); it
is allowed when its method is among the signed methods, its path is a signed path or
below one, the expiry is in the future and no further than the longest lifetime
(``[signed_url] max_expires``), and the signature matches the values sent. The lifetime
bounds a URL when it is used as well as when it is made: a URL signed for longer (by
Zaqar with the same key, or before the option was lowered) is refused.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
from dataclasses import dataclass

from oslo_config import cfg

from delayq.conf import SIGNED_URL_GROUP

SIGNATURE_HEADER = "URL-Signature"
EXPIRES_HEADER = "URL-Expires"
METHODS_HEADER = "URL-Methods"
PATHS_HEADER = "URL-Paths"

EXPIRES_FORMAT = "%Y-%m-%dT%H:%M:%S"
DEFAULT_LIFETIME = datetime.timedelta(days=1)
DEFAULT_METHODS = ("GET",)
# The sub-resources of a queue a URL may be signed for.
SHAREABLE_PATHS = ("messages", "subscriptions", "claims")


class SigningError(ValueError):
    """The values given cannot be signed (a bad expiry, no paths, no key)."""


@dataclass(frozen=True, slots=True)
class SignedUrl:
    """What a share answers: the signed values and their signature."""

    paths: list[str]
    methods: list[str]
    project: str
    expires: str
    signature: str

    def as_document(self) -> dict[str, object]:
        return {"paths": self.paths, "methods": self.methods, "project": self.project,
                "expires": self.expires, "signature": self.signature}


@dataclass(frozen=True, slots=True)
class Settings:
    """``[signed_url]``: the key that signs, and the longest lifetime of a URL."""

    secret_key: str | None
    max_lifetime: datetime.timedelta

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Settings:
        group = conf[SIGNED_URL_GROUP]
        return cls(secret_key=group.secret_key or None,
                   max_lifetime=datetime.timedelta(seconds=group.max_expires))


def utcnow() -> datetime.datetime:
    """Now, in UTC, without a time zone (as expiries are compared)."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def parse_expires(value: str) -> datetime.datetime:
    """An ISO 8601 date and time as naive UTC; a bare number is refused, as Zaqar does."""
    try:
        int(value)
    except ValueError:
        pass
    else:
        raise SigningError(f"expires must be a date and time such as 2030-01-01T00:00:00, "
                           f"not the number {value}.")
    try:
        parsed = datetime.datetime.fromisoformat(value.strip())
    except ValueError:
        raise SigningError(f"expires must be an ISO 8601 date and time; got "
                           f"{value[:40]!r}.") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(datetime.UTC).replace(tzinfo=None)
    return parsed


def sign(key: str | None, paths: list[str], project: str, methods: list[str] | None = None,
         expires: str | None = None, *,
         max_lifetime: datetime.timedelta | None = None) -> SignedUrl:
    """Sign *paths* (full request paths) for *methods* in *project* until *expires*
    (ISO 8601; a day from now when None, or *max_lifetime* from now if that is
    shorter). An *expires* further than *max_lifetime* from now is refused. Raises
    SigningError."""
    if not key:
        raise SigningError("Pre-signed URLs are not enabled: [signed_url] secret_key is "
                           "not set.")
    if not paths:
        raise SigningError("paths must be a non-empty list.")
    methods = sorted(methods or DEFAULT_METHODS)
    paths = sorted(paths)
    now = utcnow()
    if expires is None:
        lifetime = DEFAULT_LIFETIME
        if max_lifetime is not None:
            lifetime = min(lifetime, max_lifetime)
        moment = now + lifetime
    else:
        moment = parse_expires(expires)
    if moment <= now:
        raise SigningError("expires is in the past.")
    if max_lifetime is not None and moment - now > max_lifetime:
        seconds = int(max_lifetime.total_seconds())
        latest = (now + max_lifetime).strftime(EXPIRES_FORMAT)
        raise SigningError(
            f"expires {moment.strftime(EXPIRES_FORMAT)} is too far ahead: a pre-signed URL "
            f"lives at most {seconds} seconds ([signed_url] max_expires), so expires may "
            f"be {latest} at the latest.")
    expires_text = moment.strftime(EXPIRES_FORMAT)
    return SignedUrl(paths=paths, methods=methods, project=project, expires=expires_text,
                     signature=_signature(key, paths, methods, project, expires_text))


def _signature(key: str, paths: list[str], methods: list[str], project: str,
               expires: str) -> str:
    text = rf"{','.join(paths)}\n{','.join(methods)}\n{project}\n{expires}"
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def allows(key: str | None, *, method: str, path: str, project: str, signature: str,
           expires: str, methods: str, paths: str,
           max_lifetime: datetime.timedelta | None = None) -> bool:
    """Whether the signed headers allow *method* on *path* in *project* now.

    *methods* and *paths* are the comma-separated header values, as sent. An expiry
    further than *max_lifetime* from now does not allow anything.
    """
    if not key:
        return False
    signed_methods = methods.split(",")
    signed_paths = paths.split(",")
    if method not in signed_methods:
        return False
    if not any(path == p or path.startswith(p.rstrip("/") + "/") for p in signed_paths if p):
        return False
    try:
        moment = parse_expires(expires)
    except SigningError:
        return False
    now = utcnow()
    if moment <= now or (max_lifetime is not None and moment - now > max_lifetime):
        return False
    expected = _signature(key, sorted(signed_paths), sorted(signed_methods), project,
                          moment.strftime(EXPIRES_FORMAT))
    return hmac.compare_digest(expected, signature)
