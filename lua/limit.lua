-- limit: atomic check-and-consume of every rule that matches one transaction, and
-- the operations that give quota back (refund, confirm, cancel), for one group of
-- counters that share a slot. One call decides; nothing is half done: every check
-- runs before the first write.
--
-- Transaction record (hash KEYS[1]): fp (fingerprint: operation, amount, attributes),
-- state (consumed | denied | reserved | confirmed | cancelled | expired), amount (held or
-- consumed), refunded, counted (1 while the transaction's count is in the counters),
-- args (the counter and rule arguments of the first call, joined by newlines), keys (the
-- counter keys it moved, joined by newlines), at (when it was decided: ARGV[4] of the first
-- call, ms), reply (cmsgpack of the first reply), holds
-- (cmsgpack list of hold sets), hexp (hold expiry, ms), and per refund r:<refund id> (rf for
-- the full refund).
-- Counter field value: "<count>:<amount>", integers below 2^53.
-- Hold set (zset): member = record key, score = hold expiry in ms.
--
-- ARGV[1] = op.
--
-- op consume | reserve | check:
--   KEYS[1]            the transaction record
--   KEYS[2..1+h]       the hold sets of the counters' shapes
--   KEYS[2+h..1+h+c]   the counter window hashes, one per counter
--   ARGV[2]  fingerprint      ARGV[3] amount         ARGV[4] now (ms)
--   ARGV[5]  record expiry (ms, >= every window end + grace)
--   ARGV[6]  hold expiry (ms; reserve only)
--   ARGV[7]  h, number of hold sets    ARGV[8] c, number of counters
--   ARGV[9]  the call's description, stored as the record's args and brought back by a
--            replay: lines of c counters of 5 (field, period, window id, window end (ms),
--            key expiry (ms)), then r, then r rules of 4 (name, counter number (1..c), max
--            count, max amount); a max of -1 means no such limit. Counter number 0 is a
--            per-transaction rule: its max amount limits this transaction's own amount
--            (denied metric "single_amount"), so that its denial is recorded like any other.
--            The client joins it, so that the script neither parses nor joins what it only
--            stores.
--   then what the script decides with: c counters of 2 (field, key expiry (ms)), then r,
--   then r rules of 3 (counter number, max count, max amount)
--   Reply: {verdict, denied rule number (0 if none), denied metric ("count" | "amount" |
--           "single_amount" | ""),
--           c, then per counter: count, amount} with the counter's totals after the write
--           (allowed) or as found (denied). verdict: "allowed" | "denied" (check:
--           "would_allow" | "would_deny"). The caller maps rules to counters from ARGV[9].
--   Expired holds are released first by reserve (up to 64 per set); by consume and reserve,
--   all of them before a denial is final (then the counters are read and the rules decided
--   again: an expired hold never denies); never by check.
--   Replays: {"replay", state, the first call's ARGV[9], <the first reply>...}; a different
--   fingerprint: {"conflict"}; an id cancelled before it was reserved: {"cancelled"}; a
--   counter total that would reach 2^53: {"overflow", counter number} (nothing written).
--
-- op refund:  KEYS[1] record; ARGV[2] amount (-1 = all that is left), ARGV[3] refund id
--   ('' = the full refund). Idempotent by refund id: the record keeps r:<id> (rf for the full
--   refund) = "<ARGV[2]>:<amount given back>"; the same id again replays, with another amount
--   it is a conflict.
--   Reply: {"refunded", amount given back (by the first call of this id), refunded in total,
--           amount, replayed "0" | "1"}
--          | {"unknown"} | {"bad_state", state} | {"too_much", refundable}
--          | {"conflict", the amount the id was first used with}
-- op confirm: KEYS[1] record; ARGV[2] final amount (-1 = all held), ARGV[3] now (ms)
--   Reply: {"confirmed", final amount, released amount} | {"already", state, amount}
--          | {"unknown"} | {"expired"} | {"bad_state", state} | {"too_much", held}
-- op cancel:  KEYS[1] record; ARGV[2] now (ms), ARGV[3] expiry of a tombstone (ms), ARGV[4]
--   "probe" to write no tombstone for an unknown id (a cluster's client probes every record the
--   id may have before it writes tombstones)
--   Reply: {"cancelled", released amount} | {"already", state} | {"tombstone"} | {"bad_state", state}
--          | {"unknown"} (probe only)
-- op void:    KEYS[1] record (of one slot's share of a transaction that another slot denied)
--   Gives back what this share took and marks it voided: its replays then report the state.
--   Reply: {"voided"} | {"already"} | {"unknown"} | {"bad_state", state}
-- op inspect: KEYS[1] a transaction's record of any kind (this script's, a home record of
--   lua/transaction_home.lua, a tombstone); reads only, for operators.
--   Reply: {"missing"} | {"record", expiry (unix ms, -1 for none), n, then n field/value pairs
--           (every field but fp, reply and holds, which are binary or internal), then the items
--           of the first reply (none for a home record or a tombstone)}

local op = ARGV[1]
local record = KEYS[1]
local max_exact = 9007199254740991 -- 2^53 - 1: the largest integer a Lua number holds exactly

local function read_counter(key, field)
  local value = redis.call('HGET', key, field)
  if not value then
    return 0, 0
  end
  local count, amount = string.match(value, '^(%d+):(%d+)$')
  return tonumber(count), tonumber(amount)
end

-- Returns 1 if the field is new.
local function write_counter(key, field, count, amount)
  return redis.call('HSET', key, field, string.format('%d:%d', count, amount))
end

local function split_lines(text)
  local parts = {}
  for part in string.gmatch(text, '[^\n]+') do
    parts[#parts + 1] = part
  end
  return parts
end

-- Takes count and amount back out of every counter the record moved, never below zero.
-- Keys that have expired since are left alone (their window is over).
local function give_back(key, count, amount)
  local moved = redis.call('HGET', key, 'keys')
  if not moved or moved == '' then
    return
  end
  local args = split_lines(redis.call('HGET', key, 'args'))
  for j, counter in ipairs(split_lines(moved)) do
    local field = args[5 * (j - 1) + 1]
    if redis.call('EXISTS', counter) == 1 then
      local c, a = read_counter(counter, field)
      write_counter(counter, field, math.max(c - count, 0), math.max(a - amount, 0))
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
  give_back(key, count, amount)
  drop_holds(key)
  redis.call('HSET', key, 'state', state)
end

-- Releases up to 64 expired holds of one set. Returns how many it released and how many
-- members it looked at (64: there may be more).
local function release_expired_holds(holds, now)
  local released = 0
  local expired = redis.call('ZRANGEBYSCORE', holds, '-inf', now, 'LIMIT', '0', '64')
  for _, key in ipairs(expired) do
    if redis.call('HGET', key, 'state') == 'reserved' then
      release_reservation(key, 'expired', 1, tonumber(redis.call('HGET', key, 'amount')))
      released = released + 1
    else
      redis.call('ZREM', holds, key)
    end
  end
  return released, #expired
end

-- ARGV index of counter j's field (its key expiry follows); counter_at(c + 1) is the rule count.
local function counter_at(j)
  return 10 + 2 * (j - 1)
end

-- Fills reply[3 + 2j], reply[4 + 2j] with counter j's count and amount (h hold sets first in KEYS).
local function read_counters(reply, h, c)
  for j = 1, c do
    reply[3 + 2 * j], reply[4 + 2 * j] = read_counter(KEYS[1 + h + j], ARGV[counter_at(j)])
  end
end

-- The first of `rule_count` rules (from ARGV[rules_at + 1]) without room for one more
-- transaction of `amount` over the totals in `reply`: its number and metric, or 0, ''.
-- A rule of counter 0 limits the transaction's own amount (no counter).
local function first_denial(reply, rules_at, rule_count, amount)
  for i = 1, rule_count do
    local at = rules_at + 3 * (i - 1)
    local j = tonumber(ARGV[at + 1])
    local max_count, max_amount = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    if j == 0 then
      if max_amount >= 0 and amount > max_amount then
        return i, 'single_amount'
      end
    elseif max_count >= 0 and reply[3 + 2 * j] + 1 > max_count then
      return i, 'count'
    elseif max_amount >= 0 and reply[4 + 2 * j] + amount > max_amount then
      return i, 'amount'
    end
  end
  return 0, ''
end

-- Releases the expired holds of the h hold sets KEYS[2..1+h]: every one of them when `all`
-- (an expired hold must never deny), else up to 64 per set. Returns how many.
local function release_all_expired(h, now, all)
  local released = 0
  for i = 1, h do
    repeat
      local batch, seen = release_expired_holds(KEYS[1 + i], now)
      released = released + batch
    until not all or seen < 64
  end
  return released
end

local function decide()
  local fingerprint, amount, now = ARGV[2], tonumber(ARGV[3]), ARGV[4]
  local h, c = tonumber(ARGV[7]), tonumber(ARGV[8])

  if redis.call('EXISTS', record) == 1 then
    local first = redis.call('HMGET', record, 'reply', 'fp', 'state', 'args')
    if not first[1] then
      return {'cancelled'} -- a tombstone: cancel came first
    end
    if first[2] ~= fingerprint then
      return {'conflict'}
    end
    local reply = {'replay', first[3], first[4]}
    for _, item in ipairs(cmsgpack.unpack(first[1])) do
      reply[#reply + 1] = item
    end
    return reply
  end

  -- Read every counter, then decide, then write: nothing is written before every check.
  local reply = {'', 0, '', c}
  local rules_at = counter_at(c + 1)
  local rule_count = tonumber(ARGV[rules_at])
  -- A reserve adds to the hold sets, so it sweeps them (at most 64 each): they stay small.
  -- A consume sweeps only when expired reservations could be what stands in its way.
  if op == 'reserve' then
    release_all_expired(h, now, false)
  end
  read_counters(reply, h, c)
  local denied, metric = first_denial(reply, rules_at, rule_count, amount)
  if denied ~= 0 and op ~= 'check' and release_all_expired(h, now, true) > 0 then
    read_counters(reply, h, c)
    denied, metric = first_denial(reply, rules_at, rule_count, amount)
  end
  local allowed = denied == 0
  reply[2], reply[3] = denied, metric

  if op == 'check' then
    reply[1] = allowed and 'would_allow' or 'would_deny'
    return reply
  end
  reply[1] = allowed and 'allowed' or 'denied'
  if allowed then
    for j = 1, c do
      if reply[3 + 2 * j] + 1 > max_exact or reply[4 + 2 * j] + amount > max_exact then
        return {'overflow', j}
      end
    end
    for j = 1, c do
      local count, total = reply[3 + 2 * j] + 1, reply[4 + 2 * j] + amount
      reply[3 + 2 * j], reply[4 + 2 * j] = count, total
      local at = counter_at(j)
      -- A new field may be a new key: only then can the key lack its expiry.
      if write_counter(KEYS[1 + h + j], ARGV[at], count, total) == 1 then
        redis.call('PEXPIREAT', KEYS[1 + h + j], ARGV[at + 1], 'NX')
      end
    end
  end

  local state = 'denied'
  if allowed then
    state = op == 'reserve' and 'reserved' or 'consumed'
  end
  redis.call('HSET', record, 'fp', fingerprint, 'state', state, 'amount', ARGV[3], 'refunded', '0',
    'counted', allowed and '1' or '0', 'args', ARGV[9],
    'keys', allowed and c > 0 and table.concat(KEYS, '\n', 2 + h, 1 + h + c) or '',
    'at', now, 'reply', cmsgpack.pack(reply))
  if allowed and op == 'reserve' then
    local holds = {}
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
  -- The full refund has a field of its own, so no refund id of the caller's can meet it.
  local refund_field = ARGV[3] == '' and 'rf' or 'r:' .. ARGV[3]
  local earlier = redis.call('HGET', record, refund_field)
  if earlier then
    local requested, given = string.match(earlier, '^(-?%d+):(%d+)$')
    if not requested then
      requested, given = ARGV[2], earlier -- written before the amount was kept with it
    end
    if requested ~= ARGV[2] then
      return {'conflict', requested}
    end
    return {'refunded', given, string.format('%d', refunded), string.format('%d', amount), '1'}
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
    redis.call('HSET', record, 'counted', '0')
  end
  if give > 0 or count > 0 then
    give_back(record, count, give)
  end
  redis.call('HSET', record, 'refunded', string.format('%d', refunded + give), refund_field,
    ARGV[2] .. ':' .. string.format('%d', give))
  return {'refunded', string.format('%d', give), string.format('%d', refunded + give),
          string.format('%d', amount), '0'}
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
  give_back(record, 0, held - final)
  drop_holds(record)
  redis.call('HSET', record, 'state', 'confirmed', 'amount', string.format('%d', final))
  return {'confirmed', string.format('%d', final), string.format('%d', held - final)}
end

local function cancel()
  local state = redis.call('HGET', record, 'state')
  if not state then
    if ARGV[4] == 'probe' then
      return {'unknown'}
    end
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

local function void()
  local state = redis.call('HGET', record, 'state')
  if not state then
    return {'unknown'}
  end
  if state == 'voided' or state == 'denied' then
    return {'already'}
  end
  if state ~= 'consumed' and state ~= 'reserved' then
    return {'bad_state', state}
  end
  local counted = redis.call('HGET', record, 'counted') == '1' and 1 or 0
  give_back(record, counted, tonumber(redis.call('HGET', record, 'amount')) - tonumber(redis.call('HGET', record, 'refunded')))
  drop_holds(record)
  redis.call('HSET', record, 'state', 'voided', 'counted', '0')
  return {'voided'}
end

local function inspect()
  local fields = redis.call('HGETALL', record)
  if #fields == 0 then
    return {'missing'}
  end
  local reply = {'record', redis.call('PEXPIRETIME', record), 0}
  local first
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name == 'reply' then
      first = fields[i + 1]
    elseif name ~= 'fp' and name ~= 'holds' then
      reply[#reply + 1] = name
      reply[#reply + 1] = fields[i + 1]
      reply[3] = reply[3] + 1
    end
  end
  if first then
    for _, item in ipairs(cmsgpack.unpack(first)) do
      reply[#reply + 1] = item
    end
  end
  return reply
end

if op == 'consume' or op == 'reserve' or op == 'check' then
  return decide()
elseif op == 'refund' then
  return refund()
elseif op == 'confirm' then
  return confirm()
elseif op == 'cancel' then
  return cancel()
elseif op == 'void' then
  return void()
elseif op == 'inspect' then
  return inspect()
end
return redis.error_reply('limit: unknown op ' .. tostring(op))
