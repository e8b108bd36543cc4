-- least_consume_floor: consume_floor.lua's commands under the least contract a lone consume
-- that keeps a record and a counter set could have, for the benchmark's reference row
-- (--server-instructions, "least consume floor"): the lower bound of any redesign of op one's
-- keys and arguments. It reads the counter field (HGET), checks the counter set is stored (GET,
-- SET only the first time), creates the record (SET ... NX GET PX), writes the counter field
-- (HSET), as consume_floor.lua, but is sent only what an allowed consume needs: no op, no clock,
-- no program or rule names, no hold set. What it leaves out is what makes a denial one round
-- trip (expired holds released, the rules checked and the denying one named); the record's
-- lifetime comes from the counter set's text, the counter set's name from its key.
--
-- KEYS: the record, the counter set, the counter hash. ARGV: the counter set's text (its first
-- word the record lifetime, ms), fingerprint, amount, field.
-- Reply: {1, 1, count, amount} (the counter's totals after it), or {5} if the record was there.
local value = redis.call('HGET', KEYS[3], ARGV[4])
local count, amount = 0, 0
if value then
  local colon = string.find(value, ':', 1, true)
  count, amount = string.sub(value, 1, colon - 1) + 0, string.sub(value, colon + 1) + 0
end
local set_text = ARGV[1]
local lifetime = string.match(set_text, '^%d+')
if redis.call('GET', KEYS[2]) ~= set_text then
  redis.call('SET', KEYS[2], set_text, 'PX', lifetime)
end
if redis.call('SET', KEYS[1], 'c ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. string.sub(KEYS[2], -8) ..
  ' ' .. ARGV[4], 'NX', 'GET', 'PX', lifetime) then
  return {5}
end
count, amount = count + 1, amount + ARGV[3]
redis.call('HSET', KEYS[3], ARGV[4], string.format('%d:%d', count, amount))
return {1, 1, count, amount}
