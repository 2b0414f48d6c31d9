-- Restart a live claim's ttl from now. KEYS: queue state. ARGV: now, claim id, ttl,
-- grace. Returns 0, or 1 when there is no such live claim.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local ttl, grace = tonumber(ARGV[3]), tonumber(ARGV[4])
local num = claim_number(nonce_of(P), ARGV[2])
local raw = num and redis.call('HGET', P .. 'cl', num)
if not raw then
  return 1
end
local claim = cmsgpack.unpack(raw)
if claim[4] <= now then
  return 1
end
local expires = now + ttl * US
for i = 5, #claim do
  local m = load(P, claim[i])
  if m ~= nil and held_by(m, num, now) then
    m.claim_expires = expires
    if expires + grace * US > m.expires then
      m.expires = expires + grace * US
    end
    store(P, claim[i], m)
    redis.call('ZADD', P .. 'c', expires, claim[i])
  end
end
claim[1], claim[2], claim[4] = ttl, grace, expires
redis.call('HSET', P .. 'cl', num, cmsgpack.pack(claim))
redis.call('ZADD', P .. 'ce', expires, num)
return 0
