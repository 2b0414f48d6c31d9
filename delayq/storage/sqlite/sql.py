"""Every SQL statement of the SQLite driver.

The ``messages.available`` column is the heart of the schema: the instant a message
next becomes claimable, ``max(due, claim_expires)``. The index on
``(queue_id, available, seq)`` therefore holds the claimable messages of a queue as one
contiguous range (``available <= now``), ahead of every delayed or claimed one, so a claim
or a pop reads only what it returns, however many delayed or claimed messages wait.
"""

from delayq import events, tallies

PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA foreign_keys = OFF",
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS queues (
    id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    name TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created REAL NOT NULL,
    UNIQUE (project, name)
);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    queue_id INTEGER NOT NULL,
    body TEXT NOT NULL,
    ttl INTEGER NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    due REAL NOT NULL,
    available REAL NOT NULL,
    client_id TEXT NOT NULL,
    claim_id TEXT,
    claim_expires REAL NOT NULL DEFAULT 0,
    claim_count INTEGER NOT NULL DEFAULT 0,
    source_queue TEXT,
    moved_at REAL
);
CREATE INDEX IF NOT EXISTS messages_available ON messages (queue_id, available, seq);
CREATE INDEX IF NOT EXISTS messages_queue ON messages (queue_id);
CREATE INDEX IF NOT EXISTS messages_expires ON messages (expires);
CREATE INDEX IF NOT EXISTS messages_claim ON messages (claim_id) WHERE claim_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS claims (
    id TEXT PRIMARY KEY,
    queue_id INTEGER NOT NULL,
    ttl INTEGER NOT NULL,
    grace INTEGER NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_expires ON claims (expires);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    project TEXT NOT NULL,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    time REAL NOT NULL,
    message_id TEXT,
    claim_id TEXT,
    claim_count INTEGER,
    due REAL,
    ttl INTEGER,
    expires REAL,
    source TEXT,
    target TEXT,
    body TEXT
);
CREATE INDEX IF NOT EXISTS events_queue ON events (project, queue, seq);
CREATE INDEX IF NOT EXISTS events_time ON events (time);
CREATE INDEX IF NOT EXISTS events_queue_time ON events (project, queue, time);
CREATE TABLE IF NOT EXISTS subscriptions (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    queue TEXT NOT NULL,
    subscriber TEXT NOT NULL,
    ttl INTEGER NOT NULL,
    options TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    confirmed INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS subscriptions_queue ON subscriptions (project, queue, id);
CREATE INDEX IF NOT EXISTS subscriptions_subscriber
    ON subscriptions (project, queue, subscriber);
CREATE INDEX IF NOT EXISTS subscriptions_expires ON subscriptions (expires);
CREATE TABLE IF NOT EXISTS post_keys (
    queue_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    digest TEXT NOT NULL,
    ids TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (queue_id, key)
);
CREATE INDEX IF NOT EXISTS post_keys_expires ON post_keys (expires);
"""

# Queues

QUEUE_ID = "SELECT id FROM queues WHERE project = ? AND name = ?"
QUEUE_METADATA = "SELECT metadata FROM queues WHERE project = ? AND name = ?"
QUEUE_INSERT = """
INSERT INTO queues (project, name, metadata, created) VALUES (?, ?, ?, ?)
ON CONFLICT (project, name) DO NOTHING
"""
QUEUE_SET_METADATA = "UPDATE queues SET metadata = ? WHERE project = ? AND name = ?"
QUEUE_DELETE = "DELETE FROM queues WHERE id = ?"
QUEUE_LIST = """
SELECT name, metadata FROM queues WHERE project = ? AND name > ? ORDER BY name LIMIT ?
"""
QUEUE_COUNT = "SELECT count(*) FROM queues WHERE project = ?"
# A live claim's message is claimed whatever its due time (a retry policy's claim sets
# it after the claim's end); a message no live claim holds is delayed until it is due.
QUEUE_STATS = """
SELECT coalesce(sum(due > :now AND claim_expires <= :now), 0),
       coalesce(sum(claim_expires > :now), 0),
       coalesce(sum(due <= :now AND claim_expires <= :now), 0)
FROM messages WHERE queue_id = :queue_id AND expires > :now
"""

# Messages

# The columns of every message read, in this order (the driver unpacks rows by it).
MESSAGE_COLUMNS = ("seq", "id", "body", "ttl", "created", "expires", "due", "client_id",
                   "claim_id", "claim_expires", "claim_count", "source_queue", "moved_at")
_MESSAGE_COLUMNS = ", ".join(MESSAGE_COLUMNS)

MESSAGE_INSERT = """
INSERT INTO messages (id, queue_id, body, ttl, created, expires, due, available, client_id)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
MESSAGES_BY_ID = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages
WHERE queue_id = ? AND expires > ? AND id IN (SELECT value FROM json_each(?))
ORDER BY seq
"""
# A listing marker's place: expired messages not reaped yet keep theirs.
MESSAGE_SEQ = "SELECT seq FROM messages WHERE queue_id = ? AND id = ?"
MESSAGE_CLAIM_STATE = """
SELECT seq, claim_id, claim_expires, claim_count FROM messages
WHERE queue_id = ? AND id = ? AND expires > ?
"""
MESSAGE_DELETE = "DELETE FROM messages WHERE seq = ?"
MESSAGES_DELETE_BY_ID = """
DELETE FROM messages WHERE queue_id = ? AND id IN (SELECT value FROM json_each(?))
RETURNING id, claim_count, expires
"""
MESSAGES_DELETE_QUEUE = "DELETE FROM messages WHERE queue_id = ?"
MESSAGES_OLDEST = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages WHERE queue_id = ? AND expires > ?
ORDER BY seq LIMIT 1
"""
MESSAGES_NEWEST = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages WHERE queue_id = ? AND expires > ?
ORDER BY seq DESC LIMIT 1
"""

# No live claim holds the message (claim_expires is 0 for a message never claimed or
# released).
NOT_HELD = "claim_expires <= :now"


def messages_page(*, exclude_client: bool, include_claimed: bool,
                  include_delayed: bool) -> str:
    """The listing query; parameters: queue_id, marker seq, now, [client_id], limit."""
    conditions = ["queue_id = :queue_id", "seq > :marker", "expires > :now"]
    if exclude_client:
        conditions.append("client_id != :client_id")
    if not include_claimed:
        conditions.append(NOT_HELD)
    if not include_delayed:
        conditions.append("(due <= :now OR claim_expires > :now)")
    return (f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE {' AND '.join(conditions)} "
            "ORDER BY seq LIMIT :limit")


# Claimable messages, oldest availability first: one range of messages_available.
CLAIMABLE = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages INDEXED BY messages_available
WHERE queue_id = ? AND available <= ?
ORDER BY available, seq LIMIT ?
"""
# When a queue's next message is claimable: the first entry of its messages_available.
NEXT_AVAILABLE = """
SELECT available FROM messages INDEXED BY messages_available
WHERE queue_id = (SELECT id FROM queues WHERE project = ? AND name = ?)
ORDER BY available, seq LIMIT 1
"""
# RETURNING hands back the claimed message as stored, so a claim reads no row twice.
# :due, when not NULL, is when the message is due again should the claim end (a retry
# policy's wait after the claim's expiry).
MESSAGE_CLAIM = f"""
UPDATE messages
SET claim_id = :claim_id, claim_expires = :claim_expires,
    due = coalesce(:due, due), available = max(:claim_expires, coalesce(:due, due)),
    claim_count = claim_count + 1, expires = max(expires, :claim_expires + :grace)
WHERE seq = :seq
RETURNING {_MESSAGE_COLUMNS}
"""
# One message handed back by the claim holding it, due at :due.
MESSAGE_RELEASE = f"""
UPDATE messages SET claim_id = NULL, claim_expires = 0, due = :due, available = :due
WHERE seq = :seq
RETURNING {_MESSAGE_COLUMNS}
"""
MESSAGE_DEAD_LETTER = """
UPDATE messages
SET queue_id = :target, claim_id = NULL, claim_expires = 0, available = :now,
    source_queue = :source, moved_at = :now,
    ttl = coalesce(:ttl, ttl),
    expires = CASE WHEN :ttl IS NULL THEN created + ttl ELSE :now + :ttl END
WHERE seq = :seq
"""
# An edit applies only while no live claim holds the message; a new due time (when
# given) sets the availability too, as the message is free.
MESSAGE_EDIT = f"""
UPDATE messages
SET body = coalesce(:body, body), due = coalesce(:due, due),
    available = CASE WHEN :due IS NULL THEN available ELSE max(:due, claim_expires) END
WHERE seq = :seq AND {NOT_HELD}
RETURNING {_MESSAGE_COLUMNS}
"""
# A redrive takes every message no live claim holds, delayed ones too.
REDRIVABLE = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages INDEXED BY messages_available
WHERE queue_id = :queue AND {NOT_HELD} AND expires > :now
  AND (:anything OR source_queue IS NOT NULL)
ORDER BY available, seq LIMIT :limit
"""
MESSAGE_REDRIVE = """
UPDATE messages
SET queue_id = :target, claim_id = NULL, claim_expires = 0, claim_count = 0,
    due = min(due, :now), available = min(due, :now), source_queue = NULL, moved_at = NULL
WHERE seq = :seq
"""

# Idempotency keys of posts (delayq.idempotency): one row per key a queue keeps, written
# in the transaction of the post that stored it; a row past its expiry is no longer kept,
# and keyed posts remove such rows in batches.

POST_KEY = "SELECT digest, ids FROM post_keys WHERE queue_id = ? AND key = ? AND expires > ?"
POST_KEY_KEEP = """
INSERT OR REPLACE INTO post_keys (queue_id, key, digest, ids, expires) VALUES (?, ?, ?, ?, ?)
"""
POST_KEYS_FORGET = """
DELETE FROM post_keys WHERE rowid IN (SELECT rowid FROM post_keys WHERE expires <= ? LIMIT ?)
"""
POST_KEYS_DELETE_QUEUE = "DELETE FROM post_keys WHERE queue_id = ?"

# Claims

CLAIM_INSERT = """
INSERT INTO claims (id, queue_id, ttl, grace, created, expires) VALUES (?, ?, ?, ?, ?, ?)
"""
CLAIM_GET = """
SELECT id, ttl, grace, created, expires FROM claims
WHERE id = ? AND queue_id = ? AND expires > ?
"""
CLAIM_MESSAGES = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages
WHERE claim_id = ? AND queue_id = ? AND claim_expires > ? AND expires > ?
ORDER BY seq
"""
# The wait a retry policy gives a message after its attempt (its claim count):
# ``retry.Backoff.after`` in SQL, over :delays (a JSON array) and :dead_letter_at.
_WAIT = ("(CASE WHEN :dead_letter_at IS NOT NULL AND claim_count >= :dead_letter_at "
         "THEN 0 ELSE json_extract(:delays, '$[' || "
         "(min(claim_count, json_array_length(:delays)) - 1) || ']') END)")
CLAIM_RENEW = "UPDATE claims SET ttl = ?, grace = ?, expires = ? WHERE id = ?"
_RENEWED_DUE = f"(CASE WHEN :delays IS NULL THEN due ELSE :expires + {_WAIT} END)"
CLAIM_RENEW_MESSAGES = f"""
UPDATE messages
SET claim_expires = :expires, due = {_RENEWED_DUE},
    available = max(:expires, {_RENEWED_DUE}),
    expires = max(expires, :expires + :grace)
WHERE claim_id = :claim_id AND queue_id = :queue_id AND claim_expires > :now
"""
# Without a retry policy released messages are claimable at once.
_RELEASED_DUE = f"(CASE WHEN :delays IS NULL THEN min(due, :now) ELSE :now + {_WAIT} END)"
CLAIM_RELEASE_MESSAGES = f"""
UPDATE messages
SET claim_id = NULL, claim_expires = 0, due = {_RELEASED_DUE}, available = {_RELEASED_DUE}
WHERE claim_id = :claim_id AND queue_id = :queue_id AND claim_expires > :now
"""
CLAIM_DELETE = "DELETE FROM claims WHERE id = ? AND queue_id = ?"
CLAIMS_DELETE_QUEUE = "DELETE FROM claims WHERE queue_id = ?"

# Subscriptions

SUBSCRIPTION_COLUMNS = ("id", "queue", "subscriber", "ttl", "options", "created",
                        "expires", "confirmed")
_SUBSCRIPTION_COLUMNS = ", ".join(SUBSCRIPTION_COLUMNS)
SUBSCRIPTION_INSERT = f"""
INSERT INTO subscriptions (project, {_SUBSCRIPTION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
# A database made before subscriptions were confirmed gains the column; what it holds
# reads as confirmed (the column's default), as Zaqar reads a record without the field.
SUBSCRIPTION_COLUMN_NAMES = "SELECT name FROM pragma_table_info('subscriptions')"
SUBSCRIPTION_CONFIRMED_ADD = (
    "ALTER TABLE subscriptions ADD COLUMN confirmed INTEGER NOT NULL DEFAULT 1")
SUBSCRIPTION_OF_SUBSCRIBER = """
SELECT id FROM subscriptions
WHERE project = ? AND queue = ? AND subscriber = ? AND expires > ?
"""
SUBSCRIPTION_GET = f"""
SELECT {_SUBSCRIPTION_COLUMNS} FROM subscriptions
WHERE project = ? AND queue = ? AND id = ? AND expires > ?
"""
SUBSCRIPTIONS_PAGE = f"""
SELECT {_SUBSCRIPTION_COLUMNS} FROM subscriptions
WHERE project = ? AND queue = ? AND id > ? AND expires > ? ORDER BY id LIMIT ?
"""
SUBSCRIPTION_UPDATE = """
UPDATE subscriptions
SET subscriber = coalesce(:subscriber, subscriber), ttl = coalesce(:ttl, ttl),
    expires = coalesce(:expires, expires), options = coalesce(:options, options),
    confirmed = coalesce(:confirmed, confirmed)
WHERE project = :project AND queue = :queue AND id = :id AND expires > :now
"""
SUBSCRIPTION_DELETE = "DELETE FROM subscriptions WHERE project = ? AND queue = ? AND id = ?"
SUBSCRIPTIONS_DELETE_QUEUE = "DELETE FROM subscriptions WHERE project = ? AND queue = ?"
SUBSCRIBED_QUEUES = """
SELECT DISTINCT project, queue FROM subscriptions WHERE expires > ? ORDER BY 1, 2
"""
EXPIRED_SUBSCRIPTIONS_DELETE = """
DELETE FROM subscriptions WHERE id IN (SELECT id FROM subscriptions WHERE expires <= ? LIMIT ?)
"""

# Expiry: bounded batches on each write, served by the expiry indexes, so that expired
# rows disappear without a sweeper daemon and no single request pays for a large backlog.

EXPIRED_MESSAGES_DELETE = """
DELETE FROM messages WHERE seq IN (SELECT seq FROM messages WHERE expires <= ? LIMIT ?)
RETURNING queue_id, id, claim_count, expires
"""
EXPIRED_CLAIMS_DELETE = """
DELETE FROM claims WHERE id IN (SELECT id FROM claims WHERE expires <= ? LIMIT ?)
"""

# The event trail (delayq.events): one row per event, columns named as Event's fields
# and selected in their order, so a row read back is the Event's fields as a tuple.

EVENT_COLUMNS = events.FIELDS
EVENT_INSERT = f"""
INSERT INTO events ({", ".join(EVENT_COLUMNS)})
VALUES ({", ".join(":" + c for c in EVENT_COLUMNS)})
"""
EVENTS_FORGET = """
DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE time < ? LIMIT ?)
"""
EVENTS_OF_QUEUE = f"""
SELECT {", ".join(EVENT_COLUMNS)} FROM events WHERE project = ? AND queue = ? ORDER BY seq
"""
# INDEXED BY: the range of events_queue_time (sorted by seq afterwards) reads only the
# events after the time, however selective it is; statistics from an ANALYZE run by hand
# could otherwise make the planner walk the queue's whole events_queue range, already in
# seq order, to save that sort.
EVENTS_OF_QUEUE_AFTER = f"""
SELECT {", ".join(EVENT_COLUMNS)} FROM events INDEXED BY events_queue_time
WHERE project = ? AND queue = ? AND time > ? ORDER BY seq
"""
# The trail read into Arrow (trail.py, through ADBC): ADBC's SQLite driver takes each
# column's type from the values of a read's first batch, and a column that is null there
# (a queue whose first events are posts has no claim id) would be typed wrongly. Each
# read therefore starts with one row holding a value of the column's type in every
# column, which the reader drops.
EVENT_TYPE_SAMPLES = {
    "project": "''", "queue": "''", "kind": "''", "time": "0.0", "message_id": "''",
    "claim_id": "''", "claim_count": "0", "due": "0.0", "ttl": "0", "expires": "0.0",
    "source": "''", "target": "''", "body": "''",
}
assert tuple(EVENT_TYPE_SAMPLES) == EVENT_COLUMNS
EVENT_TYPES_ROW = "SELECT " + ", ".join(
    f"{sample} AS {column}" for column, sample in EVENT_TYPE_SAMPLES.items())
TYPED_EVENTS_OF_QUEUE = f"{EVENT_TYPES_ROW} UNION ALL SELECT * FROM ({EVENTS_OF_QUEUE})"
TYPED_EVENTS_OF_QUEUE_AFTER = (f"{EVENT_TYPES_ROW} UNION ALL "
                               f"SELECT * FROM ({EVENTS_OF_QUEUE_AFTER})")
QUEUE_NAMES = """
SELECT project, name FROM queues WHERE ?1 IS NULL OR project = ?1
UNION SELECT DISTINCT project, queue FROM events WHERE ?1 IS NULL OR project = ?1
ORDER BY 1, 2
"""
MESSAGES_OF_QUEUE = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages WHERE queue_id = ? AND expires > ? ORDER BY seq
"""
QUEUE_NAMES_BY_ID = """
SELECT id, project, name FROM queues WHERE id IN (SELECT value FROM json_each(?))
"""

# Tallies (``delayq.tallies``): queue counts (live, delayed, claimed) at any instant
# without reading messages. The instants below are ``tallies.instants`` in SQL; triggers
# keep ``tallies`` in the transaction of every change to messages, so every write path is
# covered. Blocks in the past are never read again and are removed in batches
# (TALLIES_FORGET).

TALLY_LIVE, TALLY_DELAYED, TALLY_CLAIMED = tallies.LIVE, tallies.DELAYED, tallies.CLAIMED
TALLY_LEVELS = tallies.LEVELS
TALLY_BITS = tallies.BITS
# name: (kind, instant, which messages have it, +1 or -1). A message posted without delay
# (due = created) is never delayed after its post, nor is a never-claimed one
# (claim_expires 0) claimed: leaving them out spares most writes most of the tally work.
# The last term takes back, until its claim ends, the delay of a message a claim made
# due after itself (a retry policy's wait).
_TALLY_TERMS = {
    "live": (TALLY_LIVE, "{r}.expires", "1", 1),
    "delayed": (TALLY_DELAYED, "min({r}.due, {r}.expires)", "{r}.due > {r}.created", 1),
    "claimed": (TALLY_CLAIMED, "min({r}.claim_expires, {r}.expires)",
                "{r}.claim_expires > 0", 1),
    "held": (TALLY_DELAYED, "min({r}.due, {r}.claim_expires, {r}.expires)",
             "{r}.due > {r}.created AND {r}.claim_expires > 0", -1),
}


def _tally_ms(term: str, row: str) -> str:
    return f"CAST({_TALLY_TERMS[term][1].format(r=row)} * 1000 AS INTEGER)"


def _tally_add(term: str, row: str, sign: int) -> str:
    kind, _, has, counted = _TALLY_TERMS[term]
    values = ", ".join(
        f"({row}.queue_id, {kind}, {level}, {_tally_ms(term, row)} >> "
        f"{TALLY_BITS * level}, {sign * counted})" for level in range(TALLY_LEVELS))
    return (f"INSERT INTO tallies (queue_id, kind, level, block, n) "
            f"SELECT * FROM (VALUES {values}) WHERE {has.format(r=row)} "
            "ON CONFLICT (queue_id, kind, level, block) DO UPDATE SET n = n + excluded.n;")


def _tally_triggers() -> list[str]:
    inserted = "\n".join(_tally_add(t, "NEW", 1) for t in _TALLY_TERMS)
    deleted = "\n".join(_tally_add(t, "OLD", -1) for t in _TALLY_TERMS)

    def changed(term: str) -> str:
        has = _TALLY_TERMS[term][2]
        return (f"OLD.queue_id IS NOT NEW.queue_id\n"
                f"  OR {_tally_ms(term, 'OLD')} IS NOT {_tally_ms(term, 'NEW')}\n"
                f"  OR ({has.format(r='OLD')}) IS NOT ({has.format(r='NEW')})")

    return [
        f"CREATE TRIGGER IF NOT EXISTS tallies_insert AFTER INSERT ON messages BEGIN\n"
        f"{inserted}\nEND",
        f"CREATE TRIGGER IF NOT EXISTS tallies_delete AFTER DELETE ON messages BEGIN\n"
        f"{deleted}\nEND",
        *(f"CREATE TRIGGER IF NOT EXISTS tallies_update_{term} AFTER UPDATE ON messages\n"
          f"WHEN {changed(term)}\nBEGIN\n"
          f"{_tally_add(term, 'OLD', -1)}\n{_tally_add(term, 'NEW', 1)}\nEND"
          for term in _TALLY_TERMS),
    ]


SCHEMA_MARKS = "CREATE TABLE IF NOT EXISTS schema_marks (name TEXT PRIMARY KEY)"
# Run in one write transaction, once per database (schema_marks records it).
TALLY_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS tallies (
    queue_id INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    level INTEGER NOT NULL,
    block INTEGER NOT NULL,
    n INTEGER NOT NULL,
    UNIQUE (queue_id, kind, level, block)
)""",
    "CREATE INDEX IF NOT EXISTS tallies_block ON tallies (level, block)",
]
TALLY_TRIGGERS = _tally_triggers()
# The triggers of a database whose tallies predate the held term: replaced by
# TALLY_TRIGGERS. No backfill is needed: the term is -1 at the earlier of a claimed
# message's due time and its claim's end, and every message stored before has either
# passed its due time when it was claimed or had its claim end before an edit delayed
# it, so its term lies in the past, which no count reads.
TALLY_TRIGGERS_DROP = [f"DROP TRIGGER IF EXISTS {name}" for name in (
    "tallies_insert", "tallies_delete", "tallies_update_0", "tallies_update_1",
    "tallies_update_2")]

_LEVEL_VALUES = ", ".join(f"({level})" for level in range(TALLY_LEVELS))
TALLIES_MARK = "tallies"
TALLY_TRIGGERS_MARK = "tallies-held"
TALLIES_MARKED = "SELECT 1 FROM schema_marks WHERE name = ?"
TALLIES_MARK_SET = "INSERT INTO schema_marks (name) VALUES (?)"
# A database made before tallies existed: count its messages once, in the transaction
# that creates the triggers (so no message is counted twice or missed).
TALLIES_BACKFILL = f"""
INSERT INTO tallies (queue_id, kind, level, block, n)
SELECT queue_id, kind, level, ms >> ({TALLY_BITS} * level), sum(n)
FROM ({" UNION ALL ".join(
    f"SELECT queue_id, {kind} AS kind, {_tally_ms(term, 'm')} AS ms, {counted} AS n "
    f"FROM messages m WHERE {has.format(r='m')}"
    for term, (kind, _, has, counted) in _TALLY_TERMS.items())})
CROSS JOIN (SELECT column1 AS level FROM (VALUES {_LEVEL_VALUES}))
WHERE true
GROUP BY 1, 2, 3, 4
ON CONFLICT (queue_id, kind, level, block) DO UPDATE SET n = n + excluded.n
"""
TALLIES_DELETE_QUEUE = "DELETE FROM tallies WHERE queue_id = ?"
# One range of one level: the blocks [start, end) of a kind (end None: no upper bound).
_TALLY_RANGE = ("SELECT coalesce(sum(n), 0) FROM tallies WHERE queue_id = :queue_id "
                "AND kind = {kind} AND level = {level} AND block >= :s{kind}_{level}{end}")


_TALLY_KINDS = tallies.KINDS


def tallies_after(kinds: tuple[int, ...] = _TALLY_KINDS) -> str:
    """The query of the counts of *kinds* (by default live, delayed and claimed), one
    column per kind in that order, one range per kind and level; parameters
    ``queue_id`` and ``s<kind>_<level>``/``e<kind>_<level>`` (the driver's
    ``tally_ranges``)."""
    columns = []
    for kind in kinds:
        parts = [_TALLY_RANGE.format(
            kind=kind, level=level,
            end="" if level == TALLY_LEVELS - 1 else f" AND block < :e{kind}_{level}")
            for level in range(TALLY_LEVELS)]
        columns.append("(" + " + ".join(f"({p})" for p in parts) + ")")
    return "SELECT " + ", ".join(columns)


TALLIES_AFTER = tallies_after()
# The queue's live messages alone, for the message quota of a post.
TALLIES_LIVE_AFTER = tallies_after((TALLY_LIVE,))
# Blocks that ended over an hour ago (clocks may step back a little), a batch per level.
TALLIES_FORGET = "DELETE FROM tallies WHERE rowid IN (" + " UNION ALL ".join(
    f"SELECT * FROM (SELECT rowid FROM tallies WHERE level = {level} AND block < :b{level} "
    "LIMIT :limit)" for level in range(TALLY_LEVELS)) + ")"
