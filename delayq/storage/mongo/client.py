"""The MongoDB driver's connection: the pymongo client and write concern made from the
options, and which failures mean "not now" (an election, a shutdown, a timeout, a server
out of reach, a changed password) rather than a bug or a bad request. Those are answered
with 503 naming only the store, so a client retries instead of giving up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pymongo
import pymongo.errors
from pymongo.client_session import ClientSession
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from delayq.storage.base.unavailable import Unavailability
from delayq.storage.mongo.options import GROUP

NAME = "mongodb"  # the store a 503 names

T = TypeVar("T")

# Server error codes that mean "not now" (elections, shutdowns, timeouts), not a bug.
UNAVAILABLE_CODES = frozenset({
    6,  # HostUnreachable
    7,  # HostNotFound
    89,  # NetworkTimeout
    91,  # ShutdownInProgress
    189,  # PrimarySteppedDown
    262,  # ExceededTimeLimit
    9001,  # SocketException
    10107,  # NotWritablePrimary
    11600,  # InterruptedAtShutdown
    11602,  # InterruptedDueToReplStateChange
    13435,  # NotPrimaryNoSecondaryOk
    13436,  # NotPrimaryOrSecondary
    50,  # MaxTimeMSExpired
    64,  # WriteConcernFailed
    18,  # AuthenticationFailed: a changed password is an outage for clients, not a bug
})
UNAVAILABLE = (pymongo.errors.ConnectionFailure, pymongo.errors.WriteConcernError,
               pymongo.errors.ExecutionTimeout, pymongo.errors.WTimeoutError)


def is_unavailable(exc: pymongo.errors.PyMongoError) -> bool:
    """True when *exc* says MongoDB cannot serve now (as opposed to a bad request)."""
    if isinstance(exc, UNAVAILABLE) or exc.has_error_label("RetryableWriteError"):
        return True
    if isinstance(exc, pymongo.errors.BulkWriteError):
        details = exc.details or {}
        return bool(details.get("writeConcernErrors")) or any(
            err.get("code") in UNAVAILABLE_CODES for err in details.get("writeErrors", ()))
    return isinstance(exc, pymongo.errors.OperationFailure) and exc.code in UNAVAILABLE_CODES


def is_missing_index(exc: pymongo.errors.PyMongoError) -> bool:
    """True when a query's hint names an index that is not there (dropped by hand)."""
    return (isinstance(exc, pymongo.errors.OperationFailure) and exc.code == 2
            and "hint" in str(exc))


def describe_unavailable(exc: BaseException) -> str | None:
    """What failed, when *exc* means MongoDB cannot serve now; None for anything else."""
    if isinstance(exc, pymongo.errors.PyMongoError) and is_unavailable(exc):
        return f"MongoDB is unavailable: {exc}"
    return None


unavailable = Unavailability(NAME, describe_unavailable)


def parse_write_concern(value: str) -> int | str:
    """``w`` from the option text: a member count or a tag set name like 'majority'.

    0 (unacknowledged writes) is refused: a claim must know what it wrote.
    """
    if value.isdigit():
        if int(value) == 0:
            raise ValueError(f"[{GROUP}] write_concern = 0 (unacknowledged writes) cannot "
                             "work: claims need to know which updates applied. Use "
                             "majority or a member count.")
        return int(value)
    return value


def make_client(uri: str, *, server_selection_timeout: float = 5.0,
                connect_timeout: float = 5.0, socket_timeout: float = 10.0,
                max_pool_size: int = 100) -> pymongo.MongoClient:
    """A pymongo client for *uri*; raises ValueError (without the password) when the
    connection string is malformed. It connects in the background: nothing here waits
    for MongoDB."""
    try:
        return pymongo.MongoClient(
            uri, serverSelectionTimeoutMS=int(server_selection_timeout * 1000),
            connectTimeoutMS=int(connect_timeout * 1000),
            socketTimeoutMS=int(socket_timeout * 1000), maxPoolSize=max_pool_size,
            retryWrites=True, retryReads=True, tz_aware=False, appname="delayq")
    except (pymongo.errors.ConfigurationError, ValueError, TypeError) as exc:
        detail = str(exc)
        userinfo = uri.partition("://")[2].rpartition("@")[0]
        if userinfo:
            detail = detail.replace(userinfo, "***")
        raise ValueError(f"[{GROUP}] uri is not a valid MongoDB connection string: "
                         f"{detail}") from None


def snapshot_transaction(client: pymongo.MongoClient,
                         write: Callable[[ClientSession], T],
                         write_concern: WriteConcern) -> T:
    """``write(session)`` as one transaction whose reads all see one snapshot (what the
    quotas' counts and the idempotency keys' look-ups need), committed with
    *write_concern*; what it returns. ``with_transaction`` runs it again after a write
    conflict, on a new snapshot."""
    with client.start_session() as session:
        return session.with_transaction(write, read_concern=ReadConcern("snapshot"),
                                        write_concern=write_concern)
