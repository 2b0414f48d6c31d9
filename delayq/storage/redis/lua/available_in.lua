-- Microseconds until some message of the queue is claimable (0: now), from the head of
-- each of its three sorted sets ('d' holds a claimed message due after its claim by
-- that due time, its availability); no write.
-- KEYS: queue state. ARGV: now.
-- Returns {microseconds}, or {} when the queue holds no message.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local earliest = nil
for _, set in ipairs({'r', 'd', 'c'}) do
  local head = redis.call('ZRANGE', P .. set, 0, 0, 'WITHSCORES')
  if #head > 0 then
    local score = tonumber(head[2])
    if earliest == nil or score < earliest then
      earliest = score
    end
  end
end
if earliest == nil then
  return {}
end
return {math.max(0, earliest - now)}
