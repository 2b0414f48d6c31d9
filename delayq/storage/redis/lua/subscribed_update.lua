-- After a subscription write: the subscribed-queues index (subscribed.lua) takes what
-- the write left, the queue subscribed until *expires* (0: not at all) as of its
-- subscription version *version*, unless it holds a later version already (writes of
-- one queue update it in any order); the write's reservation goes.
-- KEYS: the index. ARGV: queue, version (0: the write changed nothing), expires, token
-- ('' = no reservation).
-- Removals come first: at maxmemory Redis refuses a script's first write only if it may
-- grow memory, so the index update of a deletion runs whole.
local I = string.sub(KEYS[1], 1, -2)
local queue, version, expires = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[4] ~= '' then
  redis.call('ZREM', I .. 'r', queue .. ' ' .. ARGV[4])
end
if version > (tonumber(redis.call('HGET', I .. 'v', queue)) or 0) then
  if expires > 0 then
    redis.call('ZADD', I .. 'q', expires, queue)
  else
    redis.call('ZREM', I .. 'q', queue)
  end
  redis.call('HSET', I .. 'v', queue, version)
end
return 0
