"""Validation of client input against delayq's rules and the operator's limits.

Every check a request goes through lives here, once, for every storage driver. A failed
check raises ``ValidationError`` whose text names the offending field, attribute or
parameter, so that the client can fix its request.
"""

from __future__ import annotations

import functools
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from oslo_config import cfg

from delayq import encryption, jsontext, retry
from delayq import queue as q
from delayq.conf import (
    CLIENT_ID_STRICT,
    QUOTAS_GROUP,
    TRANSPORT_GROUP,
    quotas_opts,
    transport_opts,
)
from delayq.errors import ValidationError
from delayq.message import LISTING_START, NO_CHANGE, ListingMarker, Unchanged
from delayq.subscription import SubscriptionChange

MIN_MESSAGE_TTL = 60
MIN_CLAIM_TTL = 60
MIN_CLAIM_GRACE = 60
MAX_PROJECT_ID_LENGTH = 256
DEFAULT_CLAIM_LIMIT = 10
# One redrive request moves at most this many messages (a client repeats it until it
# answers 0), so that a request on a large dead-letter queue stays short.
MAX_REDRIVE = 1000
DEFAULT_REDRIVE = 100
# A long-poll claim (?wait=) waits at most this many seconds: well inside the timeouts
# of the usual HTTP clients and proxies (python-zaqarclient's, nginx's 60 s).
MAX_CLAIM_WAIT = 20
MIN_SUBSCRIPTION_TTL = 60  # Zaqar's
MAX_SUBSCRIBER_LENGTH = 2048
SUBSCRIBER_SCHEMES = ("http", "https")
SUBSCRIPTION_FIELDS = ("subscriber", "ttl", "options")
# A subscription ttl must leave its expiry a valid time (Zaqar's bound is the largest
# datetime); a century is far beyond any use.
MAX_SUBSCRIPTION_TTL = 100 * 365 * 86400


_TRANSPORT = {opt.dest: opt.default for opt in transport_opts}
_QUOTAS = {opt.dest: opt.default for opt in quotas_opts}


@dataclass(frozen=True, slots=True)
class Limits:
    """The operator's limits and defaults, read once from configuration; the defaults
    are the options' own (``delayq.conf.transport_opts``)."""

    default_message_ttl: int = _TRANSPORT["default_message_ttl"]
    default_message_delay: int = _TRANSPORT["default_message_delay"]
    default_claim_ttl: int = _TRANSPORT["default_claim_ttl"]
    default_claim_grace: int = _TRANSPORT["default_claim_grace"]
    max_queues_per_page: int = _TRANSPORT["max_queues_per_page"]
    max_messages_per_page: int = _TRANSPORT["max_messages_per_page"]
    max_messages_per_claim_or_pop: int = _TRANSPORT["max_messages_per_claim_or_pop"]
    max_queue_metadata: int = _TRANSPORT["max_queue_metadata"]
    max_messages_post_size: int = _TRANSPORT["max_messages_post_size"]
    max_message_ttl: int = _TRANSPORT["max_message_ttl"]
    max_message_delay: int = _TRANSPORT["max_message_delay"]
    max_claim_ttl: int = _TRANSPORT["max_claim_ttl"]
    max_claim_grace: int = _TRANSPORT["max_claim_grace"]
    default_subscription_ttl: int = _TRANSPORT["default_subscription_ttl"]
    max_subscriptions_per_page: int = _TRANSPORT["max_subscriptions_per_page"]
    client_id_uuid_safe: str = _TRANSPORT["client_id_uuid_safe"]
    min_length_client_id: int = _TRANSPORT["min_length_client_id"]
    max_length_client_id: int = _TRANSPORT["max_length_client_id"]
    message_delete_with_claim_id: bool = _TRANSPORT["message_delete_with_claim_id"]
    idempotency_window: int = _TRANSPORT["idempotency_window"]

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Limits:
        group = conf[TRANSPORT_GROUP]
        limits = cls(**{name: group[name] for name in cls.__dataclass_fields__})
        limits.check()
        return limits

    def check(self) -> None:
        """Refuse defaults beyond their limits: clients would be blamed for them."""
        for default, limit in (("default_message_ttl", "max_message_ttl"),
                               ("default_message_delay", "max_message_delay"),
                               ("default_claim_ttl", "max_claim_ttl"),
                               ("default_claim_grace", "max_claim_grace")):
            if getattr(self, default) > getattr(self, limit):
                raise ValueError(f"[{TRANSPORT_GROUP}] {default} = {getattr(self, default)} "
                                 f"is above {limit} = {getattr(self, limit)}.")
        if self.min_length_client_id > self.max_length_client_id:
            raise ValueError(f"[{TRANSPORT_GROUP}] min_length_client_id = "
                             f"{self.min_length_client_id} is above max_length_client_id = "
                             f"{self.max_length_client_id}: no Client-ID would do.")


@dataclass(frozen=True, slots=True)
class Quotas:
    """The operator's quotas (``[quotas]``), read once from configuration; 0 is no limit.

    The broker applies them: the queue quota before a request creates a queue, the
    message quota inside the driver's post (``Driver.post_messages``' *message_quota*).
    """

    max_queues_per_project: int = _QUOTAS["max_queues_per_project"]
    max_messages_per_queue: int = _QUOTAS["max_messages_per_queue"]

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Quotas:
        group = conf[QUOTAS_GROUP]
        return cls(**{name: group[name] for name in cls.__dataclass_fields__})


def _is_int(value: Any) -> bool:
    # JSON true/false arrive as bool, a subclass of int: they are not integers here.
    return isinstance(value, int) and not isinstance(value, bool)


def integer(value: Any, name: str, low: int, high: int | None = None) -> int:
    """*value* as an int within ``low..high``, or a ValidationError naming *name*."""
    # JSON gives exactly int (never a subclass other than bool): one test for the usual.
    if type(value) is int and low <= value and (high is None or value <= high):
        return value
    if not _is_int(value):
        raise ValidationError(f"{name} must be an integer, not {json.dumps(value)}.")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValidationError(f"{name} must be {bounds}; got {value}.")
    return value


def query_integer(raw: str | None, name: str, low: int, high: int, default: int) -> int:
    """A query-string integer parameter, *default* when absent."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"{name} must be an integer; got {raw!r}.") from None
    return integer(value, name, low, high)


def claim_wait(raw: str | None) -> int:
    """The ``wait`` query parameter of a claim: seconds to wait for messages, 0 when absent."""
    return query_integer(raw, "wait", 0, MAX_CLAIM_WAIT, 0)


def query_bool(raw: str | None, name: str) -> bool:
    """A query-string boolean parameter (``true``/``false``), false when absent."""
    if raw is None or raw == "":
        return False
    lowered = raw.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValidationError(f"{name} must be true or false; got {raw!r}.")


# A listing marker of up to 19 digits is a position (what a next link carries); any
# other is a message id, as Zaqar's API reference shows a marker. No message id is that
# short and all digits (a Redis id from before ids had tokens has 18 base-36 digits: all
# decimal once in 10^10), so the two do not meet.
POSITION_MARKER = re.compile(r"[0-9]{1,19}")
MAX_POSITION = 2**63 - 1  # the largest position a 64-bit store holds


def listing_marker(marker: str | None, is_message_id: Callable[[str], bool]
                   ) -> ListingMarker:
    """The ``marker`` of a message listing: a position, or a message id that
    *is_message_id* (the store's ``Messages.is_message_id``) finds well formed; anything
    else is a client's mistake, not a message that happens to be missing."""
    if not marker:
        return LISTING_START
    if POSITION_MARKER.fullmatch(marker):
        if int(marker) <= MAX_POSITION:
            return ListingMarker(position=int(marker))
    elif is_message_id(marker):
        return ListingMarker(message_id=marker)
    raise ValidationError(f"marker {marker[:40]!r} is not valid: give a message id or the "
                          "marker of a listing's next link.")


def queue_name(name: str) -> str:
    if not q.is_valid_name(name):
        raise ValidationError(
            f"Queue name {name[:80]!r} is invalid: use 1 to 64 letters, digits, "
            "underscores, hyphens or dots (not . or .. alone).")
    return name


# The query parameters of GET /v2/queues that are not metadata filters (Zaqar's).
QUEUE_LISTING_PARAMETERS = ("marker", "limit", "detailed", "name", "with_count")
INTEGER = re.compile(r"[+-]?[0-9]+")


def queue_filter(params: Mapping[str, str | list[str]]) -> q.QueueFilter:
    """The filter of a queue listing's query *params*, as Zaqar reads them: ``name``, a
    part of the names listed; every parameter but ``QUEUE_LISTING_PARAMETERS``, a
    metadata key and the value it must have (an integer when it reads as one, else the
    string)."""
    single: dict[str, str] = {}
    for key, value in params.items():
        if isinstance(value, list):
            raise ValidationError(f"Query parameter {key[:40]!r} is given more than once.")
        single[key] = value
    name = single.get("name") or None
    metadata = tuple(sorted(
        (key, int(value) if INTEGER.fullmatch(value) else value)
        for key, value in single.items() if key not in QUEUE_LISTING_PARAMETERS))
    return q.QueueFilter(name, metadata)


MAX_IDEMPOTENCY_KEY = 255
# Visible ASCII but the double quote and the backslash, which a quoted key cannot hold.
IDEMPOTENCY_KEY = re.compile(rf"[!#-\[\]-~]{{1,{MAX_IDEMPOTENCY_KEY}}}")


def idempotency_key(value: str | None) -> str | None:
    """The ``Idempotency-Key`` header of a message post: 1 to 255 visible ASCII
    characters but ``"`` and ``\\``, bare or in double quotes (the key of ``"k1"`` is
    ``k1``, as a structured-field string); None when absent."""
    if value is None:
        return None
    key = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    if not IDEMPOTENCY_KEY.fullmatch(key):
        raise ValidationError(
            f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters "
            f"(no spaces, quotes or backslashes), bare or in double quotes; got "
            f"{value[:80]!r}.", title="Invalid Idempotency-Key")
    return key


def project_id(value: str | None) -> str:
    """The project scope (the X-Project-ID header): required and not empty, with
    Zaqar's errors, since a request without it would act in a project nobody named."""
    if value is None:
        raise ValidationError("The header X-PROJECT-ID was missing",
                              title="Project-Id Missing")
    if not value:
        raise ValidationError("X-PROJECT-ID cannot be an empty string. Specify the right "
                              "header X-PROJECT-ID and retry.",
                              title="Empty project header not allowed")
    if len(value) > MAX_PROJECT_ID_LENGTH:
        raise ValidationError(
            f"X-Project-ID must be at most {MAX_PROJECT_ID_LENGTH} characters.")
    return value


def client_id(value: str | None, limits: Limits) -> str:
    """The Client-ID header, required on message and claim requests: a UUID, or with
    ``client_id_uuid_safe = off`` any string of ``min_length_client_id`` to
    ``max_length_client_id`` characters. A UUID is given in its canonical form either
    way."""
    if not value:
        raise ValidationError("The Client-ID header is required on message and claim "
                              "requests: send a UUID in it.", title="Missing header value")
    canonical = _canonical_uuid(value)
    if limits.client_id_uuid_safe == CLIENT_ID_STRICT:
        if canonical is None:
            raise ValidationError(f"Client-ID must be a UUID; got {value[:80]!r}.",
                                  title="Wrong UUID value")
        return canonical
    low, high = limits.min_length_client_id, limits.max_length_client_id
    if not low <= len(value) <= high:
        raise ValidationError(f"Client-ID must be {low} to {high} characters long; got "
                              f"{len(value)}.", title="Wrong client ID length")
    return canonical or value


@functools.lru_cache(maxsize=4096)
def _canonical_uuid(value: str) -> str | None:
    # A client sends the same Client-ID with every request; parsing it each time was a
    # noticeable share of a request's CPU.
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def json_document(raw: bytes, what: str) -> Any:
    """Decode a JSON request body; *what* names it in the error."""
    if not raw or raw.isspace():  # raw.strip(), without a copy
        raise ValidationError(f"The {what} is empty; it must be a JSON document.")
    try:
        try:
            # Nearly every body is UTF-8: decoded as such without json.loads's sniffing
            # of UTF-16 and UTF-32, which cost as much as decoding a small body.
            return jsontext.loads_strict(raw.decode("utf-8", "surrogatepass"))
        except ValueError:  # UnicodeDecodeError too: it is a ValueError
            # As json.loads(raw) does: another encoding, or a byte-order mark, is read
            # right; invalid JSON in UTF-8 fails here again and is reported as such.
            return jsontext.loads_strict(
                raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError(f"The {what} is not valid JSON: {exc}.",
                              title="Invalid request body") from None
    except RecursionError:
        raise ValidationError(f"The {what} is nested too deeply.",
                              title="Invalid request body") from None


def queue_metadata(metadata: Any, limits: Limits, queue: str) -> dict[str, Any]:
    """Check a whole queue metadata document, reserved attributes included.

    Reserved attributes set to null are dropped: null means "unset".
    """
    if not isinstance(metadata, dict):
        raise ValidationError("Queue metadata must be a JSON object.")
    size = len(json.dumps(metadata, separators=(",", ":")).encode())
    if size > limits.max_queue_metadata:
        raise ValidationError(f"Queue metadata is {size} bytes; the limit is "
                              f"{limits.max_queue_metadata}.")
    checked = {k: v for k, v in metadata.items()
               if not (k in q.RESERVED_ATTRIBUTES and v is None)}
    ranges = {
        q.DEFAULT_MESSAGE_TTL: (MIN_MESSAGE_TTL, limits.max_message_ttl),
        q.MAX_MESSAGES_POST_SIZE: (1, limits.max_messages_post_size),
        q.DEFAULT_MESSAGE_DELAY: (0, limits.max_message_delay),
        q.MAX_CLAIM_COUNT: (1, None),
        q.DEAD_LETTER_QUEUE_MESSAGES_TTL: (MIN_MESSAGE_TTL, limits.max_message_ttl),
    }
    for name, (low, high) in ranges.items():
        if name in checked:
            integer(checked[name], name, low, high)
    if q.DEAD_LETTER_QUEUE in checked:
        target = checked[q.DEAD_LETTER_QUEUE]
        if not isinstance(target, str) or not q.is_valid_name(target):
            raise ValidationError(f"{q.DEAD_LETTER_QUEUE} must be a valid queue name; "
                                  f"got {json.dumps(target)[:80]}.")
        if target == queue:
            raise ValidationError(f"{q.DEAD_LETTER_QUEUE} must name another queue, "
                                  "not the queue itself.")
    has_count = q.MAX_CLAIM_COUNT in checked
    has_target = q.DEAD_LETTER_QUEUE in checked
    if has_count != has_target:
        missing = q.DEAD_LETTER_QUEUE if has_count else q.MAX_CLAIM_COUNT
        present = q.MAX_CLAIM_COUNT if has_count else q.DEAD_LETTER_QUEUE
        raise ValidationError(f"{present} is set but {missing} is not: a dead-letter "
                              "policy needs both.")
    if q.DEAD_LETTER_QUEUE_MESSAGES_TTL in checked and not has_target:
        raise ValidationError(f"{q.DEAD_LETTER_QUEUE_MESSAGES_TTL} needs "
                              f"{q.DEAD_LETTER_QUEUE} and {q.MAX_CLAIM_COUNT}.")
    if q.ENCRYPT_MESSAGES in checked and type(checked[q.ENCRYPT_MESSAGES]) is not bool:
        # As Zaqar: a string "yes" is no switch a client could rely on.
        raise ValidationError(f"{q.ENCRYPT_MESSAGES} must be a boolean; got "
                              f"{json.dumps(checked[q.ENCRYPT_MESSAGES])[:80]}.")
    if retry.RETRY_POLICY in checked:
        if checked[retry.RETRY_POLICY] is None:
            del checked[retry.RETRY_POLICY]
        else:
            retry.parse(checked[retry.RETRY_POLICY], retry.RETRY_POLICY,
                        limits.max_message_delay)
    return checked


@dataclass(slots=True)  # read-only, though not frozen: see delayq.message
class PostedMessage:
    """One message of a post request, checked but with delay and ttl not yet resolved."""

    body: Any
    ttl: int | None
    delay: int | None
    #: ``deliver_at`` as POSIX seconds; the broker turns it into a delay.
    deliver_at: float | None = None


# RFC 3339's date-time: a full date and time with seconds and an offset ("Z" for UTC).
# datetime.fromisoformat alone would also take ISO forms RFC 3339 lacks (a bare date,
# no offset, basic format).
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def rfc3339(value: Any, name: str) -> float:
    """*value*, an RFC 3339 date-time string, as POSIX seconds."""
    text = value if isinstance(value, str) else None
    if text is None or not RFC3339.fullmatch(text):
        raise ValidationError(f"{name} must be an RFC 3339 date-time such as "
                              f'"2026-11-24T18:30:00Z", not {json.dumps(value)[:60]}.')
    whole, _, rest = text.partition(".")
    digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]
    # fromisoformat takes at most microseconds: the rest of a longer fraction is cut.
    trimmed = whole + ("." + digits[:6] if digits else "") + rest[len(digits):]
    try:
        return datetime.fromisoformat(trimmed.replace("z", "Z").replace("t", "T")).timestamp()
    except (ValueError, OverflowError):
        raise ValidationError(f"{name} is not a valid date-time: {text}.") from None


def delay_until(deliver_at: float, now: float, limit: int, name: str) -> float:
    """The delay, in seconds (whole milliseconds, rounded up), that makes a message due
    at *deliver_at* when stored at *now*: never early. A moment past is no delay."""
    ahead = deliver_at - now
    if ahead > limit:
        raise ValidationError(f"{name} is {ahead:.0f} seconds ahead; at most "
                              f"max_message_delay ({limit}) seconds ahead is allowed.")
    return max(0.0, math.ceil(ahead * 1000) / 1000)


def own_delay(document: dict[str, Any], limits: Limits, prefix: str, owner: str
              ) -> tuple[int | None, float | None]:
    """``(delay, deliver_at)`` of a posted message or a message edit, checked; a null
    counts as absent. *prefix* goes in front of the field names in errors, *owner* names
    the document."""
    delay = document.get("delay")
    if delay is not None:
        integer(delay, f"{prefix}delay", 0, limits.max_message_delay)
    deliver_at = document.get("deliver_at")
    if deliver_at is None:
        return delay, None
    if delay is not None:
        raise ValidationError(f"{owner} has both delay and deliver_at; give one.")
    return delay, rfc3339(deliver_at, f"{prefix}deliver_at")


def post_size(length: int, limit: int) -> None:
    if length > limit:
        raise ValidationError(f"The message post is {length} bytes; the limit is {limit}.")


def messages_post(document: Any, limits: Limits) -> list[PostedMessage]:
    """Check a message-post document ``{"messages": [...]}``."""
    if isinstance(document, dict):
        if "messages" not in document:
            raise ValidationError('The request body must be {"messages": [...]}.')
        messages = document["messages"]
    else:
        messages = document
    if not isinstance(messages, list):
        raise ValidationError("messages must be a JSON array of message objects.")
    if not messages:
        raise ValidationError("messages is empty: post at least one message.")
    # No count limit, as in Zaqar: a post is bounded by its size in bytes
    # (max_messages_post_size, checked before the body is parsed), which is what the
    # server's memory and the store's write pay for.
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "body" not in message:
            where = f"messages[{index}]"
            if not isinstance(message, dict):
                raise ValidationError(f"{where} must be a JSON object.")
            raise ValidationError(f"{where}.body is missing.")
        ttl = message.get("ttl")
        if ttl is not None and not (type(ttl) is int and
                                    MIN_MESSAGE_TTL <= ttl <= limits.max_message_ttl):
            integer(ttl, f"messages[{index}].ttl", MIN_MESSAGE_TTL, limits.max_message_ttl)
        if "delay" in message or "deliver_at" in message:
            where = f"messages[{index}]"
            delay, deliver_at = own_delay(message, limits, f"{where}.", where)
        else:  # the usual post: the names in errors are made only when needed
            delay = deliver_at = None
        if encryption.is_sealed(message["body"]):
            unsealable(f"messages[{index}].body")
        checked.append(PostedMessage(message["body"], ttl, delay, deliver_at))
    return checked


def unsealable(where: str) -> None:
    """Refuse a body shaped as an encrypted body is stored: read back, it would be taken
    for one and fail to decrypt, for every reader of its queue."""
    raise ValidationError(f"{where} may not be an object whose only member is "
                          f"{encryption.SEALED!r}: delayq stores encrypted bodies so.")


# The fields of a message edit (PATCH of one message), in the order errors name them.
EDIT_FIELDS = ("body", "delay", "deliver_at")


@dataclass(frozen=True, slots=True)
class MessageEdit:
    """A checked message edit: what changes, with the delay not yet resolved."""

    body: Any | Unchanged = NO_CHANGE
    delay: int | None = None
    #: ``deliver_at`` as POSIX seconds; the broker turns it into a delay.
    deliver_at: float | None = None


def message_edit(document: Any, limits: Limits) -> MessageEdit:
    """Check a message edit ``{"body", "delay", "deliver_at"}`` (any of them).

    A null ``delay`` or ``deliver_at`` counts as absent, as in a post; a null ``body``
    is the body ``null``. The size of the new body is the broker's to check: the
    queue's own limit applies.
    """
    if not isinstance(document, dict):
        raise ValidationError("The message edit must be a JSON object with any of "
                              f"{', '.join(EDIT_FIELDS)}.")
    unknown = sorted(set(document) - set(EDIT_FIELDS))
    if unknown:
        names = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise ValidationError(f"Unknown message edit field(s) {names}: use "
                              f"{', '.join(EDIT_FIELDS)}.")
    if "body" not in document and document.get("delay") is None \
            and document.get("deliver_at") is None:
        raise ValidationError("The message edit changes nothing: give any of "
                              f"{', '.join(EDIT_FIELDS)}.")
    delay, deliver_at = own_delay(document, limits, "", "The message edit")
    if encryption.is_sealed(document.get("body")):
        unsealable("body")
    return MessageEdit(document.get("body", NO_CHANGE), delay, deliver_at)


def body_size(body: Any, limit: int) -> None:
    """Refuse a message body (an edit's) whose compact UTF-8 JSON is over *limit*."""
    size = len(json.dumps(body, ensure_ascii=False, separators=(",", ":"))
               .encode(errors="surrogatepass"))
    if size > limit:
        raise ValidationError(f"The message body is {size} bytes; the limit is {limit} "
                              "(max_messages_post_size).")


def redrive_options(document: Any) -> tuple[str | None, int]:
    """``(destination, limit)`` of a redrive request body; ``{}`` takes the defaults."""
    if not isinstance(document, dict):
        raise ValidationError("The redrive body must be a JSON object.")
    unknown = sorted(set(document) - {"destination", "limit"})
    if unknown:
        raise ValidationError(f"Unknown redrive option {unknown[0][:40]!r}: use destination "
                              "and limit.")
    destination = document.get("destination")
    if destination is not None and not isinstance(destination, str):
        raise ValidationError("destination must be a queue name.")
    limit = document.get("limit")
    return destination, DEFAULT_REDRIVE if limit is None else limit


def redrive(queue: str, destination: str | None, limit: int) -> None:
    """Check a redrive of *queue* to *destination* moving at most *limit* messages."""
    if destination is not None:
        try:
            queue_name(destination)
        except ValidationError as exc:
            raise ValidationError(f"destination: {exc}") from None
        if destination == queue:
            raise ValidationError("destination is the queue being redriven.")
    integer(limit, "limit", 1, MAX_REDRIVE)


def claim_options(document: Any, limits: Limits) -> tuple[int, int]:
    """``(ttl, grace)`` of a claim create or renew body, defaults filled in.

    A null value means the default: python-zaqarclient sends ``{"ttl": null,
    "grace": null}`` when its caller gives neither.
    """
    if not isinstance(document, dict):
        raise ValidationError("The claim body must be a JSON object.")
    ttl = document.get("ttl")
    grace = document.get("grace")
    ttl = limits.default_claim_ttl if ttl is None else ttl
    grace = limits.default_claim_grace if grace is None else grace
    integer(ttl, "ttl", MIN_CLAIM_TTL, limits.max_claim_ttl)
    integer(grace, "grace", MIN_CLAIM_GRACE, limits.max_claim_grace)
    return ttl, grace


def release_delay(document: Any, limits: Limits) -> int:
    """The delay of a message handed back by its claim (PATCH with ``claim_id``):
    ``{"delay": seconds}``, 0 to ``max_message_delay``."""
    if not isinstance(document, dict) or set(document) != {"delay"}:
        raise ValidationError('A message PATCH with claim_id hands the message back: its '
                              'body is {"delay": seconds}, and nothing else.')
    return integer(document["delay"], "delay", 0, limits.max_message_delay)


def subscriber(value: Any) -> str:
    """A subscriber: an http:// or https:// URL with a host, or mailto: an address."""
    if not isinstance(value, str) or len(value) > MAX_SUBSCRIBER_LENGTH:
        raise ValidationError(f"subscriber must be a URL of at most "
                              f"{MAX_SUBSCRIBER_LENGTH} characters.")
    try:
        parsed = urlsplit(value)
        parsed.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        raise ValidationError(f"subscriber {value[:100]!r} is not a valid URL.") from None
    if parsed.scheme == "mailto":
        if not _MAIL_ADDRESS.fullmatch(parsed.path):
            raise ValidationError(f"subscriber {value[:100]!r} is not a mailto: URL with "
                                  f"one address (mailto:name@example.com).")
        if not all(_header_safe(v) for values in parse_qs(parsed.query).values()
                   for v in values):
            raise ValidationError("A mailto: subscriber's subject may not hold line "
                                  "breaks.")
        return value
    if parsed.scheme not in SUBSCRIBER_SCHEMES or not parsed.hostname:
        raise ValidationError(f"subscriber must be an http:// or https:// URL with a host "
                              f"(a webhook) or a mailto: URL with one address; got "
                              f"{value[:100]!r}.")
    return value


MAIL_OPTIONS = ("from", "subject")  # Zaqar's mailto options
# One address, no display name, nothing a header could be split on.
_MAIL_ADDRESS = re.compile(r"[^@\s,;<>\"]+@[^@\s,;<>\"]+")


def subscription_options(options: Any, limits: Limits) -> dict[str, Any]:
    """A subscription's options: any JSON object; ``post_data`` (a string, where
    ``"$zaqar_message$"`` stands for the message), ``post_headers`` (an object of
    strings) and ``_retry_policy`` are checked."""
    if not isinstance(options, dict):
        raise ValidationError("options must be a JSON object.")
    if "post_data" in options and not isinstance(options["post_data"], str):
        raise ValidationError('options.post_data must be a string, the body pushed, in '
                              'which "$zaqar_message$" stands for the message.')
    headers = options.get("post_headers")
    if headers is not None and not (
            isinstance(headers, dict)
            and all(isinstance(k, str) and HEADER_NAME.fullmatch(k)
                    and isinstance(v, str) and _header_safe(v)
                    for k, v in headers.items())):
        raise ValidationError("options.post_headers must be an object of header names "
                              "and string values, without line breaks.")
    for name in MAIL_OPTIONS:
        # Mail headers of a mailto: subscriber's mails: a line break would forge others.
        if name in options and not (isinstance(options[name], str)
                                    and _header_safe(options[name])):
            raise ValidationError(f"options.{name} must be a string without line breaks "
                                  f"(the {name.capitalize()} of mails to mailto: "
                                  f"subscribers).")
    if options.get(retry.RETRY_POLICY) is not None:
        retry.parse(options[retry.RETRY_POLICY], f"options.{retry.RETRY_POLICY}",
                    limits.max_message_delay)
    size = len(json.dumps(options, separators=(",", ":")).encode())
    if size > limits.max_queue_metadata:
        raise ValidationError(f"options are {size} bytes; the limit is "
                              f"{limits.max_queue_metadata} (max_queue_metadata).")
    return options


# RFC 9110's token: the characters a header field name may have.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _header_safe(text: str) -> bool:
    return "\r" not in text and "\n" not in text and "\0" not in text


def _subscription_document(document: Any, what: str) -> dict[str, Any]:
    if not isinstance(document, dict) or not document:
        raise ValidationError(f"The {what} must be a JSON object with any of "
                              f"{', '.join(SUBSCRIPTION_FIELDS)}.")
    unknown = sorted(set(document) - set(SUBSCRIPTION_FIELDS))
    if unknown:
        raise ValidationError(f"Unknown subscription field {unknown[0][:40]!r}: use "
                              f"{', '.join(SUBSCRIPTION_FIELDS)}.")
    return document


def subscription_ttl(value: Any) -> int:
    return integer(value, "ttl", MIN_SUBSCRIPTION_TTL, MAX_SUBSCRIPTION_TTL)


def new_subscription(document: Any, limits: Limits) -> tuple[str, int, dict[str, Any]]:
    """``(subscriber, ttl, options)`` of a subscription create body, defaults filled in."""
    document = _subscription_document(document, "subscription")
    if "subscriber" not in document:
        raise ValidationError("subscriber is required: the URL messages are pushed to.")
    ttl = document.get("ttl")
    options = document.get("options")
    return (subscriber(document["subscriber"]),
            limits.default_subscription_ttl if ttl is None else subscription_ttl(ttl),
            {} if options is None else subscription_options(options, limits))


def subscription_confirming(document: Any) -> bool:
    """The ``confirmed`` of a confirm request (Zaqar's ``{"confirmed": true|false}``):
    a boolean, and nothing else in the document."""
    if not isinstance(document, dict) or "confirmed" not in document:
        raise ValidationError('A confirmation is a JSON object {"confirmed": true} or '
                              '{"confirmed": false}.')
    unknown = sorted(set(document) - {"confirmed"})
    if unknown:
        raise ValidationError(f"Unknown confirmation field {unknown[0][:40]!r}: use "
                              f"confirmed.")
    confirmed = document["confirmed"]
    if not isinstance(confirmed, bool):
        raise ValidationError("confirmed must be a boolean (true or false).")
    return confirmed


def subscription_change(document: Any, limits: Limits) -> SubscriptionChange:
    """What a subscription PATCH changes."""
    document = _subscription_document(document, "subscription update")
    ttl, options = document.get("ttl"), document.get("options")
    return SubscriptionChange(
        subscriber=None if document.get("subscriber") is None
        else subscriber(document["subscriber"]),
        ttl=None if ttl is None else subscription_ttl(ttl),
        options=None if options is None else subscription_options(options, limits))


def single_delete(claim_id: str | None, limits: Limits) -> None:
    """Refuse a delete of one message without *claim_id* when
    ``message_delete_with_claim_id`` asks for one."""
    if limits.message_delete_with_claim_id and claim_id is None:
        raise ValidationError("claim_id is required to delete a message: "
                              "message_delete_with_claim_id is on.")


def bulk_delete_claims(ids: list[str] | None, raw_claims: list[str] | None,
                       limits: Limits) -> list[str] | None:
    """The ``claim_ids`` of a delete by ``ids``: None unless
    ``message_delete_with_claim_id`` is on, when ``ids`` and ``claim_ids`` go together."""
    if not limits.message_delete_with_claim_id:
        return None
    claims = [part for item in raw_claims or () for part in item.split(",") if part]
    if (ids is None) != (not claims):
        raise ValidationError("ids and claim_ids go together: message_delete_with_claim_id "
                              "is on, so a delete by ids names the claims holding them.")
    return list(dict.fromkeys(claims)) or None


def message_ids(raw: list[str], limits: Limits) -> list[str]:
    """The ``ids`` query parameter (comma-separated or repeated), no more than a page."""
    ids = list(dict.fromkeys(part for item in raw for part in item.split(",") if part))
    if not ids:
        raise ValidationError("ids must list at least one message id.")
    if len(ids) > limits.max_messages_per_page:
        raise ValidationError(f"ids lists {len(ids)} messages; the limit is "
                              f"{limits.max_messages_per_page}.")
    return ids
