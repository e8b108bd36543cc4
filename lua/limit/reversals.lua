-- limit/reversals: the body of lua/limit.lua's `reversals()`, which makes the functions of its
-- reversals (refund, confirm, cancel, void, inspect) and of the release of expired holds the
-- first time a call needs them (a consume never does). limit.lua gets this text where a line of
-- it includes this file, inside `reversals()`, after reversal_rules.lua and record_edit.lua, when
-- the scripts are embedded (cmake/LimitcounterEmbedLua.cmake): the ops, keys and arguments are
-- limit.lua's contract; this file reads the chunk's locals (KEYS, ARGV, the counters, `declared`)
-- and its result is `made_reversals`.
  -- A record a reversal writes expires at a time the client gives (ms, its clock plus the replay
  -- horizon): one not after the server's clock would be gone at once (SET ... PXAT stores
  -- nothing), and a retry would give back again. Refused before anything is written.
  local function refuse_past_expiry(expiry)
    if not is_time_ms(expiry) then -- (else SET ... PXAT would fail after other writes)
      error('limit: the record expiry ' .. expiry .. ' is not a time in ms')
    end
    local time = redis.call('TIME')
    local server_ms = time[1] * 1000 + math.floor(time[2] / 1000)
    if expiry + 0 <= server_ms then
      error('limit: a record expiring at ' .. expiry .. ' ms would be gone at once: the ' ..
        'server\'s clock says ' .. string.format('%d', server_ms) .. ' ms (the client\'s ' ..
        'clock is a replay horizon or more behind the server\'s)')
    end
  end

  -- The keys the call declared, and what a reversal needs beyond them: a reversal learns the
  -- keys it touches from its record and counter set, and one the call did not declare ends the
  -- call with {"needs", key...} before anything is written; the client declares them and sends
  -- the call again. So every key this script touches is in KEYS, and Redis's migration guard
  -- (TRYAGAIN/ASK when a slot's keys are half moved) covers them all.
  local function need(keys)
    if not declared then
      declared = {}
      for _, each in ipairs(KEYS) do
        declared[each] = true
      end
    end
    local missing = {}
    for _, key in ipairs(keys) do
      if not declared[key] then
        missing[#missing + 1] = key
      end
    end
    if #missing > 0 then
      error({needs = missing})
    end
  end

  -- The cache cell of `field` of the counter key `entry` stands for (read if not yet).
  local function cell_of(entry, field)
    local cell = entry.fields[field]
    if not cell then
      cell = parse_counter(redis.call('HGET', entry.key, field))
      entry.fields[field] = cell
    end
    return cell
  end

  -- The count and amount of `field` of the counter key `entry` stands for.
  local function read_cell(entry, field)
    local cell = cell_of(entry, field)
    return cell[1], cell[2]
  end

  -- `expiry` (ms): the key's, for a write that may create it (a new window); nil for a write to
  -- a key that exists.
  local function write_cell(entry, field, count, amount, expiry)
    local cell = entry.fields[field]
    if cell then
      cell[1], cell[2], cell[3] = count, amount, true
    else
      entry.fields[field] = {count, amount, true}
    end
    if expiry then
      entry.expiry = expiry
    end
  end

  -- Whether the counter key exists (or this call wrote it).
  local function counter_key_exists(key)
    local entry = counters and counters[key]
    if entry and entry.expiry then
      return true
    end
    return redis.call('EXISTS', key) == 1
  end

  -- The counter-set prefix of a record's slot: "<p>cs:" for "<p>tx:{<id>}", "<p>{<tag>}:cs:" for a
  -- share "<p>{<tag>}:tx:<id>" (neither the prefix nor a tag nor an id has braces).
  local function counter_set_prefix(record)
    if string.sub(record, -1) == '}' then
      return string.sub(record, 1, string.find(record, '{', 1, true) - 4) .. 'cs:'
    end
    return string.sub(record, 1, string.find(record, '}', 1, true)) .. ':cs:'
  end

  -- Writes back record `key` a reversal changed, kept a while at least, and its counter set past
  -- it (keep_after_reversal; the set is declared: prepare read it).
  local function store(key, r)
    redis.call('SET', key, record_text(r), 'KEEPTTL')
    keep_after_reversal(key, r.counters and r.counters ~= '-' and counter_set_prefix(key) ..
      r.counters or nil)
  end

  -- A counter set's text as its counters ({key, field number}...) and its hold sets.
  local function set_lines(text)
    local lines = {}
    for line in string.gmatch(text, '[^\n]+') do
      lines[#lines + 1] = line
    end
    local c = tonumber(string.match(lines[1], '^%d+')) -- (then its expiry, if it has one)
    local counters, holds = {}, {}
    for j = 1, c do
      local line = lines[1 + j]
      local space = string.find(line, ' ', 1, true)
      counters[j] = {string.sub(line, 1, space - 1), tonumber(string.sub(line, space + 1))}
    end
    for j = 2 + c, #lines do
      holds[#holds + 1] = lines[j]
    end
    return counters, holds
  end

  -- Reads everything a reversal of record `r` (at `key`) touches before its first write, so that
  -- a failure (a key of the wrong type, a key the call did not declare) writes nothing: sets
  -- r.moved (the counters it would give back to: those whose key exists and, for a reservation,
  -- whose hold member is still there; {entry, field}) and, for a reservation with counters,
  -- r.members (its members still in their hold sets, {hold set, member}), r.hold_score (its hold
  -- expiry), r.held (some hold is still there) and r.swept (a sweep released some of them: the
  -- member of a counter whose key is there is gone). A member a sweep released was given back to
  -- its counter by that sweep (release_expired_holds), which leaves the record as it is.
  -- `text`: the counter set's text when the caller brought it (the original), else the record's
  -- set is read. `reading`: a set that is gone leaves nothing (inspect), else it is an error.
  local function prepare(key, r, text, reading)
    r.moved, r.members = {}, {}
    if not r.counters or r.counters == '-' then
      return
    end
    if not text then
      local set_key = counter_set_prefix(key) .. r.counters
      need({set_key})
      text = redis.call('GET', set_key)
      if not text then
        if reading then
          return
        end
        -- never while its records live (see keep_counter_set)
        error('limit: the counter set ' .. r.counters .. ' of ' .. key .. ' is gone')
      end
    end
    local counters, holds = set_lines(text)
    local wanted = {}
    for _, counter in ipairs(counters) do
      wanted[#wanted + 1] = counter[1]
    end
    for _, hold in ipairs(holds) do
      wanted[#wanted + 1] = hold
    end
    need(wanted)
    local split, reserved = split_fields(r.fields), r.state == 'reserved'
    -- (a set an earlier version wrote has one hold set per counter shape, "<p>{<tag>}:holds",
    -- each holding one member for all of the reservation's counters)
    local shared = #counters > 0 and holds[1] ~= counters[1][1] .. ':holds'
    local amount = string.format('%d', r.amount)
    r.listed = {}
    for j, counter in ipairs(counters) do
      local counter_key, field = counter[1], split[counter[2]]
      r.listed[j] = counter_key .. ' ' .. field
      local held = true
      if reserved and not shared then
        local member = key .. ' ' .. amount .. ' ' .. field
        -- (each read: a hold set of another type fails here)
        local score = tonumber(redis.call('ZSCORE', holds[j], member))
        if score then
          r.hold_score = r.hold_score or score
          r.members[#r.members + 1] = {holds[j], member}
        end
        held = score ~= nil
        -- (a member whose counter key is gone went with its window's hold set, unswept)
        r.swept = r.swept or not held and counter_key_exists(counter_key)
      end
      if held and counter_key_exists(counter_key) then
        local entry = counter_entry(counter_key)
        cell_of(entry, field)
        r.moved[#r.moved + 1] = {entry, field}
      end
    end
    if reserved and shared then
      local member = key .. ' ' .. amount .. ' ' .. r.counters .. ' ' .. r.fields
      for _, hold in ipairs(holds) do
        local score = tonumber(redis.call('ZSCORE', hold, member))
        if score then
          r.hold_score = r.hold_score or score
          r.members[#r.members + 1] = {hold, member}
        end
      end
      if not r.hold_score then
        r.moved = {}
      end
    end
    r.held = #r.members > 0
  end

  -- Takes count and amount back out of every counter the record moved, never below zero.
  -- Keys that have expired since are left alone (their window is over).
  local function give_back(r, count, amount)
    for _, moved in ipairs(r.moved) do
      local entry, field = moved[1], moved[2]
      local c, a = read_cell(entry, field)
      write_cell(entry, field, math.max(c - count, 0), math.max(a - amount, 0))
    end
  end

  -- When a reservation's hold expires (ms): its record's, or its members' score in its hold sets
  -- (0 if they no longer hold it, or a sweep released one of them: the hold ran out by the
  -- sweeper's clock, and the counter it released no longer counts it, so it can only expire,
  -- whatever the clock of the confirm or cancel asking, or a share following its home's confirm).
  local function hold_expiry_of(r)
    return not r.swept and (r.hexp or r.hold_score) or 0
  end

  local function drop_holds(r)
    for _, held in ipairs(r.members) do
      redis.call('ZREM', held[1], held[2])
    end
  end

  -- Ends a reservation (prepared): gives back what its hold still holds, releases the hold and
  -- sets its final state.
  local function release_reservation(key, r, state, count, amount)
    if r.held then
      give_back(r, count, amount)
      drop_holds(r)
    end
    r.state = state
    store(key, r)
  end

  -- Releases the expired members (`expired`, up to 64) of the hold set of `entry`'s counter
  -- (`hold`): gives each one's count and amount back to its field of that counter
  -- (if the window's key is still there) and removes it; their records are left as they are
  -- (prepare reads a reservation without members as given back).
  local function release_expired_holds(hold, entry, expired)
    local exists = #expired > 0 and counter_key_exists(entry.key)
    for _, member in ipairs(expired) do
      local amount, field = string.match(member, '^%S+ (%d+) (%S+)$')
      if exists and amount then
        local c, a = read_cell(entry, field)
        write_cell(entry, field, math.max(c - 1, 0), math.max(a - tonumber(amount), 0))
      end
      redis.call('ZREM', hold, member)
    end
  end

  -- Releases the expired holds of counter set `set`'s hold sets (counter j's is
  -- KEYS[set.holds + j]): every one of them when `all` (a denial: an expired hold must never
  -- deny), else up to 64 per set (a reserve, before it writes anything). Returns how many.
  -- Every hold set is read before the first release, and the counter set too (read_counter_set:
  -- the record written after the sweep names it). A hold set that is not a sorted set (a hand
  -- edit) fails a reserve then, having written nothing; a denial, which may come after a
  -- batch's earlier writes, leaves it alone (logged), as holding nothing expired.
  local function release_all_expired(set, now, all)
    local h, first, found = set.program.h, {}, 0
    for j = 1, h do
      local hold = KEYS[set.holds + j]
      local expired = redis.pcall('ZRANGEBYSCORE', hold, '-inf', now, 'LIMIT', '0', '64')
      if expired.err and not all then
        error(expired)
      elseif expired.err then
        redis.log(redis.LOG_WARNING, 'limit: ' .. hold .. ' is not a hold set, left alone: ' ..
          expired.err)
        expired = {}
      end
      first[j], found = expired, found + #expired
    end
    if found == 0 then
      return 0
    end
    read_counter_set(set)
    local released = 0
    for j = 1, h do
      local hold, expired = KEYS[set.holds + j], first[j]
      while true do
        release_expired_holds(hold, set.entries[j], expired)
        released = released + #expired
        if not all or #expired < 64 then
          break
        end
        expired = redis.call('ZRANGEBYSCORE', hold, '-inf', now, 'LIMIT', '0', '64')
      end
    end
    return released
  end

  -- The record of a reversal: the one in Redis, else (refund only) the original transaction the
  -- caller brought (ARGV[o..o+4]), as consumed (r.fresh: not written yet; `record_original`
  -- writes it once the refund is decided, so that a refused refund writes nothing); nil if
  -- neither. Then the record is prepared (every key it touches read: see prepare).
  local function load_or_original(o, recreate)
    local r = load(KEYS[1])
    if not ARGV[o + 4] then
      if r then
        prepare(KEYS[1], r)
      end
      return r, r ~= nil
    end
    if r then
      local amount = tonumber(ARGV[o + 1])
      local mismatch = (r.fp ~= ARGV[o] and r.fp ~= ARGV[o + 5]) or
        (amount ~= r.amount and amount ~= r.requested)
      if not mismatch then
        prepare(KEYS[1], r)
      end
      return r, true, mismatch
    end
    if not recreate then
      return nil, true
    end
    r = {state = 'consumed', fp = ARGV[o], amount = tonumber(ARGV[o + 1]), counters = '-',
         refunded = 0, count_back = false, refunds = {}, refund_ids = {}, fresh = true}
    if ARGV[o + 3] ~= '' then
      need({KEYS[2]})
      stored_counter_set(KEYS[2], ARGV[o + 3]) -- (read: a collision fails before any write)
      r.counters, r.fields = ARGV[o + 2], ARGV[o + 6]
      prepare(KEYS[1], r, ARGV[o + 3])
    end
    return r, true
  end

  -- Writes the record `load_or_original` made from the original (its counter set first).
  local function record_original(o, r)
    refuse_past_expiry(ARGV[o + 4])
    if r.counters ~= '-' then
      keep_counter_set_until(KEYS[2], ARGV[o + 3], ARGV[o + 4])
    end
    redis.call('SET', KEYS[1], record_text(r), 'PXAT', ARGV[o + 4])
  end

  local function refund()
    local r, _, mismatch = load_or_original(4, true)
    if mismatch then
      return {'mismatch'}
    end
    if not r then
      return {'unknown'}
    end
    local verdict, give =
      reversal_rules.refund(r.state, r.amount, r.refunded, r.refunds[ARGV[3]], ARGV[2])
    if verdict == 'bad_state' then
      return {'bad_state', r.state}
    elseif verdict == 'conflict' then
      return {'conflict', give}
    elseif verdict == 'replay' then
      return {'refunded', string.format('%d', give), string.format('%d', r.refunded),
              string.format('%d', r.amount), '1'}
    elseif verdict == 'too_much' then
      return {'too_much', string.format('%d', give)}
    end
    if r.fresh then
      record_original(4, r)
    end
    local count = 0
    if r.refunded + give == r.amount and not r.count_back then
      count = 1
      r.count_back = true
    end
    give_back(r, count, give)
    r.refunded = r.refunded + give
    r.refunds[ARGV[3]] = ARGV[2] .. ':' .. string.format('%d', give)
    r.refund_ids[#r.refund_ids + 1] = ARGV[3]
    store(KEYS[1], r)
    return {'refunded', string.format('%d', give), string.format('%d', r.refunded),
            string.format('%d', r.amount), '0'}
  end

  local function confirm()
    local r, known, mismatch = load_or_original(4, false)
    if mismatch then
      return {'mismatch'}
    end
    if not r then
      return known and {'expired'} or {'unknown'}
    end
    local held = r.amount
    local verdict, final =
      reversal_rules.confirm(r.state, held, tonumber(ARGV[2]), hold_expiry_of(r), tonumber(ARGV[3]))
    if verdict == 'replay' then
      return {'already', r.state, string.format('%d', r.amount)}
    elseif verdict == 'expired' or verdict == 'bad_state' then
      -- (a share's "bad_state expired" to a confirm its home record made: its hold was lost)
      return {'bad_state', r.state}
    elseif verdict == 'expire' then
      release_reservation(KEYS[1], r, 'expired', 1, held)
      return {'expired'}
    elseif verdict == 'too_much' then
      return {'too_much', string.format('%d', held)}
    end
    give_back(r, 0, held - final)
    drop_holds(r)
    if final < held then
      r.requested = held -- what a retry of the reserve asks for
    end
    r.state, r.amount = 'confirmed', final
    store(KEYS[1], r)
    return {'confirmed', string.format('%d', final), string.format('%d', held - final)}
  end

  -- A record of a reservation whose hold a sweep released (all of it, or some) reads as expired.
  local function released_by_sweep(r)
    return r.state == 'reserved' and r.counters ~= '-' and (not r.held or r.swept)
  end

  local function cancel()
    local r, known, mismatch = load_or_original(5, false)
    if mismatch then
      return {'mismatch'}
    end
    if not r then
      if known then
        return {'already', 'expired'}
      end
      if ARGV[4] == 'probe' then
        return {'unknown'}
      end
      refuse_past_expiry(ARGV[3])
      redis.call('SET', KEYS[1], 'x - 0 -', 'PXAT', ARGV[3])
      return {'tombstone'}
    end
    -- (a hold a sweep released has expiry 0: the cancel records what the sweep did)
    local verdict = reversal_rules.cancel(r.state, hold_expiry_of(r), tonumber(ARGV[2]))
    if verdict == 'expire' then
      release_reservation(KEYS[1], r, 'expired', 1, r.amount)
      return {'already', 'expired'}
    elseif verdict ~= 'cancel' then
      return {verdict == 'replay' and 'already' or 'bad_state', r.state}
    end
    release_reservation(KEYS[1], r, 'cancelled', 1, r.amount)
    return {'cancelled', string.format('%d', r.amount)}
  end

  -- op void: ARGV[2] the expiry (ms) of the tombstone it leaves for an id without a record, so
  -- that a share of the voided transaction that arrives later counts nothing.
  local function void()
    local r = load(KEYS[1])
    if not r then
      refuse_past_expiry(ARGV[2])
      redis.call('SET', KEYS[1], 'v - 0 -', 'PXAT', ARGV[2])
      return {'tombstone'}
    end
    -- (a tombstone's fp is '-', a home record's '')
    if ARGV[3] and r.fp ~= '-' and r.fp ~= '' and
      r.fp .. ':' .. string.format('%d', r.requested or r.amount) ~= ARGV[3] then
      return {'other'}
    end
    local verdict = reversal_rules.void(r.state)
    if verdict == 'replay' then
      return {'already'}
    elseif verdict == 'bad_state' then
      return {'bad_state', r.state}
    end
    prepare(KEYS[1], r)
    if r.state == 'consumed' or r.held or r.counters == '-' then
      give_back(r, r.count_back and 0 or 1, r.amount - r.refunded)
      drop_holds(r)
    end
    r.state, r.count_back = 'voided', true
    store(KEYS[1], r)
    return {'voided'}
  end

  local function inspect()
    local record = KEYS[1]
    local text = redis.pcall('GET', record)
    if not text then
      return {'missing'}
    elseif type(text) == 'table' and string.sub(text.err or '', 1, 9) ~= 'WRONGTYPE' then
      error(text)
    end
    -- (a hash is a home record of an unreleased format, which is not read)
    local r = type(text) == 'string' and parse_record(text)
    local reply = {'record', redis.call('PEXPIRETIME', record), 0}
    local function add(name, value)
      reply[#reply + 1] = name
      reply[#reply + 1] = value
      reply[3] = reply[3] + 1
    end
    if not r or r.fp == '-' then
      return reply -- a tombstone, or a hash
    end
    prepare(record, r, nil, true)
    add('state', released_by_sweep(r) and 'expired' or r.state)
    add('amount', string.format('%d', r.amount))
    add('refunded', string.format('%d', r.refunded))
    if r.state == 'reserved' and not released_by_sweep(r) or r.state == 'pending' and r.hexp then
      add('hexp', string.format('%d', hold_expiry_of(r)))
    end
    if r.denial then
      add('denial', r.denial)
    end
    if r.plan then -- a home record
      add('plan', r.plan)
      if r.begun then
        add('begun', string.format('%d', r.begun))
      end
      if r.open then
        add('open', string.format('%d', r.open))
      end
    end
    add('keys', table.concat(r.listed or {}, '\n'))
    for _, id in ipairs(r.refund_ids) do
      add(id == '' and 'rf' or 'r:' .. id, r.refunds[id])
    end
    return reply
  end

  made_reversals = {release_all_expired = release_all_expired, refund = refund, confirm = confirm,
                    cancel = cancel, void = void, inspect = inspect}
  return made_reversals
