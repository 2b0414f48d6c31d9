-- Delete and return up to *limit* claimable messages, oldest availability first.
-- KEYS: queue state. ARGV: now, limit, work budget.
-- Returns {nonce, now, more, seq, record, ...}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local limit, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local nonce = nonce_of(P)
local popped = {}
local more = walk_claimable(P, now, limit, budget, function(seq, m)
  remove(P, seq, m)
  trail(P, 'popped', now, {'m', message_id(nonce, seq, m), 'c', m.count})
  popped[#popped + 1] = {seq, m}
  return true
end)
local out = {nonce, now, more and 1 or 0}
for _, v in ipairs(pack_messages(P, popped)) do
  out[#out + 1] = v
end
return out
