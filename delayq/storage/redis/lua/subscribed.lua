-- The queues of every project with a live subscription, from the subscribed-queues
-- index, whose entries past their time go on the way.
-- KEYS: the index ('q'; its siblings extend its prefix: 'r', 'v'). ARGV: now.
--   I..'q'  ZSET  queue -> expiry of its latest live subscription, as last updated
--   I..'v'  HASH  queue -> the subscription version (P..'uv') of that entry
--   I..'r'  ZSET  'queue token' -> reservation: a subscription write in progress may
--                 make the queue subscribed until then
-- A queue is 'PROJECT/QUEUE', PROJECT percent-encoded (layout.py, KeyNames.subscribed).
-- Returns the queues, reserved ones among them (a queue may come twice).
local I = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
redis.call('ZREMRANGEBYSCORE', I .. 'q', '-inf', now)
redis.call('ZREMRANGEBYSCORE', I .. 'r', '-inf', now)
local out = redis.call('ZRANGE', I .. 'q', 0, -1)
for _, reserved in ipairs(redis.call('ZRANGE', I .. 'r', 0, -1)) do
  out[#out + 1] = string.match(reserved, '^[^ ]+')
end
return out
