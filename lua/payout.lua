-- payout: the reliable queue of red-packet payouts of one partition. A task moves
-- ready -> inflight (leased, with a visibility deadline) -> done, or back to ready
-- (failure, with back-off; or its worker died and the deadline passed), or to dead
-- after max attempts. A lease number guards every move, so a worker that lost its
-- lease (it was too slow) cannot acknowledge or fail a task someone else now holds.
--
-- Partition keys: ready (zset task -> due ms), inflight (zset task -> deadline ms),
-- tasks (hash task -> "<amount>:<attempts>:<lease>[:<display>]", or "dead:<lease>" once
-- dead-lettered; "<task>:requeued" -> requeue time ms from a requeue until that task is
-- paid or dies again, which tells a retried requeue from a task never dead; and
-- "<task>:released" -> the lease last released, until the task is paid or dies, which tells a
-- retried release from a stale one), dead (list of "<task>:<amount>:<attempts>"). A task id
-- is "<packet>:<user>" (neither part has a ':', so no task id ends in ":requeued" or
-- ":released"). Amounts stay the decimal strings they were stored as:
-- formatting a Lua number (%.14g) would round amounts of 10^14 or more.
--
-- Exactly once across lost replies: a lease ends once. The packet's paid hash records the
-- lease that was paid (user -> "<time ms>:<lease>"), so an ack retried with that lease is
-- answered "replayed". A lease that ended without an ack (fail, or its deadline swept by
-- take) counted one failed attempt, so a fail retried with it counts nothing more. A released
-- lease is kept in "<task>:released", so a release retried with it is answered "replayed".
--
-- op take: KEYS ready, inflight, tasks, dead
--   ARGV[2] now (ms), ARGV[3] visibility (ms), ARGV[4] max tasks, ARGV[5] max attempts
--   First, tasks whose deadline passed count a failed attempt and go back to ready (or dead).
--   Reply: flat list of task, amount, attempt (1-based), lease, display ("" for none) for
--   each task taken.
-- op ack: KEYS inflight, tasks, paid (the packet's hash user -> "<paid time>:<lease>")
--   ARGV[2] task, ARGV[3] lease, ARGV[4] user, ARGV[5] now (ms), ARGV[6] keep paid for (ms)
--   Reply: {"paid"} | {"replayed"} (paid before under this lease) | {"stale"} (the lease ran
--   out and someone else holds or finished the task)
-- op fail: KEYS ready, inflight, tasks, dead
--   ARGV[2] task, ARGV[3] lease, ARGV[4] now (ms), ARGV[5] max attempts, ARGV[6] back-off base (ms)
--   Reply: {"retry", due ms} | {"dead"} | {"stale"} (the task was paid or is unknown)
--   A lease that had already ended answers "dead" if the task died with it, else "retry".
-- op release: KEYS ready, inflight, tasks
--   ARGV[2] task, ARGV[3] lease, ARGV[4] now (ms)
--   Hands back a task leased and not tried: held under this lease, it goes from inflight back
--   to ready, due now, with its attempts and lease kept (the next take leases it anew, so the
--   released lease acks nothing and its fail counts nothing).
--   Reply: {"released"} | {"replayed"} (released before under this lease, e.g. by a call whose
--   reply was lost: nothing changed) | {"stale"} (the lease ran out, or the task was paid,
--   failed or died under it: nothing changed)
-- op requeue: KEYS ready, tasks, dead
--   ARGV[2] task, ARGV[3] now (ms)
--   A dead-lettered task goes back to ready, due now, with its attempts reset and its lease
--   kept (the next take leases it anew, so an old lease still acks nothing); its dead-letter
--   entry is removed. Its display data was dropped when it died: the task goes on without it.
--   Reply: {"requeued", amount} | {"already"} (requeued by an earlier call and neither paid
--   nor dead since: a retry after a lost reply; nothing changed) | {"not_dead"} (unknown,
--   paid, queued or in flight otherwise: nothing changed)

local op = ARGV[1]

local function parse(value)
  local first = string.find(value, ':', 1, true)
  local second = string.find(value, ':', first + 1, true)
  local third = string.find(value, ':', second + 1, true)
  local lease = string.sub(value, second + 1, third and third - 1 or -1)
  return string.sub(value, 1, first - 1), tonumber(string.sub(value, first + 1, second - 1)), tonumber(lease),
    third and string.sub(value, third + 1) or ''
end

local function encode(amount, attempts, lease, display)
  return amount .. string.format(':%d:%d', attempts, lease) .. (display ~= '' and (':' .. display) or '')
end

-- Whether `task` is in flight under `lease` (a worker whose lease ran out holds nothing).
local function holds_lease(inflight, tasks, task, lease)
  local value = redis.call('HGET', tasks, task)
  if not value or string.sub(value, 1, 5) == 'dead:' or redis.call('ZSCORE', inflight, task) == false then
    return false
  end
  local _, _, current = parse(value)
  return current == lease
end

-- One more failed attempt: back to ready after a back-off, or to dead.
local function failed(ready, inflight, tasks, dead, task, now, max_attempts, backoff)
  local amount, attempts, lease, display = parse(redis.call('HGET', tasks, task))
  attempts = attempts + 1
  redis.call('ZREM', inflight, task)
  if attempts >= max_attempts then
    redis.call('HSET', tasks, task, string.format('dead:%d', lease))
    redis.call('HDEL', tasks, task .. ':requeued', task .. ':released')
    redis.call('RPUSH', dead, task .. ':' .. amount .. string.format(':%d', attempts))
    return {'dead'}
  end
  redis.call('HSET', tasks, task, encode(amount, attempts, lease, display))
  -- (the wait doubles per failure, at most 2^42 ms: a due time stays an exact integer that %d
  -- formats, also with a max_payout_attempts in the hundreds)
  local due = now + math.min(backoff * 2 ^ math.min(attempts - 1, 42), 2 ^ 42)
  redis.call('ZADD', ready, string.format('%d', due), task)
  return {'retry', due}
end

-- The answer to a fail whose lease already ended (a retry): what that lease's end was.
local function ended(ready, tasks, task, lease)
  local value = redis.call('HGET', tasks, task)
  if not value then
    return {'stale'}
  end
  local dead_lease = string.sub(value, 1, 5) == 'dead:' and tonumber(string.sub(value, 6))
  if dead_lease == lease then
    return {'dead'}
  end
  local current = dead_lease or select(3, parse(value))
  if current < lease then
    return {'stale'}
  end
  return {'retry', tonumber(redis.call('ZSCORE', ready, task) or '0')}
end

if op == 'take' then
  local ready, inflight, tasks, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
  local now, visibility, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  for _, task in ipairs(redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, 100)) do
    failed(ready, inflight, tasks, dead, task, now, tonumber(ARGV[5]), 0)
  end
  local taken = {}
  for _, task in ipairs(redis.call('ZRANGEBYSCORE', ready, '-inf', now, 'LIMIT', 0, max)) do
    local amount, attempts, lease, display = parse(redis.call('HGET', tasks, task))
    lease = lease + 1
    redis.call('HSET', tasks, task, encode(amount, attempts, lease, display))
    redis.call('ZREM', ready, task)
    redis.call('ZADD', inflight, now + visibility, task)
    taken[#taken + 1] = task
    taken[#taken + 1] = amount
    taken[#taken + 1] = attempts + 1
    taken[#taken + 1] = lease
    taken[#taken + 1] = display
  end
  return taken
elseif op == 'ack' then
  local inflight, tasks, paid = KEYS[1], KEYS[2], KEYS[3]
  local lease = tonumber(ARGV[3])
  if not holds_lease(inflight, tasks, ARGV[2], lease) then
    local before = redis.call('HGET', paid, ARGV[4])
    local cut = before and string.find(before, ':', 1, true)
    if cut and tonumber(string.sub(before, cut + 1)) == lease then
      return {'replayed'}
    end
    return {'stale'}
  end
  -- (the paid hash first: if it is no hash, the error comes before anything was written)
  redis.call('HSET', paid, ARGV[4], ARGV[5] .. string.format(':%d', lease))
  redis.call('PEXPIRE', paid, ARGV[6], 'NX')
  redis.call('ZREM', inflight, ARGV[2])
  redis.call('HDEL', tasks, ARGV[2], ARGV[2] .. ':requeued', ARGV[2] .. ':released')
  return {'paid'}
elseif op == 'fail' then
  local ready, inflight, tasks, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
  local lease = tonumber(ARGV[3])
  if not holds_lease(inflight, tasks, ARGV[2], lease) then
    return ended(ready, tasks, ARGV[2], lease)
  end
  return failed(ready, inflight, tasks, dead, ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]))
end
if op == 'release' then
  local ready, inflight, tasks, task = KEYS[1], KEYS[2], KEYS[3], ARGV[2]
  local lease, now = tonumber(ARGV[3]), tonumber(ARGV[4])
  if not lease or not now then
    return redis.error_reply('payout release: bad lease or now ' .. tostring(ARGV[3]) .. ' ' ..
      tostring(ARGV[4]))
  end
  if not holds_lease(inflight, tasks, task, lease) then
    return {tonumber(redis.call('HGET', tasks, task .. ':released')) == lease and 'replayed' or
      'stale'}
  end
  redis.call('ZREM', inflight, task)
  redis.call('ZADD', ready, ARGV[4], task)
  redis.call('HSET', tasks, task .. ':released', ARGV[3])
  return {'released'}
end
if op == 'requeue' then
  local ready, tasks, dead, task = KEYS[1], KEYS[2], KEYS[3], ARGV[2]
  local value = redis.call('HGET', tasks, task)
  if not value or string.sub(value, 1, 5) ~= 'dead:' then
    if value and redis.call('HEXISTS', tasks, task .. ':requeued') == 1 then
      return {'already'}
    end
    return {'not_dead'}
  end
  local prefix = task .. ':'
  for _, entry in ipairs(redis.call('LRANGE', dead, 0, -1)) do
    if string.sub(entry, 1, #prefix) == prefix then
      local amount = string.match(string.sub(entry, #prefix + 1), '^(%d+):%d+$')
      if amount then
        redis.call('LREM', dead, 1, entry)
        redis.call('HSET', tasks, task, encode(amount, 0, tonumber(string.sub(value, 6)), ''),
          task .. ':requeued', ARGV[3])
        redis.call('ZADD', ready, ARGV[3], task)
        return {'requeued', amount}
      end
    end
  end
  return {'not_dead'}
end
return redis.error_reply('payout: unknown op ' .. tostring(op))
