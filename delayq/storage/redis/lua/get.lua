-- Read live messages by id. KEYS: queue state. ARGV: now, id, ...
-- Returns {nonce, now, outbox size, seq, record, ...} in post order.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local nonce = nonce_of(P)
local found = {}
for i = 2, #ARGV do
  local seq, m = locate(P, nonce, ARGV[i])
  if seq ~= nil and m ~= nil and m.expires > now then
    found[#found + 1] = {seq, m}
  end
end
table.sort(found, function(a, b) return a[1] < b[1] end)
local out = {nonce, now, redis.call('HLEN', P .. 'o')}
for _, v in ipairs(pack_messages(P, found)) do
  out[#out + 1] = v
end
return out
