-- Delete one subscription of the queue, or every one. KEYS: queue state.
-- ARGV: now, id ('' = every subscription of the queue).
-- Returns {version, latest expiry} (subscriptions_changed), or {0, 0} when there was
-- nothing to delete.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local id = ARGV[2]
if id == '' then
  if redis.call('ZCARD', P .. 'ui') == 0 then
    return {0, 0}
  end
  redis.call('UNLINK', P .. 'u', P .. 'ui', P .. 'ux', P .. 'us')
elseif redis.call('ZSCORE', P .. 'ui', id) then
  drop_subscription(P, id)
else
  return {0, 0}
end
signal(P, SIGNAL_SUBSCRIPTIONS)
return subscriptions_changed(P, now)
