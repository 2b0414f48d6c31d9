-- After a creation (catalogue_reserve.lua has the keys and the protocol): its hold, if
-- it took one, goes; the name is listed for good when the queue exists, else leaves
-- the catalogue unless it is listed for good or another hold keeps it.
-- KEYS: the catalogue. ARGV: name, token ('' = no hold: a creation the quota does not
-- bound), exists (1: the queue exists, as this creation made or found it; 0: it made
-- none). Returns 0.
local C = string.sub(KEYS[1], 1, -7)
local name = ARGV[1]
if ARGV[2] ~= '' and redis.call('ZREM', C .. 'qh', name .. ' ' .. ARGV[2]) == 1
    and redis.call('HINCRBY', C .. 'qn', name, -1) <= 0 then
  redis.call('HDEL', C .. 'qn', name)
end
if ARGV[3] == '1' then
  redis.call('SREM', C .. 'qt', name)
  redis.call('ZADD', C .. 'queues', 0, name)
elseif redis.call('HEXISTS', C .. 'qn', name) == 0
    and redis.call('SREM', C .. 'qt', name) == 1 then
  redis.call('ZREM', C .. 'queues', name)
end
return 0
