-- Claim up to *limit* claimable messages, oldest availability first, dead-lettering
-- those already claimed max_claim_count times.
-- KEYS: source queue state [, dead-letter queue state when it shares the slot].
-- ARGV: now, ttl, grace, limit, max_claim_count ('' = no policy), dead-letter queue,
-- its messages ttl ('' = keep), nonce for a new dead-letter queue, work budget, source
-- queue name, reap budget, the metadata the claim was decided under ('' = unchecked),
-- the retry policy's waits (two arguments, backoff_of; '', '' = none): each claimed
-- message is then due its wait after the claim's expiry; the claim's id token.
-- Moves to a dead-letter queue in another slot go to the outbox ('o'); the driver
-- completes them (see docs/redis.md, "Dead-letter moves across slots").
-- Returns {nonce, now, claim id (0 = none), more, target unlisted, outbox size,
-- seq, record, ...}, or {METADATA_CHANGED}.
local P = string.sub(KEYS[1], 1, -2)
local T = KEYS[2] and string.sub(KEYS[2], 1, -2) or nil
local now = clock(ARGV[1])
if redis.call('EXISTS', P .. 's') == 0 then
  return {'', now, 0, 0, 0, 0}
end
if not metadata_is(P, ARGV[12]) then
  return {METADATA_CHANGED}
end
local ttl, grace, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max_count = tonumber(ARGV[5])
local target, target_ttl = ARGV[6], tonumber(ARGV[7])
local budget, source = tonumber(ARGV[9]), ARGV[10]
local backoff = backoff_of(ARGV[13], ARGV[14])
local nonce = nonce_of(P)
local expires = now + ttl * US
local num = nil
local claim_id = nil
local claimed = {}
local more = walk_claimable(P, now, limit, budget, function(seq, m)
  if max_count ~= nil and m.count >= max_count then
    remove(P, seq, m)
    local moved = dead_lettered(nonce, seq, m, now, source, target_ttl)
    trail(P, 'dead_lettered', now, {'m', moved.id, 'c', moved.count, 'src', source,
                                    'dst', target, 'ttl', moved.ttl,
                                    'e', int(moved.expires), 'b', moved.body})
    if T ~= nil then
      ensure_queue(T, ARGV[8])
      admit(T, moved, now)
      signal(T, SIGNAL_MESSAGES)
    else
      redis.call('HSET', P .. 'o', nonce .. seq, cmsgpack.pack({target, encode(moved)}))
    end
    return false
  end
  if num == nil then
    num = redis.call('HINCRBY', P .. 's', 'cseq', 1)
  end
  m.claim = num
  m.claim_expires = expires
  m.count = m.count + 1
  if expires + grace * US > m.expires then
    m.expires = expires + grace * US
  end
  if backoff ~= nil then
    m.due = expires + backoff_wait(backoff, m.count)
  end
  store(P, seq, m)
  index_claimed(P, seq, m)
  claimed[#claimed + 1] = {seq, m}
  return true
end)
if num ~= nil then
  local record = {ttl = ttl, grace = grace, created = now, expires = expires,
                  token = ARGV[15], seqs = {}}
  claim_names[num] = claim_name(num, record.token)
  claim_id = nonce .. 'c' .. claim_names[num]
  for _, item in ipairs(claimed) do
    record.seqs[#record.seqs + 1] = item[1]
    local m = item[2]
    trail(P, 'claimed', now, {'m', message_id(nonce, item[1], m), 'cl', claim_id,
                              'c', m.count, 'e', int(m.expires)})
  end
  redis.call('HSET', P .. 'cl', num, encode_claim(record))
  redis.call('ZADD', P .. 'ce', expires, num)
end
reap(P, now, tonumber(ARGV[11]))
local unlisted = 0
if T ~= nil and redis.call('EXISTS', T .. 's') == 1
    and not redis.call('HGET', T .. 's', 'listed') then
  unlisted = 1
end
local out = {nonce, now, claim_id or 0, more and 1 or 0, unlisted,
             redis.call('HLEN', P .. 'o')}
for _, v in ipairs(pack_messages(P, claimed)) do
  out[#out + 1] = v
end
return out
