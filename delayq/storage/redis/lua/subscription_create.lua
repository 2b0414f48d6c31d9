-- Subscribe *subscriber* to the queue, unless it has a live subscription there already.
-- KEYS: queue state. ARGV: now, id, subscriber, ttl (seconds), options (JSON), reap
-- budget (expired subscriptions removed on the side), confirmed (1 or 0).
-- Returns {1, version, latest expiry} when created (subscriptions_changed), {0, 0, 0}
-- when not.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local id, subscriber, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
reap_subscriptions(P, now, tonumber(ARGV[6]))
if subscription_of(P, subscriber, now) then
  return {0, 0, 0}
end
local expires = now + ttl * US
redis.call('HSET', P .. 'u', id, cmsgpack.pack({subscriber, ttl, ARGV[5], now, expires,
                                                 tonumber(ARGV[7])}))
redis.call('ZADD', P .. 'ui', 0, id)
redis.call('ZADD', P .. 'ux', expires, id)
redis.call('HSET', P .. 'us', subscriber, id)
local changed = subscriptions_changed(P, now)
signal(P, SIGNAL_SUBSCRIPTIONS)
return {1, changed[1], changed[2]}
