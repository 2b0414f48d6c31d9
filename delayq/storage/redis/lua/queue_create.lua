-- Create a queue. KEYS: queue state. ARGV: metadata (JSON), nonce.
-- Returns {created, listed}.
local P = string.sub(KEYS[1], 1, -2)
local created = 0
if redis.call('HSETNX', P .. 's', 'meta', ARGV[1]) == 1 then
  redis.call('HSET', P .. 's', 'nonce', ARGV[2])
  created = 1
end
return {created, redis.call('HGET', P .. 's', 'listed') and 1 or 0}
