-- Create a queue. KEYS: queue state. ARGV: metadata (JSON), nonce, now, fence: '' =
-- create it; else create it only while now <= fence (us; '0' = not at all), the
-- deadline of the creation's hold in the project catalogue (catalogue_reserve.lua),
-- which lists the queue from then on ('listed').
-- Returns {created, listed, exists}.
local P = string.sub(KEYS[1], 1, -2)
local fence = ARGV[4]
local created = 0
if (fence == '' or clock(ARGV[3]) <= tonumber(fence))
    and redis.call('HSETNX', P .. 's', 'meta', ARGV[1]) == 1 then
  redis.call('HSET', P .. 's', 'nonce', ARGV[2])
  if fence ~= '' then
    redis.call('HSET', P .. 's', 'listed', '1')
  end
  created = 1
end
return {created, redis.call('HGET', P .. 's', 'listed') and 1 or 0,
        redis.call('HEXISTS', P .. 's', 'meta')}
