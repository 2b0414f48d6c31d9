-- Remove expired messages, claims and move markers. KEYS: queue state.
-- ARGV: now, bucket budget, marker ttl (seconds). Returns {finished, outbox size}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local finished = reap(P, now, tonumber(ARGV[2]), tonumber(ARGV[3]))
return {finished and 1 or 0, redis.call('HLEN', P .. 'o')}
