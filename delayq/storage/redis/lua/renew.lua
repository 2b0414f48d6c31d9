-- Restart a live claim's ttl from now. KEYS: queue state. ARGV: now, claim id, ttl,
-- grace, the retry policy's waits (two arguments, backoff_of; '', '' = none): each of
-- the claim's messages is then due its wait after the new expiry.
-- Returns 0, or 1 when there is no such live claim.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local ttl, grace = tonumber(ARGV[3]), tonumber(ARGV[4])
local backoff = backoff_of(ARGV[5], ARGV[6])
local num, claim = find_claim(P, nonce_of(P), ARGV[2], now, false)
if num == nil then
  return 1
end
local expires = now + ttl * US
for _, item in ipairs(holdings(P, num, claim, now)) do
  local seq, m = item[1], item[2]
  m.claim_expires = expires
  if expires + grace * US > m.expires then
    m.expires = expires + grace * US
  end
  if backoff ~= nil then
    m.due = expires + backoff_wait(backoff, m.count)
  end
  store(P, seq, m)
  index_claimed(P, seq, m)
end
claim.ttl, claim.grace, claim.expires = ttl, grace, expires
redis.call('HSET', P .. 'cl', num, encode_claim(claim))
redis.call('ZADD', P .. 'ce', expires, num)
return 0
