-- red_packet: create, grab and close one red packet. A packet's keys and its payout
-- partition's keys share one hash tag. Every check runs before the first write.
--
-- Keys of a packet: meta (hash: total, count, expires, max_attempts, closed, ttl_at),
-- list (the amounts still to draw), drawn (hash user -> "<amount>:<time ms>"),
-- attempts (hash user -> calls that got an amount). Partition: packets (zset of packet
-- ids by expiry), ready (zset of task ids by due time), tasks (hash task id ->
-- "<amount>:<attempts>:<lease>"). A task id is "<packet>:<user>".
--
-- op create: KEYS meta, list, packets
--   ARGV[2] packet id, ARGV[3] total, ARGV[4] expires (ms), ARGV[5] max attempts,
--   ARGV[6] keys expire at (ms), ARGV[7..] the amounts (integers >= 1 summing to total)
--   Reply: {"created", count} | {"exists"} | {"bad_sum", sum}
-- op grab: KEYS meta, list, drawn, attempts, ready, tasks
--   ARGV[2] packet id, ARGV[3] user, ARGV[4] now (ms)
--   Reply: {"granted", amount} | {"already", amount} | {"sold_out"} | {"expired"}
--          | {"too_many_attempts"} | {"unknown"}
--   Refused calls (sold_out, expired, too_many_attempts) count no attempt.
-- op close: KEYS meta, list, packets
--   ARGV[2] packet id
--   Reply: {"closed", leftover amount, packets left} | {"already"} | {"unknown"}

local op = ARGV[1]

local function create()
  local meta, list, packets = KEYS[1], KEYS[2], KEYS[3]
  if redis.call('EXISTS', meta) == 1 then
    return {'exists'}
  end
  local sum = 0
  for i = 7, #ARGV do
    sum = sum + tonumber(ARGV[i])
  end
  if sum ~= tonumber(ARGV[3]) then
    return {'bad_sum', string.format('%d', sum)}
  end
  -- RPUSH in chunks: Lua's unpack has a stack limit of a few thousand values.
  local count = #ARGV - 6
  for first = 7, #ARGV, 1000 do
    redis.call('RPUSH', list, unpack(ARGV, first, math.min(first + 999, #ARGV)))
  end
  redis.call('HSET', meta, 'total', ARGV[3], 'count', count, 'expires', ARGV[4], 'max_attempts', ARGV[5],
    'closed', 0, 'ttl_at', ARGV[6])
  redis.call('PEXPIREAT', meta, ARGV[6])
  redis.call('PEXPIREAT', list, ARGV[6])
  redis.call('ZADD', packets, ARGV[4], ARGV[2])
  return {'created', count}
end

local function grab()
  local meta, list, drawn, attempts, ready, tasks = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
  local user, now = ARGV[3], tonumber(ARGV[4])
  local state = redis.call('HMGET', meta, 'expires', 'max_attempts', 'closed', 'ttl_at')
  if not state[1] then
    return {'unknown'}
  end
  local tries = tonumber(redis.call('HGET', attempts, user) or '0')
  if tries >= tonumber(state[2]) then
    return {'too_many_attempts'}
  end
  local before = redis.call('HGET', drawn, user)
  if before then
    redis.call('HINCRBY', attempts, user, 1)
    return {'already', tonumber(string.sub(before, 1, string.find(before, ':', 1, true) - 1))}
  end
  if state[3] == '1' or now >= tonumber(state[1]) then
    return {'expired'}
  end
  local amount = redis.call('LPOP', list)
  if not amount then
    return {'sold_out'}
  end
  redis.call('HINCRBY', attempts, user, 1)
  redis.call('HSET', drawn, user, amount .. ':' .. ARGV[4])
  redis.call('PEXPIREAT', drawn, state[4], 'NX')
  redis.call('PEXPIREAT', attempts, state[4], 'NX')
  local task = ARGV[2] .. ':' .. user
  redis.call('HSET', tasks, task, amount .. ':0:0')
  redis.call('ZADD', ready, now, task)
  return {'granted', tonumber(amount)}
end

local function close()
  local meta, list, packets = KEYS[1], KEYS[2], KEYS[3]
  local closed = redis.call('HGET', meta, 'closed')
  if not closed then
    return {'unknown'}
  end
  if closed == '1' then
    return {'already'}
  end
  local leftover = 0
  local amounts = redis.call('LRANGE', list, 0, -1)
  for _, amount in ipairs(amounts) do
    leftover = leftover + tonumber(amount)
  end
  redis.call('DEL', list)
  redis.call('HSET', meta, 'closed', 1, 'leftover', string.format('%d', leftover))
  redis.call('ZREM', packets, ARGV[2])
  return {'closed', leftover, #amounts}
end

if op == 'create' then
  return create()
elseif op == 'grab' then
  return grab()
elseif op == 'close' then
  return close()
end
return redis.error_reply('red_packet: unknown op ' .. tostring(op))
