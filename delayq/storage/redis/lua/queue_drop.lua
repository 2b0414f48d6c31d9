-- Delete every message and claim of a queue; with ARGV[1] = 'delete' the queue too.
-- KEYS: queue state. Large structures are freed in the background (UNLINK).
local P = string.sub(KEYS[1], 1, -2)
for _, bucket in ipairs(redis.call('ZRANGE', P .. 'bi', 0, -1)) do
  redis.call('UNLINK', bucket_key(P, bucket))
end
redis.call('UNLINK', P .. 'r', P .. 'd', P .. 'c', P .. 'bi', P .. 'xb', P .. 'cl',
           P .. 'ce', P .. 'a', P .. 'o', P .. 'mv')
if ARGV[1] == 'delete' then
  redis.call('UNLINK', P .. 's')
end
return 0
