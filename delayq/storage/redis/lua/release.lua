-- Free a claim's messages. KEYS: queue state. ARGV: now, claim id, the retry policy's
-- waits (two arguments, backoff_of; '', '' = none). Without a policy each message is
-- claimable at once (its due time as before the claim); with one, each is due its wait
-- from now.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local backoff = backoff_of(ARGV[3], ARGV[4])
local num, claim = find_claim(P, nonce_of(P), ARGV[2], now, true)
if num == nil then
  return 0
end
for _, item in ipairs(holdings(P, num, claim, now)) do
  local seq, m = item[1], item[2]
  unindex(P, seq, m)
  m.claim = 0
  m.claim_expires = 0
  if backoff ~= nil then
    m.due = now + backoff_wait(backoff, m.count)
  elseif m.due > now then
    m.due = now
  end
  store(P, seq, m)
  index_unclaimed(P, seq, m, now)
  signal(P, SIGNAL_MESSAGES)
end
redis.call('HDEL', P .. 'cl', num)
redis.call('ZREM', P .. 'ce', num)
return 0
