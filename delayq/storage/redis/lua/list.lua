-- A page of live messages in post order after a marker.
-- KEYS: queue state. ARGV: now, marker seq ('' = start), limit, include claimed (0/1),
-- include delayed (0/1), client to leave out ('' = none), most records to read.
-- Returns {nonce, now, outbox size, status, last seq read, seq, record, ...}; status 0: the queue has
-- no more, 1: the page is full, 2: the read budget ran out (continue after last seq).
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local marker, limit = ARGV[2], tonumber(ARGV[3])
local include_claimed, include_delayed = ARGV[4] == '1', ARGV[5] == '1'
local exclude, budget = ARGV[6], tonumber(ARGV[7])
local nonce = nonce_of(P)
local page = {}
local read = 0
local last = marker
local status = 0
local from = marker ~= '' and bucket_of(marker) or 0
while status == 0 do
  local buckets = redis.call('ZRANGEBYSCORE', P .. 'bi', from, '+inf', 'LIMIT', 0, 16)
  if #buckets == 0 then
    break
  end
  for _, bucket in ipairs(buckets) do
    local fields = redis.call('HGETALL', bucket_key(P, bucket))
    local seqs = {}
    local records = {}
    for i = 1, #fields, 2 do
      if fields[i] > marker then
        seqs[#seqs + 1] = fields[i]
        records[fields[i]] = fields[i + 1]
      end
    end
    table.sort(seqs)
    for _, seq in ipairs(seqs) do
      local m = decode_at(P, seq, records[seq])
      read = read + 1
      last = seq
      -- A live claim's message is claimed, not delayed, whatever its due time.
      local claimed = m.claim ~= 0 and m.claim_expires > now
      if m.expires > now
          and (include_claimed or not claimed)
          and (include_delayed or claimed or m.due <= now)
          and (exclude == '' or m.client ~= exclude) then
        page[#page + 1] = {seq, m}
      end
      if #page == limit then
        status = 1
        break
      end
      if read >= budget then
        status = 2
        break
      end
    end
    if status ~= 0 then
      break
    end
    from = tonumber(bucket) + 1
  end
end
local out = {nonce, now, redis.call('HLEN', P .. 'o'), status, last}
for _, v in ipairs(pack_messages(P, page)) do
  out[#out + 1] = v
end
return out
