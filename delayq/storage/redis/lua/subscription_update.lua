-- Change a live subscription: its subscriber, its ttl (running from now), its options.
-- KEYS: queue state. ARGV: now, id, subscriber, ttl (seconds), options (JSON), each
-- '' when unchanged; reap budget (expired subscriptions removed on the side);
-- confirmed (1, 0, or '' when unchanged).
-- Returns {0, version, latest expiry} when changed (subscriptions_changed), {1, 0, 0}
-- when the queue has no such live subscription, {2, 0, 0} when the new subscriber has
-- a live subscription of the queue already.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local id, subscriber = ARGV[2], ARGV[3]
reap_subscriptions(P, now, tonumber(ARGV[6]))
local record = live_subscription(P, id, now)
if record == nil then
  return {1, 0, 0}
end
if subscriber ~= '' and subscriber ~= record[1] then
  if subscription_of(P, subscriber, now) then
    return {2, 0, 0}
  end
  redis.call('HDEL', P .. 'us', record[1])
  redis.call('HSET', P .. 'us', subscriber, id)
  record[1] = subscriber
end
if ARGV[4] ~= '' then
  record[2] = tonumber(ARGV[4])
  record[5] = now + record[2] * US
  redis.call('ZADD', P .. 'ux', record[5], id)
end
if ARGV[5] ~= '' then
  record[3] = ARGV[5]
end
if ARGV[7] ~= '' then
  record[6] = tonumber(ARGV[7])
end
redis.call('HSET', P .. 'u', id, cmsgpack.pack(record))
local changed = subscriptions_changed(P, now)
signal(P, SIGNAL_SUBSCRIPTIONS)
return {0, changed[1], changed[2]}
