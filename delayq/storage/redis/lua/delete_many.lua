-- Delete messages by id, claimed or not. KEYS: queue state. ARGV: now, id, ...
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local nonce = nonce_of(P)
for i = 2, #ARGV do
  local seq, m = locate(P, nonce, ARGV[i])
  if seq ~= nil and m ~= nil then
    remove(P, seq, m)
    -- One that expired already (not yet reaped) is recorded as the expiry it was.
    if m.expires <= now then
      trail_expired(P, nonce, seq, m)
    else
      trail(P, 'deleted', now, {'m', message_id(nonce, seq, m), 'c', m.count})
    end
  end
end
return 0
