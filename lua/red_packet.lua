-- red_packet: create (in chunks), grab and close one red packet. A packet's keys and its
-- payout partition's keys share one hash tag. Every check runs before the first write.
--
-- Keys of a packet: meta (hash: total, count, expires, max_attempts, ttl_at, digest, chunks,
-- next_chunk, stored and filled (sum and number of the amounts stored so far), ready (1 once
-- every chunk is stored),
-- closed, and after a close: leftover, packets_left), list (the amounts still to draw),
-- drawn (hash user -> "<amount>:<time ms>[:<display>]"), attempts (hash user -> grabs that
-- won nothing). Partition: packets (zset of complete packet ids by expiry), ready (zset of
-- task ids by due time), tasks (hash task id -> "<amount>:<attempts>:<lease>[:<display>]").
-- A task id is "<packet>:<user>"; a display is "<nickname bytes>:<nickname><avatar url>".
-- Amounts travel as decimal strings, never formatted from Lua numbers (%.14g would round).
--
-- op begin: KEYS meta, list, packets
--   ARGV[2] packet id, ARGV[3] total, ARGV[4] count, ARGV[5] expires (ms), ARGV[6] max
--   attempts, ARGV[7] keys expire at (ms), ARGV[8] content digest, ARGV[9] chunks, ARGV[10]
--   now (ms, the client's clock)
--   Reply: {"begun", 0, 0} | {"exists", next chunk, ready 0/1} | {"conflict"} | {"past"} (a
--          new packet that would expire at once: nothing written)
--   A packet with the same id and another digest, total or count is a conflict. One with the
--   same content exists also past its expiry: a create retried late (its reply was lost) is
--   told so, and finishes the packet if it was cut off, so that a close returns its leftover.
-- op chunk: KEYS meta, list, packets
--   ARGV[2] packet id, ARGV[3] content digest, ARGV[4] chunk index (0-based), ARGV[5..] amounts
--   Reply: {"stored", next chunk, ready} | {"have", next chunk, ready} (stored before: nothing
--          pushed) | {"gap", next chunk} (an earlier chunk is missing: nothing pushed)
--          | {"conflict"} | {"unknown"} | {"bad_amount", value} | {"bad_sum", stored sum}
-- op grab: KEYS meta, list, drawn, attempts, ready, tasks
--   ARGV[2] packet id, ARGV[3] user, ARGV[4] now (ms), ARGV[5] display (optional, "" for none)
--   Reply: {"granted", amount} | {"already", amount} | {"sold_out"} | {"expired"}
--          | {"too_many_attempts"} | {"not_ready"} | {"unknown"}
--   A user who won always gets already. Only sold_out counts an attempt; a user who has
--   max_attempts of them gets too_many_attempts.
-- op close: KEYS meta, list, packets
--   ARGV[2] packet id
--   Reply: {"closed", leftover, packets left} | {"already", leftover, packets left}
--          | {"not_ready"} | {"unknown"}; every answer leaves the id out of packets
-- op status: KEYS meta, list, drawn, attempts (reads only, for operators)
--   Reply: {"status", total, count, expires (ms), ready 0/1, closed 0/1, packets left, amount
--           left, grabs won, users whose grabs won nothing} | {"unknown"}
--   Amount left: the sum of the packets still in the list (after a close: the leftover).

local op = ARGV[1]
local max_exact = 9007199254740991

local function is_count(text)
  return string.match(text, '^[1-9]%d*$') ~= nil and #text <= 16 and tonumber(text) <= max_exact
end

local function begin()
  local meta = KEYS[1]
  local before = redis.call('HMGET', meta, 'digest', 'total', 'count', 'next_chunk', 'ready')
  if before[2] then
    if before[1] ~= ARGV[8] or before[2] ~= ARGV[3] or before[3] ~= ARGV[4] then
      return {'conflict'}
    end
    return {'exists', tonumber(before[4] or ARGV[9]), tonumber(before[5] or '1')}
  end
  if tonumber(ARGV[5]) <= tonumber(ARGV[10]) then
    return {'past'}
  end
  redis.call('HSET', meta, 'total', ARGV[3], 'count', ARGV[4], 'expires', ARGV[5], 'max_attempts', ARGV[6],
    'ttl_at', ARGV[7], 'digest', ARGV[8], 'chunks', ARGV[9], 'next_chunk', 0, 'stored', 0, 'filled', 0, 'ready', 0,
    'closed', 0)
  redis.call('PEXPIREAT', meta, ARGV[7])
  return {'begun', 0, 0}
end

local function chunk()
  local meta, list, packets = KEYS[1], KEYS[2], KEYS[3]
  local state = redis.call('HMGET', meta, 'digest', 'next_chunk', 'chunks', 'stored', 'total', 'count',
    'ready', 'expires', 'ttl_at', 'filled')
  if not state[1] then
    return {'unknown'}
  end
  if state[1] ~= ARGV[3] then
    return {'conflict'}
  end
  local index, next_chunk, chunks = tonumber(ARGV[4]), tonumber(state[2]), tonumber(state[3])
  if index < next_chunk then
    return {'have', next_chunk, tonumber(state[7])}
  end
  if index > next_chunk then
    return {'gap', next_chunk}
  end
  local sum = tonumber(state[4])
  for i = 5, #ARGV do
    if not is_count(ARGV[i]) then
      return {'bad_amount', ARGV[i]}
    end
    sum = sum + tonumber(ARGV[i])
  end
  local total, filled = tonumber(state[5]), tonumber(state[10]) + #ARGV - 4
  local last = index == chunks - 1
  if sum > total or filled > tonumber(state[6]) or (last and (sum ~= total or filled ~= tonumber(state[6]))) then
    return {'bad_sum', string.format('%d', sum)}
  end
  -- RPUSH in pieces: Lua's unpack has a stack limit of a few thousand values.
  for first = 5, #ARGV, 1000 do
    redis.call('RPUSH', list, unpack(ARGV, first, math.min(first + 999, #ARGV)))
  end
  redis.call('PEXPIREAT', list, state[9])
  local ready = last and 1 or 0
  redis.call('HSET', meta, 'next_chunk', index + 1, 'stored', string.format('%d', sum), 'filled', filled,
    'ready', ready)
  if last then
    redis.call('ZADD', packets, state[8], ARGV[2])
  end
  return {'stored', index + 1, ready}
end

local function grab()
  local meta, list, drawn, attempts, ready, tasks = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
  local user, now, display = ARGV[3], tonumber(ARGV[4]), ARGV[5] or ''
  local state = redis.call('HMGET', meta, 'expires', 'max_attempts', 'closed', 'ttl_at', 'ready')
  if not state[1] then
    return {'unknown'}
  end
  if state[5] == '0' then
    return {'not_ready'}
  end
  local before = redis.call('HGET', drawn, user)
  if before then
    return {'already', string.sub(before, 1, string.find(before, ':', 1, true) - 1)}
  end
  if state[3] == '1' or now >= tonumber(state[1]) then
    return {'expired'}
  end
  if tonumber(redis.call('HGET', attempts, user) or '0') >= tonumber(state[2]) then
    return {'too_many_attempts'}
  end
  local amount = redis.call('LPOP', list)
  if not amount then
    redis.call('HINCRBY', attempts, user, 1)
    redis.call('PEXPIREAT', attempts, state[4], 'NX')
    return {'sold_out'}
  end
  local suffix = display ~= '' and (':' .. display) or ''
  redis.call('HSET', drawn, user, amount .. ':' .. ARGV[4] .. suffix)
  redis.call('PEXPIREAT', drawn, state[4], 'NX')
  local task = ARGV[2] .. ':' .. user
  redis.call('HSET', tasks, task, amount .. ':0:0' .. suffix)
  redis.call('ZADD', ready, now, task)
  return {'granted', amount}
end

local function close()
  local meta, list, packets = KEYS[1], KEYS[2], KEYS[3]
  local state = redis.call('HMGET', meta, 'closed', 'ready', 'leftover', 'packets_left')
  -- Only a complete packet not closed yet belongs in the expiry index (its last chunk adds
  -- it). Every other answer drops the id too: an id left there (its keys gone, or created
  -- anew under the same id) would come back on every page of close_expired.
  if not state[1] then
    redis.call('ZREM', packets, ARGV[2])
    return {'unknown'}
  end
  if state[2] == '0' then
    redis.call('ZREM', packets, ARGV[2])
    return {'not_ready'}
  end
  if state[1] == '1' then
    redis.call('ZREM', packets, ARGV[2])
    return {'already', state[3] or '0', state[4] or '0'}
  end
  local leftover = 0
  local amounts = redis.call('LRANGE', list, 0, -1)
  for _, amount in ipairs(amounts) do
    leftover = leftover + tonumber(amount)
  end
  leftover = string.format('%d', leftover)
  redis.call('DEL', list)
  redis.call('HSET', meta, 'closed', 1, 'leftover', leftover, 'packets_left', #amounts)
  redis.call('ZREM', packets, ARGV[2])
  return {'closed', leftover, #amounts}
end

local function status()
  local meta = redis.call('HMGET', KEYS[1], 'total', 'count', 'expires', 'ready', 'closed', 'leftover',
    'packets_left')
  if not meta[1] then
    return {'unknown'}
  end
  local left, amount_left = meta[7], meta[6]
  if meta[5] ~= '1' then
    local amounts = redis.call('LRANGE', KEYS[2], 0, -1)
    local sum = 0
    for _, amount in ipairs(amounts) do
      sum = sum + tonumber(amount)
    end
    left, amount_left = #amounts, string.format('%d', sum)
  end
  return {'status', meta[1], meta[2], meta[3], meta[4] or '1', meta[5] or '0', left, amount_left,
    redis.call('HLEN', KEYS[3]), redis.call('HLEN', KEYS[4])}
end

if op == 'begin' then
  return begin()
elseif op == 'chunk' then
  return chunk()
elseif op == 'grab' then
  return grab()
elseif op == 'close' then
  return close()
elseif op == 'status' then
  return status()
end
return redis.error_reply('red_packet: unknown op ' .. tostring(op))
