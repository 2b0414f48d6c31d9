-- A page of the queue's live subscriptions in id order after a marker.
-- KEYS: queue state. ARGV: now, marker ('' = start), limit.
-- Returns {now, id, record, id, record, ...}.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local limit = tonumber(ARGV[3])
local from = ARGV[2] == '' and '-' or '(' .. ARGV[2]
local out = {now}
local found = 0
while found < limit do
  local ids = redis.call('ZRANGEBYLEX', P .. 'ui', from, '+', 'LIMIT', 0, limit - found)
  if #ids == 0 then
    break
  end
  for _, id in ipairs(ids) do
    local record, raw = live_subscription(P, id, now)
    if record then
      out[#out + 1] = id
      out[#out + 1] = raw
      found = found + 1
    end
  end
  from = '(' .. ids[#ids]
end
return out
