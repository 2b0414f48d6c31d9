-- The queue quota (max_queues_per_project) in a project's catalogue: its keyspace and
-- protocol, here once (catalogue.py drives the steps).
--
-- KEYS[1] of every catalogue script is the catalogue, C..'queues'; its siblings extend
-- its prefix C ('NS:{PROJECT}:', a slot of the project's own, not a queue's):
--   C..'queues'  ZSET  every score 0 (listings go by name): the project's queues, and
--                      the names held for a creation in progress. Its size is what the
--                      quota counts and count_queues reports.
--   C..'qh'      ZSET  'name token' -> deadline (us): a hold, one creation in progress
--                      that the quota bounds
--   C..'qn'      HASH  name -> how many holds of that name 'qh' has
--   C..'qt'      SET   names listed for their holds alone (tentative): no queue of the
--                      name is known to exist yet
-- A held name is always in 'queues'; a tentative name is held, or about to leave.
--
-- A creation the quota bounds, of a queue found missing by its own write:
--   1. reserve (this script): a name listed already takes a hold and costs nothing;
--      another takes one only while the catalogue has fewer names than the quota,
--      and is listed tentatively. One atomic step: no burst passes the quota.
--   2. the write, in the queue's slot (queue_create.lua, post.lua), makes the queue
--      only until the hold's deadline (its fence), and then marks it 'listed';
--   3. settle (catalogue_settle.lua): the hold goes; the name stays, no longer
--      tentative, when the queue exists, else goes unless another hold keeps it.
-- A process dying between the steps leaves its hold. Once a hold is past its deadline
-- by the skew allowed between two nodes' clocks, no write under it can make the queue
-- any more, so whether the queue exists is final: the next reservation reports such
-- holds, and the driver settles each by whether its queue exists. A creation the quota
-- does not bound (dead-letter moves, redrives to the source, quota 0) lists its queue
-- after making it (settle without a hold), and a deletion unlists it first
-- (catalogue_unlist.lua), leaving a held name to its holds.
--
-- Reserve a hold of a name for a creation. ARGV: now, name, token, quota, lease (us:
-- the hold's deadline is now + lease), skew (us).
-- Returns {1, deadline, late hold, ...}: held; or {0, count, late hold, ...}: refused,
-- the catalogue listing *count* names, the quota or more. Either way, the holds past
-- their deadline by the skew, for the driver to settle (at most LATE of them).
local LATE = 16
local C = string.sub(KEYS[1], 1, -7)
local now = clock(ARGV[1])
local name, quota = ARGV[2], tonumber(ARGV[4])
local reply = redis.call('ZRANGEBYSCORE', C .. 'qh', '-inf', now - tonumber(ARGV[6]),
                         'LIMIT', 0, LATE)
if not redis.call('ZSCORE', C .. 'queues', name) then
  local count = redis.call('ZCARD', C .. 'queues')
  if count >= quota then
    table.insert(reply, 1, count)
    table.insert(reply, 1, 0)
    return reply
  end
  redis.call('ZADD', C .. 'queues', 0, name)
  redis.call('SADD', C .. 'qt', name)
end
local deadline = now + tonumber(ARGV[5])
redis.call('ZADD', C .. 'qh', int(deadline), name .. ' ' .. ARGV[3])
redis.call('HINCRBY', C .. 'qn', name, 1)
table.insert(reply, 1, deadline)
table.insert(reply, 1, 1)
return reply
