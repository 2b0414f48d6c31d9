-- A live claim with the messages it still holds. KEYS: queue state. ARGV: now, claim id.
-- Returns {nonce, now} when there is no such claim, else
-- {nonce, now, ttl, grace, created, expires, seq, record, ...}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local nonce = nonce_of(P)
local num, claim = find_claim(P, nonce, ARGV[2], now, false)
if num == nil then
  return {nonce, now}
end
local held = {}
for _, item in ipairs(holdings(P, num, claim, now)) do
  if item[2].expires > now then
    held[#held + 1] = item
  end
end
local out = {nonce, now, claim.ttl, claim.grace, claim.created, claim.expires}
for _, v in ipairs(pack_messages(P, held)) do
  out[#out + 1] = v
end
return out
