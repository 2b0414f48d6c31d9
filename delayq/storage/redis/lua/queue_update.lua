-- Set a field of an existing queue's state: its metadata, or the 'listed' flag once the
-- project catalogue lists it. KEYS: queue state. ARGV: field, value.
-- Returns 1, or 0 when the queue does not exist.
if redis.call('HEXISTS', KEYS[1], 'meta') == 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
