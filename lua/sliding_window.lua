-- sliding_window: admit a request if fewer than max were admitted in the last
-- window_ms milliseconds ("at most 10 in any 60 s"), and record it; a refused request
-- is not recorded. The set never holds more than max members.
--
-- KEYS[1]  the subject's sorted set of admitted requests (score: time in ms)
-- ARGV[1]  now, unix milliseconds
-- ARGV[2]  window length in milliseconds, >= 1
-- ARGV[3]  max requests per window, >= 1
-- ARGV[4]  a member unique to this request
--
-- Reply: {1, used after, oldest admitted time in ms} when admitted,
--        {0, used, oldest admitted time in ms} when refused
--        (the oldest one leaves the window at oldest + window_ms: the earliest retry).

local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local max = tonumber(ARGV[3])

redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local used = redis.call('ZCARD', key)
if used >= max then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, used, tonumber(oldest[2])}
end
redis.call('ZADD', key, now, ARGV[4])
redis.call('PEXPIRE', key, window)
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {1, used + 1, tonumber(oldest[2])}
