-- Remove expired messages, claims, move markers and subscriptions. KEYS: queue state.
-- ARGV: now, bucket budget (and expired subscriptions removed), marker ttl (seconds).
-- Returns {finished, outbox size}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local finished = reap(P, now, tonumber(ARGV[2]), tonumber(ARGV[3]))
reap_subscriptions(P, now, tonumber(ARGV[2]))
return {finished and 1 or 0, redis.call('HLEN', P .. 'o')}
