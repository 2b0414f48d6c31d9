-- A live claim with the messages it still holds. KEYS: queue state. ARGV: now, claim id.
-- Returns {nonce, now} when there is no such claim, else
-- {nonce, now, ttl, grace, created, expires, seq, record, ...}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local nonce = nonce_of(P)
local num = claim_number(nonce, ARGV[2])
local raw = num and redis.call('HGET', P .. 'cl', num)
if not raw then
  return {nonce, now}
end
local claim = cmsgpack.unpack(raw)
if claim[4] <= now then
  return {nonce, now}
end
local held = {}
for i = 5, #claim do
  local m = load(P, claim[i])
  if m ~= nil and held_by(m, num, now) and m.expires > now then
    held[#held + 1] = {claim[i], m}
  end
end
local out = {nonce, now, claim[1], claim[2], claim[3], claim[4]}
for _, v in ipairs(pack_messages(held)) do
  out[#out + 1] = v
end
return out
