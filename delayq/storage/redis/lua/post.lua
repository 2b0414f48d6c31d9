-- Post messages, creating the queue when needed.
-- KEYS: queue state. ARGV: now, nonce for a new queue, reap budget, the metadata the
-- post was decided under ('' = unchecked), then per message: body, client, ttl, delay
-- (seconds). Returns {nonce, listed, then each message's seq name}, or
-- {METADATA_CHANGED}: the ids are nonce .. seq, named here once rather than again by
-- the driver.
local P = string.sub(KEYS[1], 1, -2)
if not metadata_is(P, ARGV[4]) then
  return {METADATA_CHANGED}
end
local now = clock(ARGV[1])
ensure_queue(P, ARGV[2])
local nonce = nonce_of(P)
local count = (#ARGV - 4) / 4
local last = redis.call('HINCRBY', P .. 's', 'seq', count)
local first = last - count + 1
local reply = {nonce, 0}
for i = 0, count - 1 do
  local at = 5 + i * 4
  local ttl, delay = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local m = {body = ARGV[at], client = ARGV[at + 1], created = now, ttl = ttl,
             due = now + delay_us(delay), expires = now + ttl * US, claim = 0,
             claim_expires = 0, count = 0, id = '', source = '', moved = 0}
  local seq = seq_name(first + i)
  store(P, seq, m)
  trail(P, 'posted', now, {'m', nonce .. seq, 'd', int(m.due), 'ttl', ttl,
                           'e', int(m.expires)})
  index_unclaimed(P, seq, m, now)
  reply[3 + i] = seq
end
reap(P, now, tonumber(ARGV[3]))
reply[2] = redis.call('HGET', P .. 's', 'listed') and 1 or 0
return reply
