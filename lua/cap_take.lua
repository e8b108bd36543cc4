-- cap_take: take n from a capped counter ("an account sends at most 1000 SMS a day"),
-- or refuse without counting anything.
--
-- KEYS[1]  the window hash of the cap (e.g. its day window)
-- ARGV[1]  the hash field: the subject, e.g. the account id
-- ARGV[2]  n to take, integer >= 1
-- ARGV[3]  the cap, integer >= 0
-- ARGV[4]  absolute expiry of KEYS[1], unix milliseconds (window end + grace)
--
-- Field value: "<count>:0", the same format as the period counters.
-- Reply: {1, used after} when taken, {0, used} when refused (nothing written).

local field = ARGV[1]
local take = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])

local used = 0
local value = redis.call('HGET', KEYS[1], field)
if value then
  used = tonumber(string.sub(value, 1, string.find(value, ':', 1, true) - 1))
end
if used + take > cap then
  return {0, used}
end
used = used + take
if redis.call('HSET', KEYS[1], field, string.format('%d:0', used)) == 1 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[4], 'NX') -- a new field may be a new key
end
return {1, used}
