-- counter_adjust: an operator's correction of one dimension in one window, and its audit
-- entry, in one script (the counter, the audit stream and the correction's record share the
-- counter's slot). Every check runs before the first write.
--
-- KEYS[1]  the window hash of the counter (field value "<count>:<amount>")
-- KEYS[2]  the counter's audit stream (entries are never trimmed or expired by the library)
-- KEYS[3]  the correction's record (hash: fp, reply), for idempotency by correction id
-- ARGV[1]  the hash field (the dimension)
-- ARGV[2]  count delta, ARGV[3] amount delta: integers in (-2^53, 2^53), may be negative
-- ARGV[4]  the window key's expiry (unix ms: window end + grace)
-- ARGV[5]  the record's expiry (unix ms)
-- ARGV[6]  fingerprint of the correction (counter, window, field, deltas, author, reason)
-- ARGV[7]  author, ARGV[8] reason, ARGV[9] now (unix ms), ARGV[10] counter name,
-- ARGV[11] period, ARGV[12] window id, ARGV[13] correction id: written to the audit entry
--
-- Reply: {"adjusted", before count, before amount, after count, after amount, audit entry id,
--         replayed "0" | "1"}: a repeat of the id with the same fingerprint replays the first
--         reply with replayed "1" and writes nothing
--        | {"conflict"} (the id was used for another correction)
--        | {"negative", count, amount} | {"overflow", count, amount}: the totals it would
--          leave (below 0, or above 2^53 - 1); nothing written

local max_exact = 9007199254740991 -- 2^53 - 1: the largest integer a Lua number holds exactly
local window, audit, record = KEYS[1], KEYS[2], KEYS[3]
local field = ARGV[1]

local first = redis.call('HMGET', record, 'fp', 'reply')
if first[1] then
  if first[1] ~= ARGV[6] then
    return {'conflict'}
  end
  local reply = cmsgpack.unpack(first[2])
  reply[7] = '1'
  return reply
end

local count, amount = 0, 0
local value = redis.call('HGET', window, field)
if value then
  local cut = string.find(value, ':', 1, true)
  count = tonumber(string.sub(value, 1, cut - 1))
  amount = tonumber(string.sub(value, cut + 1))
end
local new_count = count + tonumber(ARGV[2])
local new_amount = amount + tonumber(ARGV[3])
if new_count < 0 or new_amount < 0 then
  return {'negative', string.format('%d', new_count), string.format('%d', new_amount)}
end
if new_count > max_exact or new_amount > max_exact then
  return {'overflow', string.format('%d', new_count), string.format('%d', new_amount)}
end

local before = string.format('%d:%d', count, amount)
local after = string.format('%d:%d', new_count, new_amount)
-- A new field may be a new key: only then can the key lack its expiry.
if redis.call('HSET', window, field, after) == 1 then
  redis.call('PEXPIREAT', window, ARGV[4], 'NX')
end
local entry = redis.call('XADD', audit, '*', 'id', ARGV[13], 'counter', ARGV[10], 'period', ARGV[11],
  'window', ARGV[12], 'dimension', field, 'before', before, 'after', after, 'author', ARGV[7],
  'reason', ARGV[8], 'at', ARGV[9])
local reply = {'adjusted', string.format('%d', count), string.format('%d', amount),
  string.format('%d', new_count), string.format('%d', new_amount), entry, '0'}
redis.call('HSET', record, 'fp', ARGV[6], 'reply', cmsgpack.pack(reply))
redis.call('PEXPIREAT', record, ARGV[5])
return reply
