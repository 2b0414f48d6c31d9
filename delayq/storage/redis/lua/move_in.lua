-- Receive a dead-letter move from a queue in another slot, once per token.
-- KEYS: dead-letter queue state. ARGV: now, token, nonce for a new queue, record,
-- marker ttl (seconds). Returns {received, listed}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local received = 0
if not redis.call('ZSCORE', P .. 'mv', ARGV[2]) then
  ensure_queue(P, ARGV[3])
  admit(P, decode(ARGV[4]), now)
  redis.call('ZADD', P .. 'mv', now, ARGV[2])
  -- The markers outlive a deleted queue, and then go by themselves.
  redis.call('EXPIRE', P .. 'mv', tonumber(ARGV[5]))
  received = 1
  signal(P, SIGNAL_MESSAGES)
end
reap(P, now, 2, tonumber(ARGV[5]))
return {received, redis.call('HGET', P .. 's', 'listed') and 1 or 0}
