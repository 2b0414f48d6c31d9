-- Post messages, creating the queue when needed.
-- KEYS: queue state. ARGV: now, nonce for a new queue, reap budget, the metadata the
-- post was decided under ('' = unchecked), the message quota (0 = none), the queue's
-- fence ('' = create it if missing; else only while now <= fence, in us, '0' = not at
-- all: queue_create.lua), the post's idempotency key ('' = none), its digest, its window
-- (seconds), the messages' id tokens (TOKEN_LENGTH characters each, back to back), then
-- per message: body, client, ttl, delay (seconds). Returns {nonce, listed, then each
-- message's seq name}: the ids are nonce .. seq .. token, named here once rather than
-- again by the driver. Or {KEY_TAKEN, kept}: the queue keeps the key (kept_key); or
-- {METADATA_CHANGED}; or {QUOTA_EXCEEDED, held, finished}: the post would take the queue
-- past its quota of live messages and stored nothing, the queue holding *held*
-- messages, of which none is expired when *finished* is 1 (else call again with a
-- larger reap budget: expired messages not reaped yet still counted); or
-- {QUEUE_MISSING}: the queue does not exist and the fence forbids making it.
local P = string.sub(KEYS[1], 1, -2)
local key = ARGV[7]
local now = clock(ARGV[1])
if key ~= '' then
  local kept = kept_key(P, key, now)
  if kept then
    return {KEY_TAKEN, kept}
  end
end
if not metadata_is(P, ARGV[4]) then
  return {METADATA_CHANGED}
end
local count = (#ARGV - 10) / 4
local quota = tonumber(ARGV[5])
if quota > 0 and held(P) + count > quota then
  -- Over, counting expired messages not reaped yet: reap (bounded), then count again.
  local finished = reap(P, now, tonumber(ARGV[3]))
  local messages = held(P)
  if messages + count > quota then
    return {QUOTA_EXCEEDED, messages, finished and 1 or 0}
  end
end
local fence = ARGV[6]
if fence ~= '' and redis.call('HEXISTS', P .. 's', 'meta') == 0
    and now > tonumber(fence) then
  return {QUEUE_MISSING}
end
if ensure_queue(P, ARGV[2]) and fence ~= '' then
  -- The post's hold lists it (catalogue_reserve.lua).
  redis.call('HSET', P .. 's', 'listed', '1')
end
local nonce = nonce_of(P)
local last = redis.call('HINCRBY', P .. 's', 'seq', count)
local first = last - count + 1
local reply = {nonce, 0}
local ids = {}
for i = 0, count - 1 do
  local at = 11 + i * 4
  local ttl, delay = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local m = {body = ARGV[at], client = ARGV[at + 1], created = now, ttl = ttl,
             due = now + delay_us(delay), expires = now + ttl * US, claim = 0,
             claim_expires = 0, count = 0, id = '', source = '', moved = 0,
             token = string.sub(ARGV[10], i * TOKEN_LENGTH + 1, (i + 1) * TOKEN_LENGTH)}
  local seq = seq_name(first + i)
  store(P, seq, m)
  ids[i + 1] = nonce .. seq .. m.token
  trail(P, 'posted', now, {'m', ids[i + 1], 'd', int(m.due), 'ttl', ttl,
                           'e', int(m.expires)})
  index_unclaimed(P, seq, m, now)
  reply[3 + i] = seq
end
if key ~= '' then
  keep_key(P, key, ARGV[8] .. ',' .. table.concat(ids, ','), now + tonumber(ARGV[9]) * US,
           now, tonumber(ARGV[3]))
end
reap(P, now, tonumber(ARGV[3]))
if count > 0 then
  signal(P, SIGNAL_MESSAGES)
end
reply[2] = redis.call('HGET', P .. 's', 'listed') and 1 or 0
return reply
