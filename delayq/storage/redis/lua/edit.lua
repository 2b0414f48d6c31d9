-- Edit one message that no live claim holds: its body and/or its due time.
-- KEYS: queue state. ARGV: now, id, new body as JSON ('' = unchanged), delay in seconds
-- ('' = due time unchanged). Returns {0, nonce, now, seq, record} when edited,
-- {1} when the queue holds no such live message, {2} when a live claim holds it.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local nonce = nonce_of(P)
local seq, m = locate(P, nonce, ARGV[2])
if seq == nil or m == nil or m.expires <= now then
  return {1}
end
if m.claim ~= 0 and m.claim_expires > now then
  return {2}
end
if ARGV[3] ~= '' then
  m.body = ARGV[3]
end
if ARGV[4] ~= '' then
  -- A new due time moves the message out of whichever set holds it (a claim that
  -- expired leaves it in 'c', or in 'd' and 'wc'): delayed until then, or free from now.
  unindex(P, seq, m)
  m.due = now + delay_us(tonumber(ARGV[4]))
  m.claim, m.claim_expires = 0, 0
  index_unclaimed(P, seq, m, now)
  signal(P, SIGNAL_MESSAGES)
end
store(P, seq, m)
trail(P, 'edited', now, {'m', message_id(nonce, seq, m), 'd', int(m.due), 'c', m.count})
return {0, nonce, now, seq, wire_record(P, m)}
