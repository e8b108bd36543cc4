-- consume_floor: the Redis commands a lone 1-rule consume (lua/limit.lua, op one) runs when
-- allowed, with op one's keys and arguments, and nothing else, for the benchmark's reference
-- row (--server-instructions, "single consume floor"): read the counter field (HGET), check the
-- counter set is stored (GET, SET only the first time), create the record with its lifetime
-- (SET ... NX GET PX), write the counter field (HSET). No rule is checked, no program decoded, no
-- name or clock read: what op one costs above it is its logic, what it costs below the record-less
-- limiter's row is what a record and a reversible counter set take.
--
-- KEYS: the record, the counter set, the counter hash, its hold set (declared, not touched: as
-- op one, which reaches it only on a denial). ARGV as op one's: op, now (ms), record lifetime
-- (ms), program, rule names, counter set name, counter set text, fingerprint, amount, field.
-- Reply: {1, 1, count, amount} (the counter's totals after it), or {5} if the record was there.
local value = redis.call('HGET', KEYS[3], ARGV[10])
local count, amount = 0, 0
if value then
  local colon = string.find(value, ':', 1, true)
  count, amount = string.sub(value, 1, colon - 1) + 0, string.sub(value, colon + 1) + 0
end
if redis.call('GET', KEYS[2]) ~= ARGV[7] then
  redis.call('SET', KEYS[2], ARGV[7], 'PX', ARGV[3])
end
if redis.call('SET', KEYS[1], 'c ' .. ARGV[8] .. ' ' .. ARGV[9] .. ' ' .. ARGV[6] .. ' ' ..
  ARGV[10], 'NX', 'GET', 'PX', ARGV[3]) then
  return {5}
end
count, amount = count + 1, amount + ARGV[9]
redis.call('HSET', KEYS[3], ARGV[10], string.format('%d:%d', count, amount))
return {1, 1, count, amount}
