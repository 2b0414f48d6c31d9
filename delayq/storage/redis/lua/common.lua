-- Shared by every delayq script: the loader puts this text in front of each one.
--
-- A queue's keys share one hash tag, so each script touches one cluster slot. With the
-- queue prefix P (for instance 'dq:{proj/orders}:'):
--   P..'s'       HASH  meta (JSON), nonce, seq (message counter), cseq (claim counter),
--                      listed (set once the project catalogue lists the queue)
--   P..'b:'..n   HASH  seq -> record, 64 consecutive seqs per bucket (a compact listpack)
--   P..'bi'      ZSET  bucket numbers holding records (post order, for listings)
--   P..'xb'      ZSET  bucket -> earliest expiry among its records (exact expiry)
--   P..'r'       ZSET  seq -> availability, free messages
--   P..'d'       ZSET  seq -> due time, delayed messages (free once due), and claimed
--                      messages due after their claim ends (a retry policy's wait)
--   P..'c'       ZSET  seq -> claim expiry, claimed messages (free once expired)
--   P..'wc'      ZSET  seq -> claim expiry, for the claimed messages in 'd': while the
--                      claim lives they are claimed, then delayed until due
--   P..'cl'      HASH  claim number -> claim record (with its id's token)
--   P..'ce'      ZSET  claim number -> claim expiry
--   P..'a'       HASH  id -> seq, for messages whose id was not minted here (moved in)
--   P..'o'       HASH  token -> dead-letter move or redrive waiting to reach its queue
--   P..'mv'      ZSET  token -> time, moves already received from another slot
--   P..'ev'      STREAM the queue's event trail (delayq/events.py); outlives the queue
-- and its subscriptions (delayq/subscription.py), which outlive the queue too:
--   P..'u'       HASH  subscription id -> record
--   P..'ui'      ZSET  subscription ids, every score 0 (listings, in id order)
--   P..'ux'      ZSET  subscription id -> expiry
--   P..'us'      HASH  subscriber -> id of its subscription
--   P..'uv'      STRING the subscriptions' version, raised by every change of them (the
--                      subscribed-queues index applies a queue's changes in this order)
--   P..'k'       HASH  idempotency key -> digest,id,id,... of the post that stored it
--   P..'ke'      ZSET  idempotency key -> when it is no longer kept
-- and a pub/sub channel named like them (signal(); layout.py documents the channels):
--   P..'n'       the queue's shard channel on a cluster, for its MESSAGES signals
-- A message is in exactly one of r, d, c (so their sizes add up to the messages the
-- queue holds: live ones, delayed and claimed included, and expired ones not reaped
-- yet). One that a claim made due after the claim's end is in 'wc' too, and its score
-- in 'd' is when it is claimable again. Times are integer microseconds.
--
-- Ids. A message posted here has the id nonce .. seq .. token, a claim the id nonce ..
-- 'c' .. seq_name(number) .. token: the token is TOKEN_LENGTH random characters the driver
-- draws from the system's CSPRNG and passes in (Redis's own math.random is seeded the same
-- on every run), kept in the record. The nonce and the number are no secret, the token is
-- what no client can tell from other ids: a lookup reads the record at the id's seq or
-- number and finds nothing unless the tokens match. Nothing is ordered by id: listings
-- and stats go by seq. Messages and claims stored before ids had tokens keep their ids
-- (nonce .. seq, nonce .. 'c' .. number in decimal) and records without a token.
--
-- scripts.py puts `local EVENTS_RETENTION_MS = n` in front of this text (0: no trail),
-- the signals' settings (SIGNALS, SIGNALS_SHARDED, SIGNAL_MESSAGES, SIGNAL_SUBSCRIPTIONS:
-- scripts.signal_settings), and ENDED, the messages this call ended by kind (counted by trail(), trail on or off),
-- which it returns to the driver in front of the script's own reply.

local US = 1000000
local BUCKET = 64
local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'
local NONCE_LENGTH = 10
local SEQ_LENGTH = 8
local TOKEN_LENGTH = 13
local CLAIM_ID_LENGTH = NONCE_LENGTH + 1 + SEQ_LENGTH + TOKEN_LENGTH

-- Integer times written into command arguments: Lua's own number formatting would round.
local function int(n)
  return string.format('%d', n)
end

local function clock(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * US + tonumber(t[2])
end

local function seq_name(n)
  local out = {}
  for i = SEQ_LENGTH, 1, -1 do
    local digit = n % 36
    out[i] = string.sub(DIGITS, digit + 1, digit + 1)
    n = (n - digit) / 36
  end
  return table.concat(out)
end

local function bucket_of(seq)
  return math.floor(tonumber(seq, 36) / BUCKET)
end

local function bucket_key(P, bucket)
  return P .. 'b:' .. bucket
end

-- Records are MessagePack arrays:
--   body, client, created, ttl, token, due - created, expires - (created + ttl), claim
--   number, claim expiry, claim count, id (moved-in messages only), source queue, move
--   time.
-- The token is the end of the message's id; a record that carries its whole id (moved
-- in) or was stored before ids had tokens has none, and is told apart by its fifth
-- field: a string only when it is the token. Trailing fields at their default are left
-- out, and stored records carry 0 for the claim expiry (it is the message's score in
-- 'c'), so that a small message stays within the 64 bytes a listpack value may have.
local function decode(raw)
  local f = cmsgpack.unpack(raw)
  local m = {body = f[1], client = f[2], created = f[3], ttl = f[4], token = ''}
  local o = 4
  if type(f[5]) == 'string' then
    m.token = f[5]
    o = 5
  end
  m.due = m.created + (f[o + 1] or 0)
  m.expires = m.created + m.ttl * US + (f[o + 2] or 0)
  m.claim = f[o + 3] or 0
  m.claim_expires = f[o + 4] or 0
  m.count = f[o + 5] or 0
  m.id = f[o + 6] or ''
  m.source = f[o + 7] or ''
  m.moved = f[o + 8] or 0
  return m
end

-- The record as stored (wire = false), or as handed to the driver (wire = true), where
-- the claim number gives way to *claim*, the claim's name (claim_name; 0 = none).
local function encode(m, wire, claim)
  local f = {m.body, m.client, m.created, m.ttl, m.due - m.created,
             m.expires - (m.created + m.ttl * US), wire and claim or m.claim,
             wire and m.claim_expires or 0, m.count, m.id, m.source, m.moved}
  local n = 12
  while n > 4 and (f[n] == 0 or f[n] == '') do
    f[n] = nil
    n = n - 1
  end
  if m.token ~= '' then
    table.insert(f, 5, m.token)
  end
  return cmsgpack.pack(f)
end

-- A stored record of queue P at *seq*, its claim expiry filled in, and m.place saying
-- where it is indexed: 'u' ('r' or 'd': no claim), 'c', or 'w' ('d' and 'wc'); nil
-- when not known (as decode leaves it).
local function decode_at(P, seq, raw)
  local m = decode(raw)
  if m.claim == 0 then
    m.place = 'u'
  else
    local expires = redis.call('ZSCORE', P .. 'c', seq)
    if expires then
      m.place = 'c'
    else
      expires = redis.call('ZSCORE', P .. 'wc', seq)
      m.place = expires and 'w' or nil
    end
    m.claim_expires = tonumber(expires) or 0
  end
  return m
end

local function load(P, seq)
  local raw = redis.call('HGET', bucket_key(P, bucket_of(seq)), seq)
  if raw then
    return decode_at(P, seq, raw)
  end
  return nil
end

local function store(P, seq, m)
  local bucket = bucket_of(seq)
  redis.call('HSET', bucket_key(P, bucket), seq, encode(m, false))
  redis.call('ZADD', P .. 'bi', bucket, bucket)
  redis.call('ZADD', P .. 'xb', 'LT', m.expires, bucket)
end

-- The messages queue P holds: the live ones, and expired ones until reap() removes them.
local function held(P)
  return redis.call('ZCARD', P .. 'r') + redis.call('ZCARD', P .. 'd')
      + redis.call('ZCARD', P .. 'c')
end

-- Takes message *seq* out of the sets that index it: those m.place names, else every
-- set that may hold it.
local function unindex(P, seq, m)
  local place = m and m.place
  if place == 'c' then
    redis.call('ZREM', P .. 'c', seq)
  elseif place == 'w' then
    redis.call('ZREM', P .. 'd', seq)
    redis.call('ZREM', P .. 'wc', seq)
  else
    redis.call('ZREM', P .. 'r', seq)
    redis.call('ZREM', P .. 'd', seq)
    if place == nil then
      redis.call('ZREM', P .. 'c', seq)
      redis.call('ZREM', P .. 'wc', seq)
    end
  end
end

-- A delay in seconds (a deliver_at gives whole milliseconds) as integer microseconds.
local function delay_us(seconds)
  return math.floor(seconds * US + 0.5)
end

-- Indexes a message no claim holds (any place it had is gone) by its due time:
-- delayed until then, else free.
local function index_unclaimed(P, seq, m, now)
  m.place = 'u'
  if m.due > now then
    redis.call('ZADD', P .. 'd', m.due, seq)
  else
    redis.call('ZADD', P .. 'r', m.due, seq)
  end
end

-- Indexes a message a claim holds, moving it from the place it had: in 'c' by its
-- claim's expiry, or, when it is due after the claim ends, in 'd' by its due time (when
-- it is claimable again) with its claim's expiry in 'wc'.
local function index_claimed(P, seq, m)
  local place = m.due > m.claim_expires and 'w' or 'c'
  if m.place ~= place then
    unindex(P, seq, m)
  end
  if place == 'w' then
    redis.call('ZADD', P .. 'd', m.due, seq)
    redis.call('ZADD', P .. 'wc', m.claim_expires, seq)
  else
    redis.call('ZADD', P .. 'c', m.claim_expires, seq)
  end
  m.place = place
end

-- A retry policy's waits (retry.Backoff) from two script arguments: the attempt from
-- which a message waits no more ('' = none) and the waits in seconds, comma-separated
-- ('' = no policy: nil). The waits are read as far as attempts ask (backoff_wait): a
-- long policy costs a claim of early attempts no more than a short one.
local function backoff_of(dead_letter_at, delays)
  if delays == '' then
    return nil
  end
  return {at = tonumber(dead_letter_at), text = delays, from = 1, waits = {}}
end

-- Microseconds a message waits after its failed attempt *attempt* (Backoff.after).
local function backoff_wait(backoff, attempt)
  if backoff.at ~= nil and attempt >= backoff.at then
    return 0
  end
  local waits = backoff.waits
  while #waits < attempt and backoff.from ~= nil do
    local first, last = string.find(backoff.text, '%d+', backoff.from)
    if first == nil then
      backoff.from = nil
    else
      waits[#waits + 1] = tonumber(string.sub(backoff.text, first, last)) * US
      backoff.from = last + 1
    end
  end
  return waits[math.min(attempt, #waits)]
end

local function remove(P, seq, m)
  local bucket = bucket_of(seq)
  local key = bucket_key(P, bucket)
  redis.call('HDEL', key, seq)
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', P .. 'bi', bucket)
    redis.call('ZREM', P .. 'xb', bucket)
  end
  unindex(P, seq, m)
  if m.id ~= '' then
    redis.call('HDEL', P .. 'a', m.id)
  end
end

-- Whether the queue's stored metadata is *expected*, the metadata a post or claim was
-- decided under ('' = not given: nothing to check).
local function metadata_is(P, expected)
  return expected == '' or redis.call('HGET', P .. 's', 'meta') == expected
end

local function nonce_of(P)
  return redis.call('HGET', P .. 's', 'nonce') or ''
end

local function message_id(nonce, seq, m)
  if m.id ~= '' then
    return m.id
  end
  return nonce .. seq .. m.token
end

-- Event trail. Entry fields: k kind, t time (us), m message id, c claim count,
-- cl claim id, d due, ttl, e expires, src, dst, b body. Stream ids come from the server
-- clock (a test's clock override does not touch them), and so does the retention cutoff:
-- every append trims entries older than the retention (MINID, approximately, which is
-- cheap), and the whole stream expires when no event came for a retention period.
local trail_cutoff = nil

local function trail(P, kind, t, fields)
  if ENDED[kind] ~= nil then
    ENDED[kind] = ENDED[kind] + 1
  end
  if EVENTS_RETENTION_MS == 0 then
    return
  end
  local key = P .. 'ev'
  if trail_cutoff == nil then
    local server = redis.call('TIME')
    trail_cutoff = tonumber(server[1]) * 1000 + math.floor(tonumber(server[2]) / 1000)
        - EVENTS_RETENTION_MS
    if trail_cutoff < 0 then
      trail_cutoff = 0
    end
  end
  local args = {'XADD', key, 'MINID', '~', int(trail_cutoff), '*', 'k', kind, 't', int(t)}
  for i = 1, #fields do
    args[#args + 1] = fields[i]
  end
  redis.call(unpack(args))
  redis.call('PEXPIRE', key, EVENTS_RETENTION_MS)
end

-- The 'expired' event of message *m* (at the instant it expired).
local function trail_expired(P, nonce, seq, m)
  if EVENTS_RETENTION_MS == 0 then
    ENDED.expired = ENDED.expired + 1
  else
    trail(P, 'expired', m.expires, {'m', message_id(nonce, seq, m), 'c', m.count,
                                    'e', int(m.expires)})
  end
end

-- The seq and record of message *id*, or nil when the queue holds no such message: an
-- id whose token is not the record's names nothing.
local function locate(P, nonce, id)
  local seq = redis.call('HGET', P .. 'a', id)
  if seq then
    return seq, load(P, seq)
  end
  local minted = NONCE_LENGTH + SEQ_LENGTH
  if (#id ~= minted + TOKEN_LENGTH and #id ~= minted)
      or string.sub(id, 1, NONCE_LENGTH) ~= nonce then
    return nil
  end
  seq = string.sub(id, NONCE_LENGTH + 1, minted)
  if not string.match(seq, '^[0-9a-z]+$') then
    return nil
  end
  local m = load(P, seq)
  if m and m.id == '' and m.token == string.sub(id, minted + 1) then
    return seq, m
  end
  return nil
end

-- Creates the queue when it does not exist; true when it did not.
local function ensure_queue(P, nonce)
  if redis.call('HSETNX', P .. 's', 'meta', '{}') == 1 then
    redis.call('HSET', P .. 's', 'nonce', nonce)
    return true
  end
  return false
end

local function next_seq(P)
  return seq_name(redis.call('HINCRBY', P .. 's', 'seq', 1))
end

-- A moved-in message: a fresh seq here, its id kept through the alias hash, free at once.
local function admit(P, m, now)
  local seq = next_seq(P)
  redis.call('HSET', P .. 'a', m.id, seq)
  store(P, seq, m)
  redis.call('ZADD', P .. 'r', now, seq)
  return seq
end

-- The message as it lands in a dead-letter queue (docs/user-guide.md, "Dead-letter queues").
local function dead_lettered(nonce, seq, m, now, source, ttl)
  m.id = message_id(nonce, seq, m)
  m.token = ''  -- the id holds it
  m.claim = 0
  m.claim_expires = 0
  m.source = source
  m.moved = now
  if ttl ~= nil then
    m.ttl = ttl
    m.expires = now + ttl * US
  else
    m.expires = m.created + m.ttl * US
  end
  return m
end

-- Removes expired messages (exactly: xb holds each bucket's earliest expiry), expired
-- claim records and old move markers. Visits at most *budget* buckets; returns true when
-- nothing expired is left.
local function reap(P, now, budget, marker_ttl)
  local finished = false
  for _ = 1, budget do
    local due = redis.call('ZRANGEBYSCORE', P .. 'xb', '-inf', now, 'LIMIT', 0, 1)
    if #due == 0 then
      finished = true
      break
    end
    local bucket = due[1]
    local fields = redis.call('HGETALL', bucket_key(P, bucket))
    local earliest = nil
    local nonce = nonce_of(P)
    for i = 1, #fields, 2 do
      local m = decode(fields[i + 1])
      if m.expires <= now then
        remove(P, fields[i], m)
        trail_expired(P, nonce, fields[i], m)
      elseif earliest == nil or m.expires < earliest then
        earliest = m.expires
      end
    end
    if earliest ~= nil then
      -- Removed, then added with its new score: at maxmemory Redis refuses a ZADD that
      -- is a script's first write, and a bucket whose earliest message was deleted or
      -- claimed since has nothing expired to remove first (queue stats would fail).
      redis.call('ZREM', P .. 'xb', bucket)
      redis.call('ZADD', P .. 'xb', earliest, bucket)
    else
      redis.call('ZREM', P .. 'xb', bucket)
      redis.call('ZREM', P .. 'bi', bucket)
    end
  end
  local claims = redis.call('ZRANGEBYSCORE', P .. 'ce', '-inf', now, 'LIMIT', 0, budget)
  for _, num in ipairs(claims) do
    redis.call('HDEL', P .. 'cl', num)
    redis.call('ZREM', P .. 'ce', num)
  end
  if marker_ttl ~= nil then
    redis.call('ZREMRANGEBYSCORE', P .. 'mv', '-inf', now - marker_ttl * US)
  end
  return finished
end

local function before(a_score, a_seq, b_score, b_seq)
  return a_score < b_score or (a_score == b_score and a_seq < b_seq)
end

-- Up to n claimable messages, oldest availability first, as {seq, score} pairs: free
-- ones, delayed ones now due, and ones whose claim expired. Three range reads of n.
local function claimable(P, now, n)
  local sources = {
    redis.call('ZRANGEBYSCORE', P .. 'r', '-inf', now, 'WITHSCORES', 'LIMIT', 0, n),
    redis.call('ZRANGEBYSCORE', P .. 'd', '-inf', now, 'WITHSCORES', 'LIMIT', 0, n),
    redis.call('ZRANGEBYSCORE', P .. 'c', '-inf', now, 'WITHSCORES', 'LIMIT', 0, n),
  }
  local at = {1, 1, 1}
  local out = {}
  while #out < n do
    local best = nil
    for k = 1, 3 do
      local src = sources[k]
      if at[k] <= #src then
        local seq, score = src[at[k]], tonumber(src[at[k] + 1])
        if best == nil or before(score, seq, best[2], best[1]) then
          best = {seq, score, k}
        end
      end
    end
    if best == nil then
      break
    end
    at[best[3]] = at[best[3]] + 2
    out[#out + 1] = best
  end
  return out
end

-- Walks the claimable messages, oldest availability first, handing each live one to
-- take(seq, m), which returns true when the message counts toward *limit*. Records
-- found missing or expired on the way are cleaned up. At most *budget* messages are
-- handled without counting; returns whether that budget ran out first.
local function walk_claimable(P, now, limit, budget, take)
  local taken, work = 0, 0
  while taken < limit and work < budget do
    local candidates = claimable(P, now, limit - taken)
    if #candidates == 0 then
      break
    end
    for _, candidate in ipairs(candidates) do
      local seq = candidate[1]
      local m = load(P, seq)
      if m == nil then
        unindex(P, seq)
        work = work + 1
      elseif m.expires <= now then
        remove(P, seq, m)
        trail_expired(P, nonce_of(P), seq, m)
        work = work + 1
      elseif take(seq, m) then
        taken = taken + 1
      else
        work = work + 1
      end
      if taken == limit or work >= budget then
        break
      end
    end
  end
  return work >= budget and taken < limit
end

-- Claim records are MessagePack arrays: ttl, grace, created, expires, token, then the
-- seqs of the messages the claim took. A record stored before claims had tokens has
-- none, and is told apart by its fifth field: a seq (SEQ_LENGTH characters), not a
-- token (TOKEN_LENGTH).
local function decode_claim(raw)
  local f = cmsgpack.unpack(raw)
  local claim = {ttl = f[1], grace = f[2], created = f[3], expires = f[4], token = '',
                 seqs = {}}
  local first = 5
  if f[5] ~= nil and #f[5] == TOKEN_LENGTH then
    claim.token = f[5]
    first = 6
  end
  for i = first, #f do
    claim.seqs[#claim.seqs + 1] = f[i]
  end
  return claim
end

local function encode_claim(claim)
  local f = {claim.ttl, claim.grace, claim.created, claim.expires}
  if claim.token ~= '' then
    f[5] = claim.token
  end
  for _, seq in ipairs(claim.seqs) do
    f[#f + 1] = seq
  end
  return cmsgpack.pack(f)
end

-- What follows nonce .. 'c' in the id of claim number *num* with *token*.
local function claim_name(num, token)
  if token == '' then
    return int(num)
  end
  return seq_name(tonumber(num)) .. token
end

-- The claim number (as a hash field) and token that *claim_id* names, or nil when it
-- cannot be this queue's.
local function parse_claim_id(nonce, claim_id)
  if string.sub(claim_id, 1, NONCE_LENGTH + 1) ~= nonce .. 'c' then
    return nil
  end
  if #claim_id == CLAIM_ID_LENGTH then
    local name = string.sub(claim_id, NONCE_LENGTH + 2, NONCE_LENGTH + 1 + SEQ_LENGTH)
    if not string.match(name, '^[0-9a-z]+$') then
      return nil
    end
    return int(tonumber(name, 36)), string.sub(claim_id, NONCE_LENGTH + 2 + SEQ_LENGTH)
  end
  local num = string.sub(claim_id, NONCE_LENGTH + 2)
  if not string.match(num, '^[1-9][0-9]*$') or #num > 15 then
    return nil
  end
  return num, ''
end

-- The claim *claim_id* of this queue: its number and record (decode_claim), or nil when
-- there is no such claim, its token is not the id's, or (unless *any*) it expired.
local function find_claim(P, nonce, claim_id, now, any)
  local num, token = parse_claim_id(nonce, claim_id)
  local raw = num and redis.call('HGET', P .. 'cl', num)
  if not raw then
    return nil
  end
  local claim = decode_claim(raw)
  if claim.token ~= token or (claim.expires <= now and not any) then
    return nil
  end
  return num, claim
end

local function held_by(m, num, now)
  return m.claim == tonumber(num) and m.claim_expires > now
end

-- Why a delete of message *m* with *claim_id* ('' = none) is refused, as
-- delayq.claim.delete_refusal: 0 allowed, 1 claimed and no claim id given, 2 no live
-- claim holds it, 3 another claim does (or no claim of the queue has that id).
local function delete_refusal(P, m, nonce, claim_id, now)
  local claimed = m.claim ~= 0 and m.claim_expires > now
  if claim_id == '' then
    return claimed and 1 or 0
  end
  if not claimed then
    return 2
  end
  local num = find_claim(P, nonce, claim_id, now, true)
  if num == nil or not held_by(m, num, now) then
    return 3
  end
  return 0
end

-- The messages a claim still holds, as {seq, record} pairs.
local function holdings(P, num, claim, now)
  local held = {}
  for _, seq in ipairs(claim.seqs) do
    local m = load(P, seq)
    if m ~= nil and held_by(m, num, now) then
      held[#held + 1] = {seq, m}
    end
  end
  return held
end

-- Claim number -> its claim_name, or false when the queue no longer has the claim (it is
-- over): what this call read.
local claim_names = {}

-- Record *m* as handed to the driver.
local function wire_record(P, m)
  local name = 0
  if m.claim ~= 0 then
    name = claim_names[m.claim]
    if name == nil then
      local raw = redis.call('HGET', P .. 'cl', int(m.claim))
      name = raw and claim_name(m.claim, decode_claim(raw).token) or false
      claim_names[m.claim] = name
    end
    name = name or 0
  end
  return encode(m, true, name)
end

-- Flattens records for the driver: seq, record, seq, record, ...
local function pack_messages(P, list)
  local out = {}
  for _, item in ipairs(list) do
    out[#out + 1] = item[1]
    out[#out + 1] = wire_record(P, item[2])
  end
  return out
end

-- Subscriptions. A record is a MessagePack array: subscriber, ttl, options (JSON),
-- created, expires, confirmed (1 or 0; absent in records written before it existed,
-- which read as confirmed).

-- Removes subscription *id* of queue P.
local function drop_subscription(P, id)
  local raw = redis.call('HGET', P .. 'u', id)
  if raw then
    local subscriber = cmsgpack.unpack(raw)[1]
    if redis.call('HGET', P .. 'us', subscriber) == id then
      redis.call('HDEL', P .. 'us', subscriber)
    end
    redis.call('HDEL', P .. 'u', id)
  end
  redis.call('ZREM', P .. 'ui', id)
  redis.call('ZREM', P .. 'ux', id)
end

-- Removes up to *budget* expired subscriptions of queue P.
local function reap_subscriptions(P, now, budget)
  local expired = redis.call('ZRANGEBYSCORE', P .. 'ux', '-inf', now, 'LIMIT', 0, budget)
  for _, id in ipairs(expired) do
    drop_subscription(P, id)
  end
end

-- The live subscription *id* of queue P, decoded, and its record; nil when there is none.
local function live_subscription(P, id, now)
  local raw = redis.call('HGET', P .. 'u', id)
  if not raw then
    return nil
  end
  local record = cmsgpack.unpack(raw)
  if record[5] <= now then
    return nil
  end
  return record, raw
end

-- The id of queue P's live subscription for *subscriber*, or nil; an expired one found
-- in its place is removed.
local function subscription_of(P, subscriber, now)
  local id = redis.call('HGET', P .. 'us', subscriber)
  if not id then
    return nil
  end
  if live_subscription(P, id, now) then
    return id
  end
  drop_subscription(P, id)
  return nil
end

-- After a change of queue P's subscriptions: its new version, and the expiry of its
-- latest live subscription (0: none), for the subscribed-queues index
-- (subscribed_update.lua).
local function subscriptions_changed(P, now)
  local version = redis.call('INCR', P .. 'uv')
  local last = redis.call('ZRANGE', P .. 'ux', -1, -1, 'WITHSCORES')
  if #last > 0 and tonumber(last[2]) > now then
    return {version, tonumber(last[2])}
  end
  return {version, 0}
end

-- What queue P keeps of idempotency key *key* ('digest,id,id,...'), or nil when it keeps
-- no such key at *now* (none stored, or its window is over).
local function kept_key(P, key, now)
  local until_ = tonumber(redis.call('ZSCORE', P .. 'ke', key))
  if until_ == nil or until_ <= now then
    return nil
  end
  return redis.call('HGET', P .. 'k', key)
end

-- Keeps *key* with *value* until *until_*, and forgets up to *budget* keys whose window
-- is over at *now*.
local function keep_key(P, key, value, until_, now, budget)
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', P .. 'ke', '-inf', now, 'LIMIT', 0,
                                  budget)) do
    redis.call('HDEL', P .. 'k', old)
    redis.call('ZREM', P .. 'ke', old)
  end
  redis.call('HSET', P .. 'k', key, value)
  redis.call('ZADD', P .. 'ke', until_, key)
end

-- Signals (delayq/storage/base/signals.py): a write tells every API process that queue
-- P changed, in the script that writes, so no write goes unsignalled while Redis keeps
-- it. *change* is SIGNAL_MESSAGES (messages may be claimable: post, release, hand-back,
-- redrive, dead-letter move in) or SIGNAL_SUBSCRIPTIONS. The payload is the change then
-- the queue's hash tag, PROJECT/QUEUE (layout.signal). MESSAGES go to the queue's own
-- channel, heard only by the processes following the queue (a post to a queue nobody
-- waits on is sent to no one); on a cluster by shard, in the script's slot, so the
-- cluster bus carries nothing. SUBSCRIPTIONS go to SIGNALS, which every process hears
-- (a cluster sends it to every node).
-- A script signals a queue's change once, however many of its messages it touched.
local signalled = {}

local function signal(P, change)
  if signalled[P .. change] then
    return
  end
  signalled[P .. change] = true
  local payload = change .. string.match(P, '{([^{}]*)}:$')
  if change ~= SIGNAL_MESSAGES then
    redis.call('PUBLISH', SIGNALS, payload)
  elseif SIGNALS_SHARDED then
    redis.call('SPUBLISH', P .. 'n', payload)
  else
    redis.call('PUBLISH', P .. 'n', payload)
  end
end
