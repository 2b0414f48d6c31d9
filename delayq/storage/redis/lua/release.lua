-- Free a claim's messages at once; each returns to its place (its due time).
-- KEYS: queue state. ARGV: now, claim id.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local num, claim = find_claim(P, ARGV[2], now, true)
if num == nil then
  return 0
end
for _, item in ipairs(holdings(P, num, claim, now)) do
  local seq, m = item[1], item[2]
  m.claim = 0
  m.claim_expires = 0
  store(P, seq, m)
  redis.call('ZREM', P .. 'c', seq)
  redis.call('ZADD', P .. 'r', m.due, seq)
end
redis.call('HDEL', P .. 'cl', num)
redis.call('ZREM', P .. 'ce', num)
return 0
