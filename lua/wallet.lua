-- wallet: a user's balance, changed only together with its order record, its pending
-- entry and its journal event, in one script. Every check runs before the first write.
--
-- KEYS (every op): [1] account hash (balance, threshold, version, updated; frozen "1" or
--   "0", freeze_reason, freeze_time once a freeze was set),
--   [2] order record (type, amount, time, balance, version, state), [3] the user's pending
--   zset (order -> time), [4] the partition's journal stream, [5] the partition's pending
--   zset ("<user>:<order>" -> time), [6] the user's high-water hash (version: of the newest
--   journal event; events: those the persisting group has not acknowledged, see journal.lua
--   ack, which deletes the hash once none is left; parked: those of them the persisting group
--   parked, see journal.lua fail). It is not part of the account hash, so it outlives a lost
--   account.
-- Journal event fields: type (deduct | credit | rollback), user, order, amount, balance,
--   version, time; a freeze | unfreeze event has order "" and amount 0 (balance unchanged)
--   and a reason. Every event raises the high-water hash: version, events + 1.
--
-- op load: ARGV[2] balance, ARGV[3] version, ARGV[4] threshold, ARGV[5] now (ms),
--   ARGV[6] freeze reason ("" if the system of record has the account not frozen); KEYS[2] the
--   record key of order "-" (unused)
--   Sets the account if absent or if `version` is newer than the cached one, and if `version` is
--   at least the high-water version (that of the user's newest change not yet persisted): a
--   snapshot without it would give back what a deduct took, to be spent again, or lose a
--   rollback, freeze or unfreeze. While an event of the user is parked, every load is refused:
--   the user's later events went on, so the system of record may be newer than the parked
--   event and still lack it. Orders pending with no high-water mark (made before there was
--   one) refuse every load until they are persisted: their versions are not read. A load can freeze (reason,
--   freeze_time now) but never unfreezes: only op unfreeze does, so a loader that does not know
--   the flag cannot lift a freeze.
--   Reply: {"loaded", version} | {"stale", cached version} | {"behind", order id, -1} (an order
--   pending from before the high-water mark) | {"unpersisted", high-water version} |
--   {"parked", parked events, high-water version} (nothing written but for "loaded")
-- op deduct | credit: ARGV[2] user, ARGV[3] order, ARGV[4] amount (> 0), ARGV[5] now (ms),
--   ARGV[6] order record TTL (ms)
--   deduct succeeds only if balance - amount >= threshold; credit always (below 2^53).
--   Reply: {"ok", balance, version, event id} | {"replay", balance, version, event id} (the
--   order was done before: nothing moved) | {"insufficient", balance, version} (not recorded:
--   a retry decides again) | {"frozen", balance, version, reason} (a deduct of a frozen
--   account: not recorded, a retry decides again; a credit still applies; a replay of an
--   order done before the freeze still replays) | {"not_loaded"} | {"rolled_back"} (the order was rolled back:
--   it never runs again) | {"conflict", type, amount} (the order id was used for another
--   type or amount) | {"overflow", balance, amount} (a credit would pass 2^53 - 1)
-- op rollback: ARGV[2] user, ARGV[3] order, ARGV[4] now (ms), ARGV[5] record TTL (ms)
--   Reverses a deduct or credit once: balance restored, version + 1, pending entries
--   removed, a rollback event appended; the record stays as a marker with state
--   rolled_back. Rollback of an unknown order records that marker, whether or not the user
--   is cached (a deduct of it arriving late is then refused; no balance is needed for that).
--   Reply: {"rolled_back", balance, version} | {"already"} (rolled back before, e.g. by this
--   same call whose reply was lost: nothing changed) | {"unknown"} (marker recorded) |
--   {"not_loaded"} (the order was done but the user is not cached) | {"stale", cached
--   version, order version} (the cached balance predates the order: reversing it there
--   would be wrong) | {"overflow", balance, amount} (the result would pass 2^53 - 1)
--   A rollback applies to a frozen account too (it gives back, or takes back a credit).
-- op freeze | unfreeze: ARGV[2] user, ARGV[3] reason (1..256 bytes), ARGV[4] now (ms)
--   Sets or clears the frozen flag; on a change also the reason and time, version + 1 and a
--   freeze | unfreeze journal event (the persister writes the flag like any change).
--   Reply: {"changed", version, event id} | {"unchanged", version} (already in that state:
--   nothing written) | {"not_loaded"}

local op = ARGV[1]
local account, order, user_pending, journal, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local high_water = KEYS[6]
local max_exact = 9007199254740991

local function event(type, user, order_id, amount, balance, version, now, reason)
  local fields = {'type', type, 'user', user, 'order', order_id, 'amount', amount,
    'balance', string.format('%d', balance), 'version', version, 'time', now}
  if reason then
    fields[#fields + 1] = 'reason'
    fields[#fields + 1] = reason
  end
  local id = redis.call('XADD', journal, '*', unpack(fields))
  redis.call('HSET', high_water, 'version', version)
  redis.call('HINCRBY', high_water, 'events', 1)
  return id
end

if op == 'load' then
  local cached = redis.call('HGET', account, 'version')
  if cached and tonumber(cached) >= tonumber(ARGV[3]) then
    return {'stale', tonumber(cached)}
  end
  local mark = redis.call('HMGET', high_water, 'version', 'parked')
  local unpersisted, parked = tonumber(mark[1]), tonumber(mark[2])
  if parked and parked > 0 then
    return {'parked', parked, unpersisted or -1}
  end
  if unpersisted and unpersisted > tonumber(ARGV[3]) then
    return {'unpersisted', unpersisted}
  end
  if not unpersisted then
    -- Orders pending without a high-water mark were made before there was one (an upgrade):
    -- their versions are in their records, which this call does not declare, so a load waits
    -- until the persister has written them.
    local first = redis.call('ZRANGE', user_pending, 0, 0)[1]
    if first then
      return {'behind', first, -1}
    end
  end
  redis.call('HSET', account, 'balance', ARGV[2], 'version', ARGV[3], 'threshold', ARGV[4], 'updated', ARGV[5])
  if ARGV[6] ~= '' and redis.call('HGET', account, 'frozen') ~= '1' then
    redis.call('HSET', account, 'frozen', '1', 'freeze_reason', ARGV[6], 'freeze_time', ARGV[5])
  end
  return {'loaded', tonumber(ARGV[3])}
end

if op == 'deduct' or op == 'credit' then
  local user, order_id, amount, now = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
  local done = redis.call('HMGET', order, 'state', 'type', 'amount', 'balance', 'version', 'event')
  if done[1] == 'rolled_back' then
    return {'rolled_back'}
  end
  if done[1] then
    if done[2] ~= op or tonumber(done[3]) ~= amount then
      return {'conflict', done[2], done[3]}
    end
    return {'replay', tonumber(done[4]), tonumber(done[5]), done[6]}
  end
  local state = redis.call('HMGET', account, 'balance', 'threshold', 'version', 'frozen', 'freeze_reason')
  if not state[1] then
    return {'not_loaded'}
  end
  local balance, threshold, version = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
  if op == 'deduct' then
    if state[4] == '1' then
      return {'frozen', balance, version, state[5]}
    end
    if balance - amount < threshold then
      return {'insufficient', balance, version}
    end
    balance = balance - amount
  else
    if balance + amount > max_exact then
      return {'overflow', string.format('%d', balance), ARGV[4]}
    end
    balance = balance + amount
  end
  version = version + 1
  local id = event(op, user, order_id, ARGV[4], balance, version, now)
  redis.call('HSET', account, 'balance', string.format('%d', balance), 'version', version, 'updated', now)
  redis.call('HSET', order, 'type', op, 'amount', ARGV[4], 'time', now, 'balance', string.format('%d', balance),
    'version', version, 'state', 'done', 'event', id)
  redis.call('PEXPIRE', order, ARGV[6])
  redis.call('ZADD', user_pending, now, order_id)
  redis.call('ZADD', pending, now, user .. ':' .. order_id)
  return {'ok', balance, version, id}
end

if op == 'rollback' then
  local user, order_id, now = ARGV[2], ARGV[3], ARGV[4]
  local done = redis.call('HMGET', order, 'state', 'type', 'amount', 'version')
  if done[1] == 'rolled_back' then
    return {'already'}
  end
  if not done[1] then
    redis.call('HSET', order, 'state', 'rolled_back', 'type', 'none', 'time', now)
    redis.call('PEXPIRE', order, ARGV[5])
    return {'unknown'}
  end
  local state = redis.call('HMGET', account, 'balance', 'version')
  if not state[1] then
    return {'not_loaded'}
  end
  if tonumber(state[2]) < tonumber(done[4]) then
    return {'stale', tonumber(state[2]), tonumber(done[4])}
  end
  local amount = tonumber(done[3])
  local balance = tonumber(state[1]) + (done[2] == 'deduct' and amount or -amount)
  if math.abs(balance) > max_exact then
    return {'overflow', state[1], done[3]}
  end
  local version = tonumber(state[2]) + 1
  event('rollback', user, order_id, done[3], balance, version, now)
  redis.call('HSET', account, 'balance', string.format('%d', balance), 'version', version, 'updated', now)
  redis.call('HSET', order, 'state', 'rolled_back')
  redis.call('ZREM', user_pending, order_id)
  redis.call('ZREM', pending, user .. ':' .. order_id)
  return {'rolled_back', balance, version}
end

if op == 'freeze' or op == 'unfreeze' then
  local user, reason, now = ARGV[2], ARGV[3], ARGV[4]
  if #reason < 1 or #reason > 256 then
    return redis.error_reply('wallet: freeze reason of ' .. #reason .. ' bytes is not 1..256')
  end
  local state = redis.call('HMGET', account, 'balance', 'version', 'frozen')
  if not state[1] then
    return {'not_loaded'}
  end
  local version = tonumber(state[2])
  local flag = op == 'freeze' and '1' or '0'
  if (state[3] == '1' and '1' or '0') == flag then
    return {'unchanged', version}
  end
  version = version + 1
  local id = event(op, user, '', 0, tonumber(state[1]), version, now, reason)
  redis.call('HSET', account, 'frozen', flag, 'freeze_reason', reason, 'freeze_time', now,
    'version', version, 'updated', now)
  return {'changed', version, id}
end

return redis.error_reply('wallet: unknown op ' .. tostring(op))
