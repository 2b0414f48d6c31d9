-- A queue being deleted leaves its project's catalogue (catalogue_reserve.lua has the
-- keys), before its keys go. A name a creation holds stays, tentative: the holds'
-- settles decide whether a queue of that name exists afterwards.
-- KEYS: the catalogue. ARGV: name. Returns 0.
local C = string.sub(KEYS[1], 1, -7)
local name = ARGV[1]
if redis.call('HEXISTS', C .. 'qn', name) == 1 then
  redis.call('SADD', C .. 'qt', name)
else
  redis.call('ZREM', C .. 'queues', name)
  redis.call('SREM', C .. 'qt', name)
end
return 0
