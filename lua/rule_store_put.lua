-- rule_store_put: store the next version of a shared rule set, all or nothing
-- (include/limitcounter/rule_store.hpp). The C++ side has validated the YAML already; the
-- script only checks that the store is where the caller saw it (compare-and-set).
--
-- KEYS[1]  <prefix>rules:{<name>}:current   the current version number (absent: none yet)
-- KEYS[2]  <prefix>rules:{<name>}:v:<n>     the hash of the new version, n = ARGV[1] + 1
-- KEYS[3]  <prefix>rules:{<name>}:history   the history stream (the followers' notification)
-- KEYS[4]  (optional) <prefix>rules:{<name>}:v:<n - history limit>: the version that falls
--          out of the history, deleted so that a store keeps at most ARGV[6] versions
-- ARGV[1]  the version the caller expects to be current, integer >= 0 (0: none stored)
-- ARGV[2]  the YAML text of the set
-- ARGV[3]  author
-- ARGV[4]  reason
-- ARGV[5]  action ("put", "put_rule", "delete_rule", "clear", "rollback:<n>")
-- ARGV[6]  history limit, integer >= 1
--
-- Version hash fields: yaml, author, reason, action, at (server time, unix ms).
-- History entry fields: version, action, author, reason, at.
-- Reply: {"stored", n, at} when written; {"conflict", current} when the current version is
-- not ARGV[1] (nothing written). A malformed call is an error reply, nothing written.

local expected = tonumber(ARGV[1])
local limit = tonumber(ARGV[6])
if not expected or expected < 0 or expected ~= math.floor(expected) then
  return redis.error_reply('rule_store_put: bad expected version ' .. tostring(ARGV[1]))
end
if not limit or limit < 1 or limit ~= math.floor(limit) then
  return redis.error_reply('rule_store_put: bad history limit ' .. tostring(ARGV[6]))
end
local version = expected + 1
local suffix = ':v:' .. string.format('%d', version)
if string.sub(KEYS[2], -#suffix) ~= suffix then
  return redis.error_reply('rule_store_put: ' .. KEYS[2] .. ' is not the key of version ' ..
                             string.format('%d', version))
end

local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current ~= expected then
  return {'conflict', current}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  -- `current` was rolled back by hand: never overwrite a stored version.
  return redis.error_reply('rule_store_put: ' .. KEYS[2] .. ' exists already')
end

local time = redis.call('TIME')
local at = string.format('%d', tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
local text = string.format('%d', version)
redis.call('HSET', KEYS[2], 'yaml', ARGV[2], 'author', ARGV[3], 'reason', ARGV[4],
           'action', ARGV[5], 'at', at)
redis.call('SET', KEYS[1], text)
-- Exactly (=, not ~): an approximate trim keeps entries of versions KEYS[4] deleted, and
-- history() would list versions that get() no longer finds.
redis.call('XADD', KEYS[3], 'MAXLEN', '=', ARGV[6], '*', 'version', text, 'action', ARGV[5],
           'author', ARGV[3], 'reason', ARGV[4], 'at', at)
if KEYS[4] then
  redis.call('DEL', KEYS[4])
end
return {'stored', version, at}
