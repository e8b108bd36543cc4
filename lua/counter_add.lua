-- counter_add: add a count and an amount to one dimension in several windows.
--
-- KEYS[i]   the window hashes of one counter (e.g. its day and month windows); same slot
-- ARGV[1]   the hash field: the dimension, e.g. "Ali+Deduct+cmb"
-- ARGV[2]   count to add, integer >= 0
-- ARGV[3]   amount to add, integer >= 0 (minor units)
-- ARGV[3+i] absolute expiry of KEYS[i], unix milliseconds (window end + grace)
--
-- Field value: "<count>:<amount>", both base-10 integers below 2^53.
-- Reply: {"ok", count_1, amount_1, count_2, amount_2, ...}, the totals after the add,
--        or {"overflow", i, count_i, amount_i} if a total would reach 2^53; then
--        nothing is written (every check runs before the first write).
-- Expiry: when a field is created (so possibly its key), PEXPIREAT ... NX gives the key
--         its window expiry if it has none: a new key never lives without a TTL, and the
--         common case (an existing field) costs no expiry command at all.

local max_exact = 9007199254740991 -- 2^53 - 1: the largest integer a Lua number holds exactly
local field = ARGV[1]
local add_count = tonumber(ARGV[2])
local add_amount = tonumber(ARGV[3])

local totals = {}
for i = 1, #KEYS do
  local count, amount = 0, 0
  local value = redis.call('HGET', KEYS[i], field)
  if value then
    local cut = string.find(value, ':', 1, true)
    count = tonumber(string.sub(value, 1, cut - 1))
    amount = tonumber(string.sub(value, cut + 1))
  end
  count = count + add_count
  amount = amount + add_amount
  if count > max_exact or amount > max_exact then
    return {'overflow', i, string.format('%d', count), string.format('%d', amount)}
  end
  totals[i] = {count, amount}
end

local reply = {'ok'}
for i = 1, #KEYS do
  local count, amount = totals[i][1], totals[i][2]
  -- A new field may be a new key: only then can the key lack its expiry.
  if redis.call('HSET', KEYS[i], field, string.format('%d:%d', count, amount)) == 1 then
    redis.call('PEXPIREAT', KEYS[i], ARGV[3 + i], 'NX')
  end
  reply[#reply + 1] = count
  reply[#reply + 1] = amount
end
return reply
