-- transaction_home: the one authoritative record of a limits transaction on a Redis Cluster
-- (every one, also one whose counters live in one slot). Each slot's share is decided by
-- lua/limit.lua with a record of its own; this record, in the slot of the transaction id, says
-- what the transaction IS. Its state changes only here, by compare-and-set, and the shares
-- follow it: so exactly one caller of an id is first, one of confirm and cancel wins, and a
-- refused operation writes nothing anywhere (the client touches the shares only after this
-- record said go).
--
-- Record (hash KEYS[1]), one-letter fields so that it stays small (issue 14: no counter's totals,
-- nothing the client can rebuild), each written only when it says something:
--   f  the fingerprint (operation, amount, attributes): "<digest>:<amount>"
--   p  the plan: the share tags, newline-joined (the client builds each share's record key,
--      `<prefix>{<tag>}:tx:<id>`, from the tag and the id)
--   s  the state, one letter: p pending, c consumed, d denied, r reserved, f confirmed,
--      x cancelled, e expired, v voided (a transaction begun and never finished, abandoned by
--      the sweep: its shares voided); replies name it in full
--   b  server time of the latest begin (ms), while pending
--   d  the first decision's denial "<rule> <metric> <limit> <used>" (state denied only): the
--      decision is its state (denied: the denial; voided: cancelled; else allowed)
--   a  the amount, once a confirm set it (before: the amount in f)
--   h  the hold expiry (ms), reserved transactions only (written by a reserve's begin, while
--      pending)
--   r  the amount refunded so far, from the first refund on; per refund r:<refund id> (rf for
--      the full refund) = "<asked>:<given>"
--   o  while the shares may not all have followed a change of this record (a denial's voids, a
--      confirm, expiry, cancel or refund): the server ms of that change, made larger than the
--      last one so that each change has its own value; set by the change, negated (closed)
--      only by the sweep (op swept) once every share has followed, so the sweep finds
--      interrupted fan-outs without a retry by the host and costs the hot path no round trip.
-- A string at KEYS[1] is not a home but a lua/limit.lua record (of a transaction without window
-- rules, or the tombstone "x - 0 -" of a cancel that came first): begin treats a tombstone as
-- cancelled and the rest as a conflict; the other ops answer "missing". A cancel of an id with no
-- record at all writes that tombstone here, in the same script that looked (so a begin that
-- comes later is refused, and one that came earlier is seen). A hash without these fields (a
-- home record of an earlier format) is not read: begin answers "conflict", the other ops
-- "missing" (sweep: "none").
--
-- ARGV[1] = op.
-- op begin:    ARGV[2] fingerprint, ARGV[3] plan, ARGV[4] expiry (ms), ARGV[5] hold expiry (ms;
--              a reserve's; kept from the first begin: see finish)
--   Reply: {"go", plan} the transaction is pending: run its shares (plan: the first caller's;
--          only a begin with that plan refreshes `b`)
--          | {"final", state, denial ('' for none), plan} | {"conflict"} | {"cancelled"}
--          (cancelled before it began)
-- op finish:   ARGV[2] fingerprint, ARGV[3] state (consumed | reserved | denied), ARGV[4] denial
--              ('' unless denied), ARGV[5] hold expiry (ms; reserved only; the shares' holds
--              last a grace longer, so that a confirm taken here reaches them before they expire).
--              ARGV[6] '1' when a share replayed (an earlier caller of the id decided it).
--              A reservation then keeps the hold expiry of its first begin: a caller that
--              finishes for one that died (the same id again, later) replays shares holding from
--              an earlier time, which may be released already; a later expiry here would confirm
--              holds that are gone. (Any share's hold runs from its own caller's begin, never
--              from before the first: the kept expiry may end early, never late.) Else this
--              call decided every share and its own hold expiry is taken.
--   Reply: {"first"} (this call ended the pending state) | {"final", state, denial, plan}
--          | {"conflict"} | {"missing"}
-- op read:    (no more arguments) the decision, for a share record that says "voided"
--   Reply: {"final", state, denial, plan} | {"pending"} | {"missing"}
-- The other ops answer like lua/limit.lua's ops of the same name, with the plan appended to the
-- replies after which the client applies the operation to every share (each share idempotently,
-- so a retry finishes a fan-out that a lost reply or a crash interrupted); "missing" when KEYS[1]
-- is no home (standalone, or a one-slot transaction recorded by an earlier version, whose share
-- record is the authority).
-- op sweep:   ARGV[2] age (ms)
--   A pending record begun at least `age` ago (server time) becomes voided (compare-and-set, so a
--   caller that finishes later replays the abandonment) and open, the change dated by that begin
--   (so the same take sent again after a lost reply hands it over again). Then an open record
--   whose change is at least `age` old is handed to the sweep.
--   Reply: {"follow", state, plan, open, amount, hold expiry ('0' for none), then per refund:
--          asked, refund id ('' for the full refund), the full refund last} | {"none"}
-- op adopt:   ARGV[2] the original's consume fingerprint (digest), ARGV[3] plan, ARGV[4] expiry
--              (ms), ARGV[5] its reserve fingerprint (digest), ARGV[6] its amount, ARGV[7]
--              "create" | "compare": a reversal that brings the original transaction the host
--   kept. A record that is there must be of that transaction (consumed, or reserved with that
--   amount reserved or confirmed). With "create" (a refund), no record (past the replay
--   horizon) is recorded anew as consumed under this plan (a concurrent caller's stands).
--   Reply: {"adopted"} | {"exists", plan} | {"mismatch"} (another transaction's) | {"none"}
--          (compare, no record) | {"missing"} (KEYS[1] holds a lua/limit.lua record)
-- op swept:   ARGV[2] the open value the sweep followed: closed if no change came since.
--   Reply: {"closed"} | {"changed"}
-- op confirm:  ARGV[2] final amount (-1 = all held), ARGV[3] now (ms)
--   Reply: {"confirmed", final, released, plan} | {"already", "confirmed", final, plan}
--          | {"expired", plan} | {"bad_state", state} | {"too_much", held} | {"missing"}
-- op cancel:   ARGV[2] now (ms), ARGV[3] expiry of a tombstone (ms)
--   Reply: {"cancelled", released, plan} | {"expired", plan} (its hold had run out: recorded
--          expired, as confirm does) | {"already", state, plan} (also for a voided record)
--          | {"bad_state", state} | {"tombstone"} (no record: one was written) | {"missing"}
-- op refund:   ARGV[2] amount (-1 = all that is left), ARGV[3] refund id ('' = the full refund)
--   Reply: {"refunded", given (by the first call of this id), refunded in total, amount,
--           replayed "0" | "1", plan} | {"bad_state", state} | {"too_much", refundable}
--          | {"conflict", the amount the id was first used with} | {"missing"}

-- This chunk's definitions run once when Redis loads it as a library (FCALL) and at every call
-- by EVALSHA; main() runs per call and sets the call's locals anew. The chunk's own statements
-- use no global (a library's chunk sees only `redis.register_function` and `redis.log`).
local op, record
local kind -- none, hash (a home record) or string

local state_names = {p = 'pending', c = 'consumed', d = 'denied', r = 'reserved',
                     f = 'confirmed', x = 'cancelled', e = 'expired', v = 'voided'}
local state_codes = {pending = 'p', consumed = 'c', denied = 'd', reserved = 'r',
                     confirmed = 'f', cancelled = 'x', expired = 'e', voided = 'v'}

local function fmt(n)
  return string.format('%d', n)
end

-- The server's clock in ms (scripts replicate their effects, so reading TIME is allowed).
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Marks the record open: its shares have a change to follow. The value is the change's time,
-- past every earlier change's (a closed record keeps its last one, negated), so that a sweep
-- that followed an earlier change cannot close this one.
local function open_fan_out()
  local last = math.abs(tonumber(redis.call('HGET', record, 'o') or '0'))
  redis.call('HSET', record, 'o', fmt(math.max(now_ms(), last + 1)))
end

-- The amount: the confirmed one, else the one the fingerprint carries.
local function amount_of(confirmed, fingerprint)
  return tonumber(confirmed or string.match(fingerprint, ':(%d+)$'))
end

local function final(found_state, denial, plan)
  return {'final', state_names[found_state], denial or '', plan}
end

local function begin()
  local found = redis.call('HMGET', record, 'f', 'p', 's', 'd')
  if kind == 'none' then
    local fields = {'f', ARGV[2], 'p', ARGV[3], 's', 'p', 'b', fmt(now_ms())}
    if ARGV[5] then
      fields[9], fields[10] = 'h', ARGV[5]
    end
    redis.call('HSET', record, unpack(fields))
    redis.call('PEXPIREAT', record, ARGV[4])
    return {'go', ARGV[3]}
  end
  if found[1] ~= ARGV[2] or not found[2] then
    return {'conflict'}
  end
  if found[3] == 'p' then
    -- a caller is at work on it again: the sweep leaves it alone for another while; not one
    -- with another plan (rules changed), which the client refuses without running a share
    if found[2] == ARGV[3] then
      redis.call('HSET', record, 'b', fmt(now_ms()))
    end
    return {'go', found[2]}
  end
  return final(found[3], found[4], found[2])
end

local function finish()
  local code = state_codes[ARGV[3]]
  if code ~= 'c' and code ~= 'r' and code ~= 'd' then
    return redis.error_reply('transaction_home finish: not a decided state ' .. tostring(ARGV[3]))
  end
  local found = redis.call('HMGET', record, 'f', 'p', 's', 'd', 'h')
  if not found[2] then
    return {'missing'}
  end
  if found[1] ~= ARGV[2] then
    return {'conflict'}
  end
  if found[3] ~= 'p' then
    return final(found[3], found[4], found[2])
  end
  redis.call('HDEL', record, 'b')
  redis.call('HSET', record, 's', code)
  if code == 'd' then
    redis.call('HSET', record, 'd', ARGV[4])
    if found[5] then
      redis.call('HDEL', record, 'h') -- (a denied reserve holds nothing)
    end
    open_fan_out() -- the shares that counted are voided next
  elseif code == 'r' and (not found[5] or ARGV[6] ~= '1') then
    redis.call('HSET', record, 'h', ARGV[5])
  end
  return {'first'}
end

local function read()
  local found = redis.call('HMGET', record, 'p', 's', 'd')
  if not found[1] then
    return {'missing'}
  end
  if found[2] == 'p' then
    return {'pending'}
  end
  return final(found[2], found[3], found[1])
end

--#include shared/reversal_rules.lua

-- The home's state (in full), plan, amount and hold expiry (a home record without one, of an
-- earlier version, never expires here: its shares' holds do), or nil when KEYS[1] is no home.
local function home()
  local found = redis.call('HMGET', record, 'p', 's', 'f', 'a', 'h')
  if not found[1] then
    return nil
  end
  return state_names[found[2]], found[1], amount_of(found[4], found[3]),
    tonumber(found[5]) or math.huge
end

-- A hold that ran out was released by its timeout, not by a confirm or cancel: the record
-- becomes expired, and its shares follow.
local function expire(plan)
  redis.call('HSET', record, 's', 'e')
  open_fan_out()
  return {'expired', plan}
end

local function confirm()
  local state, plan, held, hold_expiry = home()
  if not state then
    return {'missing'}
  end
  local verdict, final_amount =
    reversal_rules.confirm(state, held, tonumber(ARGV[2]), hold_expiry, tonumber(ARGV[3]))
  if verdict == 'replay' then
    return {'already', state, fmt(held), plan}
  elseif verdict == 'expired' then
    return {'expired', plan} -- (the shares follow again: one may not have yet)
  elseif verdict == 'bad_state' then
    return {'bad_state', state}
  elseif verdict == 'expire' then
    return expire(plan)
  elseif verdict == 'too_much' then
    return {'too_much', fmt(held)}
  end
  redis.call('HSET', record, 's', 'f', 'a', fmt(final_amount))
  open_fan_out()
  return {'confirmed', fmt(final_amount), fmt(held - final_amount), plan}
end

local function cancel()
  local state, plan, held, hold_expiry = home()
  if not state then
    if redis.call('EXISTS', record) == 0 then
      redis.call('SET', record, 'x - 0 -', 'PXAT', ARGV[3])
      return {'tombstone'}
    end
    return {'missing'}
  end
  local verdict = reversal_rules.cancel(state, hold_expiry, tonumber(ARGV[2]))
  if verdict == 'replay' then
    return {'already', state, plan}
  elseif verdict == 'bad_state' then
    return {'bad_state', state}
  elseif verdict == 'expire' then
    return expire(plan)
  end
  redis.call('HSET', record, 's', 'x')
  open_fan_out()
  return {'cancelled', fmt(held), plan}
end

local function refund()
  local state, plan, amount = home()
  if not state then
    return {'missing'}
  end
  local refunded = tonumber(redis.call('HGET', record, 'r') or '0')
  local field = ARGV[3] == '' and 'rf' or 'r:' .. ARGV[3]
  local verdict, give =
    reversal_rules.refund(state, amount, refunded, redis.call('HGET', record, field), ARGV[2])
  if verdict == 'bad_state' then
    return {'bad_state', state}
  elseif verdict == 'conflict' then
    return {'conflict', give}
  elseif verdict == 'replay' then
    return {'refunded', fmt(give), fmt(refunded), fmt(amount), '1', plan}
  elseif verdict == 'too_much' then
    return {'too_much', fmt(give)}
  end
  redis.call('HSET', record, 'r', fmt(refunded + give), field, ARGV[2] .. ':' .. fmt(give))
  open_fan_out()
  return {'refunded', fmt(give), fmt(refunded + give), fmt(amount), '0', plan}
end

local function sweep()
  local found = redis.call('HMGET', record, 'p', 's', 'b', 'o')
  if not found[1] then
    return {'none'}
  end
  local cutoff = now_ms() - tonumber(ARGV[2])
  local state, open = found[2], tonumber(found[4] or '-1')
  if state == 'p' then
    if tonumber(found[3] or '0') > cutoff then
      return {'none'}
    end
    state = 'v'
    redis.call('HDEL', record, 'b', 'h') -- (a pending reserve's hold: voided, it holds nothing)
    redis.call('HSET', record, 's', state)
    -- The abandonment is dated by the begin it judged (past every earlier change), not now: a
    -- take of the same age sent again after its reply was lost hands it over again.
    local last = math.abs(tonumber(redis.call('HGET', record, 'o') or '0'))
    open = math.max(tonumber(found[3] or '0'), last + 1)
    redis.call('HSET', record, 'o', fmt(open))
  elseif open < 0 or open > cutoff then
    return {'none'}
  end
  local more = redis.call('HMGET', record, 'f', 'a', 'h')
  local reply = {'follow', state_names[state], found[1], fmt(open),
                 fmt(amount_of(more[2], more[1])), more[3] or '0'}
  local fields = redis.call('HGETALL', record)
  local full
  for i = 1, #fields, 2 do
    local refund_id = string.match(fields[i], '^r:(.+)$')
    if refund_id then
      reply[#reply + 1] = string.match(fields[i + 1], '^(-?%d+):')
      reply[#reply + 1] = refund_id
    elseif fields[i] == 'rf' then
      full = string.match(fields[i + 1], '^(-?%d+):')
    end
  end
  if full then
    reply[#reply + 1] = full
    reply[#reply + 1] = ''
  end
  return reply
end

local function adopt()
  if not string.match(ARGV[6] or '', '^%d+$') or not tonumber(ARGV[4]) then
    return redis.error_reply('transaction_home adopt: bad amount or expiry ' ..
                             tostring(ARGV[6]) .. ' ' .. tostring(ARGV[4]))
  end
  if kind == 'hash' then
    local found = redis.call('HMGET', record, 'f', 'p', 'a')
    local digest, amount = string.match(found[1] or '', '^(.*):(%d+)$')
    local same = (digest == ARGV[2] and amount == ARGV[6]) or
      (digest == ARGV[5] and (amount == ARGV[6] or found[3] == ARGV[6]))
    if not same then
      return {'mismatch'}
    end
    return {'exists', found[2] or ''}
  end
  if ARGV[7] ~= 'create' then
    return {'none'}
  end
  redis.call('HSET', record, 'f', ARGV[2] .. ':' .. ARGV[6], 'p', ARGV[3], 's', 'c')
  redis.call('PEXPIREAT', record, ARGV[4])
  return {'adopted'}
end

local function swept()
  if redis.call('HGET', record, 'o') ~= ARGV[2] then
    return {'changed'}
  end
  redis.call('HSET', record, 'o', '-' .. ARGV[2])
  return {'closed'}
end

-- One call.
local function main()
  op, record = ARGV[1], KEYS[1]
  kind = redis.call('TYPE', record).ok
  if kind == 'string' then
    if op ~= 'begin' then
      return {'missing'}
    end
    local found = redis.call('GET', record)
    return string.sub(found, 1, 4) == 'x - ' and {'cancelled'} or {'conflict'}
  end

  if op == 'begin' then
    return begin()
  elseif op == 'finish' then
    return finish()
  elseif op == 'read' then
    return read()
  elseif op == 'confirm' then
    return confirm()
  elseif op == 'cancel' then
    return cancel()
  elseif op == 'refund' then
    return refund()
  elseif op == 'sweep' then
    return sweep()
  elseif op == 'swept' then
    return swept()
  elseif op == 'adopt' then
    return adopt()
  end
  return redis.error_reply('transaction_home: unknown op ' .. tostring(op))
end

return main()
