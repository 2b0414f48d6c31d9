-- Before a subscription write that may make a queue subscribed for *seconds* from now:
-- the subscribed-queues index (subscribed.lua) lists the queue until then, under the
-- write's token, whatever becomes of the write. KEYS: the index.
-- ARGV: now, queue, token, seconds.
local I = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
redis.call('ZADD', I .. 'r', now + tonumber(ARGV[4]) * US, ARGV[2] .. ' ' .. ARGV[3])
return 0
