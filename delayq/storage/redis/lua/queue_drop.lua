-- Delete every message and claim of a queue; with ARGV[1] = 'delete' the queue too.
-- KEYS: queue state. ARGV: how ('delete' or 'purge'), now.
-- Idempotency keys ('k', 'ke') go too. The event trail ('ev') stays, with a 'purged'
-- event: audits still see the history. Large structures are freed in the background
-- (UNLINK).
-- The outbox ('o') stays: moves a claim put there since the driver last emptied it are
-- completed afterwards, not lost. So do the move markers ('mv', which expire on their
-- own): a move arriving again after a purge must still be recognised.
-- The frees come before the 'purged' event: at maxmemory Redis refuses a script's
-- command that may grow memory (XADD) only while the script has written nothing yet, so
-- a full Redis still purges and deletes queues, and records them.
-- Returns the outbox size.
local P = string.sub(KEYS[1], 1, -2)
local existed = redis.call('EXISTS', P .. 's') == 1
for _, bucket in ipairs(redis.call('ZRANGE', P .. 'bi', 0, -1)) do
  redis.call('UNLINK', bucket_key(P, bucket))
end
redis.call('UNLINK', P .. 'r', P .. 'd', P .. 'c', P .. 'wc', P .. 'bi', P .. 'xb',
           P .. 'cl', P .. 'ce', P .. 'a', P .. 'k', P .. 'ke')
if existed then
  trail(P, 'purged', clock(ARGV[2]), {})
end
if ARGV[1] == 'delete' then
  redis.call('UNLINK', P .. 's')
end
return redis.call('HLEN', P .. 'o')
