-- transaction_home: the one authoritative record of a limits transaction on a Redis Cluster
-- (every one, also one whose counters live in one slot). Each slot's share is decided by
-- lua/limit.lua with a record of its own; this record, in the slot of the transaction id, says
-- what the transaction IS. Its state changes only here, by compare-and-set, and the shares
-- follow it: so exactly one caller of an id is first, one of confirm and cancel wins, and a
-- refused operation writes nothing anywhere (the client touches the shares only after this
-- record said go).
--
-- Record (string KEYS[1]): the format of every transaction record (lua/shared/record.lua), with
-- no counters ('-') and the home words: P: the plan, the share tags (the client builds each
-- share's record key, `<prefix>{<tag>}:tx:<id>`, from the tag and the id); B: the server time of
-- the latest begin, while pending; O: while the shares may not all have followed a change of
-- this record (a denial's voids, a confirm, expiry, cancel or refund): the server ms of that
-- change, made larger than the last one so that each change has its own value; set by the
-- change, negated (closed) only by the sweep (op swept) once every share has followed, so the
-- sweep finds interrupted fan-outs without a retry by the host and costs the hot path no round
-- trip. Its state: p pending (begun, not finished), then as a share's; v voided is a
-- transaction begun and never finished, abandoned by the sweep (its shares voided). Nothing the
-- client can rebuild is kept (no counter's totals). Its fingerprint is "<fp>:<amount>", the
-- amount the one it began with (^<reserved> of a reservation confirmed for less). A confirm,
-- cancel, refund or expiry keeps it ten minutes more at least (keep_after_reversal).
-- A string at KEYS[1] without a plan is not a home but a lua/limit.lua record (of a transaction
-- without window rules, or the tombstone "x - 0 -" of a cancel that came first): begin treats a
-- tombstone as cancelled and the rest as a conflict; the other ops answer "missing" (sweep:
-- "none"). A cancel of an id with no record at all writes that tombstone here, in the same
-- script that looked (so a begin that comes later is refused, and one that came earlier is
-- seen). A hash is a home record of a format before this one (unreleased): it is not read,
-- begin answers "conflict", the other ops "missing" (sweep: "none").
--
-- ARGV[1] = op.
-- op begin:    ARGV[2] fingerprint, ARGV[3] plan, ARGV[4] record lifetime (ms: how long a record
--              this call makes is kept, by the server's clock, as lua/limit.lua's decisions
--              keep theirs), ARGV[5] hold expiry (ms; a reserve's; kept from the first begin:
--              see finish)
--   Reply: {"go", plan} the transaction is pending: run its shares (plan: the first caller's;
--          only a begin with that plan refreshes `b`)
--          | {"final", state, denial ('' for none), plan, fingerprint ("<fp>:<amount>")}
--          | {"conflict"} | {"cancelled"} (cancelled before it began)
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
--   Reply: {"first"} (this call ended the pending state)
--          | {"final", state, denial, plan, fingerprint} | {"conflict"} | {"missing"}
-- op read:    (no more arguments) the decision, for a share record that says "voided"
--   Reply: {"final", state, denial, plan, fingerprint} | {"pending"} | {"missing"}
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
--   Reply: {"follow", state, plan, open, amount, fingerprint ("<fp>:<amount>", as begin took
--          it), then per refund: asked, refund id ('' for the full refund), the full refund
--          last} | {"none"}
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
local home -- the home record (a table, see parse_record), nil if there is none
local none -- whether KEYS[1] holds nothing

--#include shared/record.lua
--#include shared/record_edit.lua

--#include shared/reversal_rules.lua

local function fmt(n)
  return string.format('%d', n)
end

-- The server's clock in ms (scripts replicate their effects, so reading TIME is allowed).
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Writes the home record back, keeping its expiry (a home of the earlier format becomes one of
-- this format).
local function store()
  redis.call('SET', record, record_text(home), 'KEEPTTL')
end

-- store() for a confirm, cancel, refund or expiry, kept a while at least (keep_after_reversal:
-- a home record names no counter set).
local function store_reversal()
  store()
  keep_after_reversal(record)
end

-- Marks the record open: its shares have a change to follow. The value is the change's time,
-- past every earlier change's (a closed record keeps its last one, negated), so that a sweep
-- that followed an earlier change cannot close this one.
local function open_fan_out()
  home.open = math.max(now_ms(), math.abs(home.open or 0) + 1)
end

-- The fingerprint the transaction began with: "<fp>:<amount>".
local function fingerprint()
  return home.fp .. ':' .. fmt(home.requested or home.amount)
end

local function final()
  return {'final', home.state, home.denial or '', home.plan, fingerprint()}
end

-- A new home record (no refunds, no counters) of `fp_and_amount` ("<fp>:<amount>").
local function new_home(state, fp_and_amount, plan)
  local fp, amount = string.match(fp_and_amount, '^(%S+):(%d+)$')
  if not fp then
    error('transaction_home ' .. op .. ': fingerprint "' .. fp_and_amount ..
          '" is not "<digest>:<amount>"')
  end
  return {state = state, fp = fp, amount = tonumber(amount), counters = '-', refunded = 0,
          count_back = false, refunds = {}, refund_ids = {}, plan = plan}
end

local function begin()
  if not home then
    home = new_home('pending', ARGV[2], ARGV[3])
    home.hexp, home.begun = tonumber(ARGV[5]), now_ms()
    redis.call('SET', record, record_text(home), 'PX', ARGV[4])
    return {'go', ARGV[3]}
  end
  if fingerprint() ~= ARGV[2] then
    return {'conflict'}
  end
  if home.state == 'pending' then
    -- a caller is at work on it again: the sweep leaves it alone for another while; not one
    -- with another plan (rules changed), which the client refuses without running a share
    if home.plan == ARGV[3] then
      home.begun = now_ms()
      store()
    end
    return {'go', home.plan}
  end
  return final()
end

local function finish()
  local state = ARGV[3]
  if state ~= 'consumed' and state ~= 'reserved' and state ~= 'denied' then
    return redis.error_reply('transaction_home finish: not a decided state ' .. tostring(state))
  end
  if not home then
    return {'missing'}
  end
  if fingerprint() ~= ARGV[2] then
    return {'conflict'}
  end
  if home.state ~= 'pending' then
    return final()
  end
  home.begun, home.state = nil, state
  if state == 'denied' then
    home.denial, home.hexp = ARGV[4], nil -- (a denied reserve holds nothing)
    open_fan_out() -- the shares that counted are voided next
  elseif state == 'reserved' and (not home.hexp or ARGV[6] ~= '1') then
    home.hexp = tonumber(ARGV[5])
  end
  store()
  return {'first'}
end

local function read()
  if not home then
    return {'missing'}
  end
  if home.state == 'pending' then
    return {'pending'}
  end
  return final()
end

-- A hold that ran out was released by its timeout, not by a confirm or cancel: the record
-- becomes expired, and its shares follow.
local function expire()
  home.state = 'expired'
  open_fan_out()
  store_reversal()
  return {'expired', home.plan}
end

-- (A home of an earlier version without its hold expiry never expires here: its shares' holds
-- do.)
local function hold_expiry()
  return home.hexp or math.huge
end

local function confirm()
  if not home then
    return {'missing'}
  end
  local held = home.amount
  local verdict, final_amount =
    reversal_rules.confirm(home.state, held, tonumber(ARGV[2]), hold_expiry(), tonumber(ARGV[3]))
  if verdict == 'replay' then
    return {'already', home.state, fmt(held), home.plan}
  elseif verdict == 'expired' then
    return {'expired', home.plan} -- (the shares follow again: one may not have yet)
  elseif verdict == 'bad_state' then
    return {'bad_state', home.state}
  elseif verdict == 'expire' then
    return expire()
  elseif verdict == 'too_much' then
    return {'too_much', fmt(held)}
  end
  home.state, home.amount = 'confirmed', final_amount
  if final_amount ~= held then
    home.requested = held
  end
  open_fan_out()
  store_reversal()
  return {'confirmed', fmt(final_amount), fmt(held - final_amount), home.plan}
end

local function cancel()
  if not home then
    if none then
      redis.call('SET', record, 'x - 0 -', 'PXAT', ARGV[3])
      return {'tombstone'}
    end
    return {'missing'}
  end
  local verdict = reversal_rules.cancel(home.state, hold_expiry(), tonumber(ARGV[2]))
  if verdict == 'replay' then
    return {'already', home.state, home.plan}
  elseif verdict == 'bad_state' then
    return {'bad_state', home.state}
  elseif verdict == 'expire' then
    return expire()
  end
  home.state = 'cancelled'
  open_fan_out()
  store_reversal()
  return {'cancelled', fmt(home.amount), home.plan}
end

local function refund()
  if not home then
    return {'missing'}
  end
  local id, amount, refunded = ARGV[3], home.amount, home.refunded
  local verdict, give =
    reversal_rules.refund(home.state, amount, refunded, home.refunds[id], ARGV[2])
  if verdict == 'bad_state' then
    return {'bad_state', home.state}
  elseif verdict == 'conflict' then
    return {'conflict', give}
  elseif verdict == 'replay' then
    return {'refunded', fmt(give), fmt(refunded), fmt(amount), '1', home.plan}
  elseif verdict == 'too_much' then
    return {'too_much', fmt(give)}
  end
  home.refunds[id] = ARGV[2] .. ':' .. fmt(give)
  home.refund_ids[#home.refund_ids + 1] = id
  home.refunded = refunded + give
  open_fan_out()
  store_reversal()
  return {'refunded', fmt(give), fmt(refunded + give), fmt(amount), '0', home.plan}
end

local function sweep()
  if not home then
    return {'none'}
  end
  local cutoff = now_ms() - tonumber(ARGV[2])
  local open = home.open or -1
  if home.state == 'pending' then
    local begun = home.begun or 0
    if begun > cutoff then
      return {'none'}
    end
    -- (a pending reserve's hold: voided, it holds nothing)
    home.state, home.begun, home.hexp = 'voided', nil, nil
    -- The abandonment is dated by the begin it judged (past every earlier change), not now: a
    -- take of the same age sent again after its reply was lost hands it over again.
    open = math.max(begun, math.abs(home.open or 0) + 1)
    home.open = open
    store()
  elseif open < 0 or open > cutoff then
    return {'none'}
  end
  local reply = {'follow', home.state, home.plan, fmt(open), fmt(home.amount), fingerprint()}
  for _, id in ipairs(home.refund_ids) do
    if id ~= '' then
      reply[#reply + 1] = string.match(home.refunds[id], '^(-?%d+):')
      reply[#reply + 1] = id
    end
  end
  if home.refunds[''] then -- (the full refund last)
    reply[#reply + 1] = string.match(home.refunds[''], '^(-?%d+):')
    reply[#reply + 1] = ''
  end
  return reply
end

local function adopt()
  if not string.match(ARGV[6] or '', '^%d+$') or not tonumber(ARGV[4]) then
    return redis.error_reply('transaction_home adopt: bad amount or expiry ' ..
                             tostring(ARGV[6]) .. ' ' .. tostring(ARGV[4]))
  end
  if home then
    local began = fmt(home.requested or home.amount)
    local same = (home.fp == ARGV[2] and began == ARGV[6]) or
      (home.fp == ARGV[5] and (began == ARGV[6] or fmt(home.amount) == ARGV[6]))
    if not same then
      return {'mismatch'}
    end
    return {'exists', home.plan}
  end
  if ARGV[7] ~= 'create' then
    return {'none'}
  end
  home = new_home('consumed', ARGV[2] .. ':' .. ARGV[6], ARGV[3])
  redis.call('SET', record, record_text(home), 'PXAT', ARGV[4])
  return {'adopted'}
end

local function swept()
  if not (home and home.open) or fmt(home.open) ~= ARGV[2] then
    return {'changed'}
  end
  home.open = -home.open
  store()
  return {'closed'}
end

local ops = {begin = begin, finish = finish, read = read, confirm = confirm, cancel = cancel,
             refund = refund, sweep = sweep, swept = swept, adopt = adopt}

-- One call.
local function main()
  op, record, home, none = ARGV[1], KEYS[1], nil, false
  local run = ops[op]
  if not run then
    return redis.error_reply('transaction_home: unknown op ' .. tostring(op))
  end
  local text = redis.pcall('GET', record)
  local other -- what KEYS[1] holds when it is no home: a limit.lua record, or a hash of old
  if type(text) == 'table' then
    if string.sub(text.err or '', 1, 9) ~= 'WRONGTYPE' then
      return text -- (READONLY on a demoted master, OOM...)
    end
    other = '' -- a hash: a home record of an unreleased format, not read
  elseif text then
    home = parse_record(text)
    if not home.plan then
      home, other = nil, text
    end
  else
    none = true
  end
  if other then
    if op == 'begin' then
      return string.sub(other, 1, 4) == 'x - ' and {'cancelled'} or {'conflict'}
    end
    return op == 'sweep' and {'none'} or {'missing'}
  end
  return run()
end

return main()
