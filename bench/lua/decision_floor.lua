-- decision_floor: the Redis commands a 1-rule consume cannot do without, and nothing else, for
-- the benchmark's reference row (consume_server_cpu_batch64, "floor"): per transaction, the
-- record created with its expiry by one `SET ... NX GET PXAT`; per call, the counter fields
-- read by one `HMGET` and written by one `HSET` at its end, as lua/limit.lua does. No rule is
-- checked, no argument decoded beyond the fields, no reply beyond one integer per transaction.
--
-- KEYS: n records, then the counter hash. ARGV[1] record expiry (ms), ARGV[2] record text,
-- ARGV[3..n+2] the transactions' counter fields.
-- Reply: n integers (1 if the record was created).
local n = #KEYS - 1
local counter = KEYS[n + 1]
local totals, order = {}, {}
for i = 1, n do
  local field = ARGV[i + 2]
  if not totals[field] then
    totals[field] = 0
    order[#order + 1] = field
  end
end
local values = redis.call('HMGET', counter, unpack(order))
for i, field in ipairs(order) do
  local value = values[i] or '0:0'
  totals[field] = tonumber(string.sub(value, 1, string.find(value, ':', 1, true) - 1))
end
local replies = {}
for i = 1, n do
  local field = ARGV[i + 2]
  local created = not redis.call('SET', KEYS[i], ARGV[2], 'NX', 'GET', 'PXAT', ARGV[1])
  if created then
    totals[field] = totals[field] + 1
  end
  replies[i] = created and 1 or 0
end
local args = {}
for _, field in ipairs(order) do
  args[#args + 1] = field
  args[#args + 1] = string.format('%d:%d', totals[field], totals[field] * 100)
end
redis.call('HSET', counter, unpack(args))
return replies
