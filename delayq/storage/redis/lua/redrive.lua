-- Send up to *limit* messages that no live claim holds, oldest availability first, to
-- the queue each was dead-lettered from, or to the destination: claim count reset, due at
-- once, id, body, creation and expiry kept. Each leaves this queue here and goes to the
-- outbox; the driver hands it to its queue (move_in), as for dead-letter moves to
-- another slot, so a process dying in between loses nothing.
-- KEYS: this queue's state. ARGV: now, limit, destination ('' = each one's source), this
-- queue's name, skip budget (messages stepped over: without a source, or held by a
-- live claim), reap budget.
-- Returns {moved, outbox size}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
if redis.call('EXISTS', P .. 's') == 0 then
  return {0, 0}
end
local limit, destination, queue = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local budget = tonumber(ARGV[5])
local nonce = nonce_of(P)
-- Free, delayed (with claimed ones due after their claim, stepped over while it lives),
-- and claimed whose claim is over; how many of each were stepped over.
local sets = {{P .. 'r', '+inf'}, {P .. 'd', '+inf'}, {P .. 'c', now}}
local skipped = {0, 0, 0}
local moved, work = 0, 0

local function oldest()
  local best = nil
  for k = 1, 3 do
    local got = redis.call('ZRANGEBYSCORE', sets[k][1], '-inf', sets[k][2], 'WITHSCORES',
                           'LIMIT', skipped[k], 1)
    if #got > 0 and (best == nil or before(tonumber(got[2]), got[1], best[2], best[1])) then
      best = {got[1], tonumber(got[2]), k}
    end
  end
  return best
end

while moved < limit and work < budget do
  local candidate = oldest()
  if candidate == nil then
    break
  end
  local seq, k = candidate[1], candidate[3]
  local m = load(P, seq)
  if m == nil then
    unindex(P, seq)
  elseif m.expires <= now then
    remove(P, seq, m)
    trail_expired(P, nonce, seq, m)
  elseif (destination == '' and m.source == '')
      or (m.claim ~= 0 and m.claim_expires > now) then
    skipped[k] = skipped[k] + 1
    work = work + 1
  else
    remove(P, seq, m)
    local target = destination ~= '' and destination or m.source
    local count = m.count
    m.id = message_id(nonce, seq, m)
    m.token = ''  -- the id holds it
    m.claim, m.claim_expires, m.count, m.source, m.moved = 0, 0, 0, '', 0
    if m.due > now then
      m.due = now
    end
    trail(P, 'redriven', now, {'m', m.id, 'c', count, 'src', queue, 'dst', target,
                               'e', int(m.expires)})
    redis.call('HSET', P .. 'o', nonce .. seq, cmsgpack.pack({target, encode(m)}))
    moved = moved + 1
  end
end
reap(P, now, tonumber(ARGV[6]))
return {moved, redis.call('HLEN', P .. 'o')}
