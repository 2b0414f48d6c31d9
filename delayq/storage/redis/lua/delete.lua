-- Delete one message. KEYS: queue state. ARGV: now, id, claim id ('' = none).
-- Returns 0 (deleted or absent), 1 (claimed, no claim id given), 2 (claim id given but
-- the message is not claimed), 3 (another claim holds it).
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local claim_id = ARGV[3]
local nonce = nonce_of(P)
local seq, m = locate(P, nonce, ARGV[2])
if seq == nil or m == nil or m.expires <= now then
  return 0
end
local refusal = delete_refusal(P, m, nonce, claim_id, now)
if refusal ~= 0 then
  return refusal
end
remove(P, seq, m)
local fields = {'m', message_id(nonce, seq, m), 'c', m.count}
if claim_id ~= '' then
  fields[#fields + 1] = 'cl'
  fields[#fields + 1] = claim_id
end
trail(P, 'deleted', now, fields)
return 0
