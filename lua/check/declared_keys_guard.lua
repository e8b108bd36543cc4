-- declared_keys_guard: prepended to every script of lua/ by a build with
-- LIMITCOUNTER_CHECK_SCRIPT_KEYS=ON (the ASan stage of scripts/test.sh runs every test so).
-- Contract: a redis.call or redis.pcall that names a key not in KEYS raises
--   "undeclared key <key> (<COMMAND>)" before the command runs;
-- a command the table below does not know raises too, so that no new command passes unchecked.
-- Why: Redis's cluster migration guard (TRYAGAIN/ASK for a script whose keys are not all on the
-- node) protects only declared keys, and Dragonfly/Valkey-compatible servers refuse undeclared
-- ones. The shadow `redis` is a local of the chunk: the script's own code sees it, Redis's
-- globals stay as they are.
-- It defines guard_keys(server, keys): the shadow of `server` (Redis's `redis`) for one call
-- whose KEYS are `keys`. The build binds it where the call's keys are known: at the chunk's top
-- for a script run by EVALSHA, in the registered function's callback for one run by FCALL (a
-- library's chunk runs once, at FUNCTION LOAD, when there are no KEYS).
local function guard_keys(server, call_keys)
  local declared = {}
  for _, key in ipairs(call_keys) do
    declared[key] = true
  end
  -- where a command's keys are: none, its first argument, every argument, its second
  -- argument, or after STREAMS (half of what follows)
  local none, first, every, second, streams = 0, 1, 2, 3, 4
  local where = {
    TIME = none,
    GET = first, SET = first, EXISTS = every, DEL = every, TYPE = first,
    PEXPIRE = first, PEXPIREAT = first, PEXPIRETIME = first, PTTL = first,
    HGET = first, HMGET = first, HSET = first, HDEL = first, HLEN = first, HINCRBY = first,
    HGETALL = first, HEXISTS = first,
    ZADD = first, ZREM = first, ZSCORE = first, ZRANGE = first, ZRANGEBYSCORE = first,
    ZREMRANGEBYSCORE = first, ZCARD = first,
    SADD = first, SREM = first, SISMEMBER = first, SMEMBERS = first,
    RPUSH = first, LPOP = first, LRANGE = first, LREM = first, LLEN = first,
    XADD = first, XACK = first, XPENDING = first, XRANGE = first, XCLAIM = first, XTRIM = first,
    XLEN = first, XINFO = second, XGROUP = second, XREADGROUP = streams,
  }
  local function check(command, ...)
    local name = string.upper(command)
    local rule = where[name]
    if rule == nil then
      error('declared_keys_guard: command ' .. name .. ' is not in its table')
    end
    local args, keys = {...}, {}
    if rule == first then
      keys = {args[1]}
    elseif rule == every then
      keys = args
    elseif rule == second then
      keys = {args[2]}
    elseif rule == streams then
      for i, arg in ipairs(args) do
        if string.upper(arg) == 'STREAMS' then
          local n = (#args - i) / 2
          for j = 1, n do
            keys[j] = args[i + j]
          end
          break
        end
      end
    end
    for _, key in ipairs(keys) do
      if not declared[key] then
        error('undeclared key ' .. tostring(key) .. ' (' .. name .. ')')
      end
    end
  end
  return setmetatable({
    call = function(...)
      check(...)
      return server.call(...)
    end,
    pcall = function(...)
      check(...)
      return server.pcall(...)
    end,
  }, {__index = server})
end
