-- Delete messages by id, claimed or not. KEYS: queue state. ARGV: now, id, ...
local P = string.sub(KEYS[1], 1, -2)
local nonce = nonce_of(P)
for i = 2, #ARGV do
  local seq, m = locate(P, nonce, ARGV[i])
  if seq ~= nil and m ~= nil then
    remove(P, seq, m)
  end
end
return 0
