-- local_report: adds to one counter what a node allowed on its own while Redis was away
-- (FailurePolicy::local), exactly once per report id.
--
-- KEYS[1]  the window hash of the counter
-- KEYS[2]  the hash of report ids already added to this counter's windows (same slot)
-- ARGV[1]  the hash field: the dimension
-- ARGV[2]  count to add, integer >= 0
-- ARGV[3]  amount to add, integer >= 0 (minor units)
-- ARGV[4]  absolute expiry of KEYS[1], unix milliseconds (window end + grace)
-- ARGV[5]  the report id ("<node id>-<sequence>")
--
-- Reply: {"added", count, amount} (the totals after the add) | {"already"} (the id was added
--        before: nothing changes, so a report re-sent after a lost reply counts once)
--        | {"overflow", count, amount} (a total would pass 2^53 - 1; nothing written).
-- The report id is kept as long as the window: KEYS[2] expires with the latest window it
-- served.

if redis.call('HGET', KEYS[2], ARGV[5]) then
  return {'already'}
end
local max_exact = 9007199254740991 -- 2^53 - 1: the largest integer a Lua number holds exactly
local count, amount = 0, 0
local value = redis.call('HGET', KEYS[1], ARGV[1])
if value then
  local c, a = string.match(value, '^(%d+):(%d+)$')
  count, amount = tonumber(c), tonumber(a)
end
count = count + tonumber(ARGV[2])
amount = amount + tonumber(ARGV[3])
if count > max_exact or amount > max_exact then
  return {'overflow', string.format('%d', count), string.format('%d', amount)}
end
if redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%d', count, amount)) == 1 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[4], 'NX')
end
redis.call('HSET', KEYS[2], ARGV[5], ARGV[2] .. ':' .. ARGV[3])
if redis.call('PEXPIREAT', KEYS[2], ARGV[4], 'NX') == 0 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[4], 'GT')
end
return {'added', count, amount}
