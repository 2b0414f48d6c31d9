-- Hand one message back from the claim holding it, due after a delay; the claim keeps
-- its other messages. KEYS: queue state. ARGV: now, id, claim id, delay (seconds).
-- Returns {0, nonce, now, seq, record} when released; {-1} when the queue holds no such
-- live message; or {refusal} (delete_refusal, never 0) when the claim holds no such
-- message.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local nonce = nonce_of(P)
local seq, m = locate(P, nonce, ARGV[2])
if seq == nil or m == nil or m.expires <= now then
  return {-1}
end
local refusal = delete_refusal(P, m, nonce, ARGV[3], now)
if refusal ~= 0 then
  return {refusal}
end
unindex(P, seq, m)
m.claim, m.claim_expires = 0, 0
m.due = now + delay_us(tonumber(ARGV[4]))
store(P, seq, m)
index_unclaimed(P, seq, m, now)
signal(P, SIGNAL_MESSAGES)
trail(P, 'released', now, {'m', message_id(nonce, seq, m), 'd', int(m.due), 'c', m.count})
return {0, nonce, now, seq, wire_record(P, m)}
