-- reference_gcra: a rate limiter that keeps no record, for the benchmark's reference row
-- (consume_server_cpu_batch64, "a record-less limiter"): one call decides one request of one
-- subject by the generic cell rate algorithm, as record-less Redis rate limiters do: read the
-- subject's theoretical arrival time (TAT), allow when the request fits within the burst,
-- write the new TAT back with an expiry. It is not idempotent (a retry counts again) and checks
-- one limit: what it leaves out is what limitcounter's decision adds.
--
-- KEYS[1] the subject's key. ARGV[1] emission interval (ms), ARGV[2] burst tolerance (ms).
-- Reply: {1, 0} allowed | {0, ms until the next request would be allowed}.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now)
local next_tat = tat + interval
if next_tat - now > burst then
  return {0, next_tat - now - burst}
end
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', next_tat - now)
return {1, 0}
