-- Read one live subscription. KEYS: queue state. ARGV: now, id.
-- Returns {now, record}, or {now} when the queue has no such live subscription.
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local _, raw = live_subscription(P, ARGV[2], now)
return {now, raw}
