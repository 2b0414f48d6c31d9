-- Free a claim's messages at once; each returns to its place (its due time).
-- KEYS: queue state. ARGV: now, claim id.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local num = claim_number(nonce_of(P), ARGV[2])
local raw = num and redis.call('HGET', P .. 'cl', num)
if not raw then
  return 0
end
local claim = cmsgpack.unpack(raw)
for i = 5, #claim do
  local m = load(P, claim[i])
  if m ~= nil and held_by(m, num, now) then
    m.claim = 0
    m.claim_expires = 0
    store(P, claim[i], m)
    redis.call('ZREM', P .. 'c', claim[i])
    redis.call('ZADD', P .. 'r', m.due, claim[i])
  end
end
redis.call('HDEL', P .. 'cl', num)
redis.call('ZREM', P .. 'ce', num)
return 0
