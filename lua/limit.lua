-- limit: atomic check-and-consume of every rule that matches one transaction, and
-- the operations that give quota back (refund, confirm, cancel), for one group of
-- counters that share a slot. One call decides; nothing is half done: every check
-- runs before the first write.
--
-- Transaction record (hash KEYS[1]): fp (fingerprint: amount and attributes), state
-- (consumed | denied | reserved | confirmed | cancelled | expired), amount (held or
-- consumed), refunded, counted (1 while the transaction's count is in the counters),
-- ctr (cmsgpack list of {key, field} it moved), holds (cmsgpack list of hold sets),
-- hexp (hold expiry, ms), reply (cmsgpack of the first reply, for replays), and
-- r:<refund id> = refunded amount, per partial refund.
-- Counter field value: "<count>:<amount>", integers below 2^53.
-- Hold set (zset): member = record key, score = hold expiry in ms.
--
-- ARGV[1] = op.
--
-- op consume | reserve | check:
--   KEYS[1]        the transaction record
--   KEYS[2..1+h]   the hold sets of the counters' scopes (expired holds there are released first)
--   KEYS[2+h..]    the counter window hashes
--   ARGV[2]  fingerprint      ARGV[3] amount         ARGV[4] now (ms)
--   ARGV[5]  record expiry (ms, >= every window end + grace)
--   ARGV[6]  hold expiry (ms; reserve only)
--   ARGV[7]  h, number of hold sets    ARGV[8] c, number of counters
--   then c counters of 6: key index in KEYS, field, period, window id, window end (ms), key expiry (ms)
--   then r, number of rules, and r rules of 4: name, counter number (1..c), max count, max amount
--        (a max of -1 means no such limit)
--   Reply: {verdict, denied rule number (0 if none), denied metric ("count" | "amount" | ""),
--           r, then per rule: name, period, window id, window end, max count, max amount,
--           count, amount} where count/amount are the counter's totals after the write (allowed)
--           or as found (denied). verdict: "allowed" | "denied" (check: "would_allow" | "would_deny").
--   Replays: {"replay", state, <the first reply>...}; a different fingerprint: {"conflict"};
--   an id cancelled before it was reserved: {"cancelled"}; a counter total that would reach
--   2^53: {"overflow", field, period} (nothing written).
--
-- op refund:  KEYS[1] record; ARGV[2] amount (-1 = all that is left), ARGV[3] refund id
--   Reply: {"refunded", amount given back now, refunded in total, amount}
--          | {"unknown"} | {"bad_state", state} | {"too_much", refundable}
-- op confirm: KEYS[1] record; ARGV[2] final amount (-1 = all held), ARGV[3] now (ms)
--   Reply: {"confirmed", final amount, released amount} | {"already", state, amount}
--          | {"unknown"} | {"expired"} | {"bad_state", state} | {"too_much", held}
-- op cancel:  KEYS[1] record; ARGV[2] now (ms), ARGV[3] expiry of a tombstone (ms)
--   Reply: {"cancelled", released amount} | {"already", state} | {"tombstone"} | {"bad_state", state}

local op = ARGV[1]
local record = KEYS[1]
local max_exact = 9007199254740991 -- 2^53 - 1: the largest integer a Lua number holds exactly

local function read_counter(key, field)
  local value = redis.call('HGET', key, field)
  if not value then
    return 0, 0
  end
  local cut = string.find(value, ':', 1, true)
  return tonumber(string.sub(value, 1, cut - 1)), tonumber(string.sub(value, cut + 1))
end

local function write_counter(key, field, count, amount)
  redis.call('HSET', key, field, string.format('%d:%d', count, amount))
end

-- Takes count and amount back out of every counter the record moved, never below zero.
-- Keys that have expired since are left alone (their window is over).
local function give_back(counters, count, amount)
  for _, counter in ipairs(counters) do
    local key, field = counter[1], counter[2]
    if redis.call('EXISTS', key) == 1 then
      local c, a = read_counter(key, field)
      write_counter(key, field, math.max(c - count, 0), math.max(a - amount, 0))
    end
  end
end

local function drop_holds(key)
  local packed = redis.call('HGET', key, 'holds')
  if packed then
    for _, holds in ipairs(cmsgpack.unpack(packed)) do
      redis.call('ZREM', holds, key)
    end
  end
end

-- Ends a reservation: releases its hold and sets its final state.
local function release_reservation(key, state, count, amount)
  give_back(cmsgpack.unpack(redis.call('HGET', key, 'ctr')), count, amount)
  drop_holds(key)
  redis.call('HSET', key, 'state', state)
end

local function release_expired_holds(holds, now)
  local expired = redis.call('ZRANGEBYSCORE', holds, '-inf', now, 'LIMIT', 0, 64)
  for _, key in ipairs(expired) do
    if redis.call('HGET', key, 'state') == 'reserved' then
      release_reservation(key, 'expired', 1, tonumber(redis.call('HGET', key, 'amount')))
    else
      redis.call('ZREM', holds, key)
    end
  end
end

local function decide()
  local fingerprint, amount, now = ARGV[2], tonumber(ARGV[3]), ARGV[4]
  local h, c = tonumber(ARGV[7]), tonumber(ARGV[8])

  if redis.call('EXISTS', record) == 1 then
    local first = redis.call('HGET', record, 'reply')
    if not first then
      return {'cancelled'} -- a tombstone: cancel came first
    end
    if redis.call('HGET', record, 'fp') ~= fingerprint then
      return {'conflict'}
    end
    local reply = {'replay', redis.call('HGET', record, 'state')}
    for _, item in ipairs(cmsgpack.unpack(first)) do
      reply[#reply + 1] = item
    end
    return reply
  end

  if op ~= 'check' then
    for i = 1, h do
      release_expired_holds(KEYS[1 + i], now)
    end
  end

  local counters, totals = {}, {}
  local base = 8
  for j = 1, c do
    local key = KEYS[tonumber(ARGV[base + 1])]
    counters[j] = {key = key, field = ARGV[base + 2], period = ARGV[base + 3], window = ARGV[base + 4],
                   window_end = ARGV[base + 5], expire_at = ARGV[base + 6]}
    local count, total = read_counter(key, ARGV[base + 2])
    totals[j] = {count, total}
    base = base + 6
  end

  local r = tonumber(ARGV[base + 1])
  base = base + 1
  local denied, metric = 0, ''
  for i = 1, r do
    local j = tonumber(ARGV[base + 4 * (i - 1) + 2])
    local max_count = tonumber(ARGV[base + 4 * (i - 1) + 3])
    local max_amount = tonumber(ARGV[base + 4 * (i - 1) + 4])
    if max_count >= 0 and totals[j][1] + 1 > max_count then
      denied, metric = i, 'count'
      break
    end
    if max_amount >= 0 and totals[j][2] + amount > max_amount then
      denied, metric = i, 'amount'
      break
    end
  end

  local allowed = denied == 0
  if allowed and op ~= 'check' then
    for j = 1, c do
      if totals[j][1] + 1 > max_exact or totals[j][2] + amount > max_exact then
        return {'overflow', counters[j].field, counters[j].period}
      end
    end
    for j = 1, c do
      totals[j][1] = totals[j][1] + 1
      totals[j][2] = totals[j][2] + amount
      write_counter(counters[j].key, counters[j].field, totals[j][1], totals[j][2])
      redis.call('PEXPIREAT', counters[j].key, counters[j].expire_at, 'NX')
    end
  end

  local verdict
  if op == 'check' then
    verdict = allowed and 'would_allow' or 'would_deny'
  else
    verdict = allowed and 'allowed' or 'denied'
  end
  local reply = {verdict, denied, metric, r}
  for i = 1, r do
    local j = tonumber(ARGV[base + 4 * (i - 1) + 2])
    local counter = counters[j]
    reply[#reply + 1] = ARGV[base + 4 * (i - 1) + 1]
    reply[#reply + 1] = counter.period
    reply[#reply + 1] = counter.window
    reply[#reply + 1] = counter.window_end
    reply[#reply + 1] = ARGV[base + 4 * (i - 1) + 3]
    reply[#reply + 1] = ARGV[base + 4 * (i - 1) + 4]
    reply[#reply + 1] = string.format('%d', totals[j][1])
    reply[#reply + 1] = string.format('%d', totals[j][2])
  end
  if op == 'check' then
    return reply
  end

  local new_state = 'denied'
  if allowed then
    new_state = op == 'reserve' and 'reserved' or 'consumed'
  end
  local moved, holds = {}, {}
  if allowed then
    for j = 1, c do
      moved[j] = {counters[j].key, counters[j].field}
    end
  end
  redis.call('HSET', record, 'fp', fingerprint, 'state', new_state, 'amount', ARGV[3], 'refunded', 0,
    'counted', allowed and 1 or 0, 'ctr', cmsgpack.pack(moved), 'reply', cmsgpack.pack(reply))
  if allowed and op == 'reserve' then
    for i = 1, h do
      holds[i] = KEYS[1 + i]
      redis.call('ZADD', KEYS[1 + i], ARGV[6], record)
      -- the set lives as long as its longest-lived record
      if redis.call('PEXPIREAT', KEYS[1 + i], ARGV[5], 'NX') == 0 then
        redis.call('PEXPIREAT', KEYS[1 + i], ARGV[5], 'GT')
      end
    end
    redis.call('HSET', record, 'holds', cmsgpack.pack(holds), 'hexp', ARGV[6])
  end
  redis.call('PEXPIREAT', record, ARGV[5])
  return reply
end

local function refund()
  local state = redis.call('HGET', record, 'state')
  if not state then
    return {'unknown'}
  end
  if state ~= 'consumed' and state ~= 'confirmed' then
    return {'bad_state', state}
  end
  local amount = tonumber(redis.call('HGET', record, 'amount'))
  local refunded = tonumber(redis.call('HGET', record, 'refunded'))
  local refund_field = 'r:' .. ARGV[3]
  local earlier = redis.call('HGET', record, refund_field)
  if earlier then
    return {'refunded', 0, string.format('%d', refunded), string.format('%d', amount)}
  end
  local refundable = amount - refunded
  local give = tonumber(ARGV[2])
  if give < 0 then
    give = refundable
  elseif give > refundable then
    return {'too_much', string.format('%d', refundable)}
  end
  local count = 0
  if refunded + give == amount and redis.call('HGET', record, 'counted') == '1' then
    count = 1
    redis.call('HSET', record, 'counted', 0)
  end
  if give > 0 or count > 0 then
    give_back(cmsgpack.unpack(redis.call('HGET', record, 'ctr')), count, give)
  end
  redis.call('HSET', record, 'refunded', string.format('%d', refunded + give), refund_field,
    string.format('%d', give))
  return {'refunded', string.format('%d', give), string.format('%d', refunded + give),
          string.format('%d', amount)}
end

local function confirm()
  local state = redis.call('HGET', record, 'state')
  if not state then
    return {'unknown'}
  end
  local held = tonumber(redis.call('HGET', record, 'amount'))
  if state == 'confirmed' then
    return {'already', state, string.format('%d', held)}
  end
  if state ~= 'reserved' then
    return {'bad_state', state}
  end
  if tonumber(redis.call('HGET', record, 'hexp')) <= tonumber(ARGV[3]) then
    release_reservation(record, 'expired', 1, held)
    return {'expired'}
  end
  local final = tonumber(ARGV[2])
  if final < 0 then
    final = held
  elseif final > held then
    return {'too_much', string.format('%d', held)}
  end
  give_back(cmsgpack.unpack(redis.call('HGET', record, 'ctr')), 0, held - final)
  drop_holds(record)
  redis.call('HSET', record, 'state', 'confirmed', 'amount', string.format('%d', final))
  return {'confirmed', string.format('%d', final), string.format('%d', held - final)}
end

local function cancel()
  local state = redis.call('HGET', record, 'state')
  if not state then
    redis.call('HSET', record, 'state', 'cancelled', 'fp', '', 'amount', 0)
    redis.call('PEXPIREAT', record, ARGV[3])
    return {'tombstone'}
  end
  if state == 'cancelled' or state == 'expired' then
    return {'already', state}
  end
  if state ~= 'reserved' then
    return {'bad_state', state}
  end
  local held = tonumber(redis.call('HGET', record, 'amount'))
  release_reservation(record, 'cancelled', 1, held)
  return {'cancelled', string.format('%d', held)}
end

if op == 'consume' or op == 'reserve' or op == 'check' then
  return decide()
elseif op == 'refund' then
  return refund()
elseif op == 'confirm' then
  return confirm()
elseif op == 'cancel' then
  return cancel()
end
return redis.error_reply('limit: unknown op ' .. tostring(op))
