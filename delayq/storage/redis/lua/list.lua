-- A page of live messages in post order after a marker.
-- KEYS: queue state. ARGV: now, marker seq ('' = start), limit, include claimed (0/1),
-- include delayed (0/1), client to leave out ('' = none), most records to read, marker
-- message id ('' = none; when given, the listing goes after that message instead).
-- Returns {nonce, now, outbox size, status, last seq read, seq, record, ...}; status 0: the queue has
-- no more, 1: the page is full, 2: the read budget ran out (continue after last seq).
local P = string.sub(KEYS[1], 1, -2)
local now = clock(ARGV[1])
local marker, limit = ARGV[2], tonumber(ARGV[3])
local include_claimed, include_delayed = ARGV[4] == '1', ARGV[5] == '1'
local exclude, budget = ARGV[6], tonumber(ARGV[7])
local nonce = nonce_of(P)

-- The seq a message id marker lists after. A live message's, wherever it came from
-- (locate); a gone one's when it was minted here, whose id holds its seq, so that a
-- client paging with ids goes on after a message deleted meanwhile. Any other id (moved
-- in and gone, or of another queue or incarnation) names no place here: '' (the start).
-- The token is not checked then: a seq only says where to start, as a position does.
local function marker_seq(id)
  local seq = locate(P, nonce, id)
  if seq then
    return seq
  end
  local minted = NONCE_LENGTH + SEQ_LENGTH
  if (#id == minted + TOKEN_LENGTH or #id == minted) and nonce ~= ''
      and string.sub(id, 1, NONCE_LENGTH) == nonce then
    seq = string.sub(id, NONCE_LENGTH + 1, minted)
    if string.match(seq, '^[0-9a-z]+$') then
      return seq
    end
  end
  return ''
end

if ARGV[8] ~= '' then
  marker = marker_seq(ARGV[8])
end
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
