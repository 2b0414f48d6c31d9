-- Delete and return up to *limit* claimable messages, oldest availability first.
-- KEYS: queue state. ARGV: now, limit, work budget.
-- Returns {nonce, now, more, seq, record, ...}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local limit, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local nonce = nonce_of(P)
local popped = {}
local work = 0
while #popped < limit and work < budget do
  local candidates = claimable(P, now, limit - #popped)
  if #candidates == 0 then
    break
  end
  for _, candidate in ipairs(candidates) do
    local seq = candidate[1]
    local m = load(P, seq)
    if m == nil then
      unindex(P, seq)
      work = work + 1
    else
      remove(P, seq, m)
      if m.expires <= now then
        work = work + 1
      else
        popped[#popped + 1] = {seq, m}
      end
    end
    if #popped == limit or work >= budget then
      break
    end
  end
end
local out = {nonce, now, (work >= budget and #popped < limit) and 1 or 0}
for _, v in ipairs(pack_messages(popped)) do
  out[#out + 1] = v
end
return out
