-- Counts of a queue's live messages, with its oldest and newest.
-- KEYS: queue state. ARGV: now, reap budget.
-- Returns {finished}: expired messages remain, call again; or
-- {1, nonce, now, outbox size, free, claimed, delayed, oldest seq, record, newest seq,
-- record}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
-- Exact counts need every expired message gone first; reaping is bounded per call.
if not reap(P, now, tonumber(ARGV[2])) then
  return {0}
end
-- The members of 'd' whose claim lives ('wc' above now) are due after it: claimed, not
-- delayed.
local after = '(' .. int(now)
local waiting = redis.call('ZCOUNT', P .. 'wc', after, '+inf')
local delayed = redis.call('ZCOUNT', P .. 'd', after, '+inf') - waiting
local claimed = redis.call('ZCOUNT', P .. 'c', after, '+inf') + waiting
local free = redis.call('ZCARD', P .. 'r') + redis.call('ZCOUNT', P .. 'd', '-inf', now)
    + redis.call('ZCOUNT', P .. 'c', '-inf', now)
local out = {1, nonce_of(P), now, redis.call('HLEN', P .. 'o'), free, claimed, delayed}
local function edge(first)
  local buckets
  if first then
    buckets = redis.call('ZRANGE', P .. 'bi', 0, 0)
  else
    buckets = redis.call('ZRANGE', P .. 'bi', -1, -1)
  end
  if #buckets == 0 then
    return
  end
  local fields = redis.call('HGETALL', bucket_key(P, buckets[1]))
  local best = nil
  for i = 1, #fields, 2 do
    if best == nil or (first and fields[i] < fields[best]) or
        (not first and fields[i] > fields[best]) then
      best = i
    end
  end
  if best ~= nil then
    out[#out + 1] = fields[best]
    out[#out + 1] = wire_record(P, decode_at(P, fields[best], fields[best + 1]))
  end
end
edge(true)
edge(false)
return out
