-- journal: the persister's side of one wallet journal partition (a stream with consumer
-- groups). Reading hands out each user's events in stream (= version) order: an event is
-- held back while an earlier event of its user is out with a consumer or waits for a retry.
-- Acknowledging trims what every group has acknowledged; only the persisting group's
-- acknowledgement means persisted (clears pending entries and the high-water count). A
-- failed event is retried after the claim idle time and parked in the group's dead-letter
-- stream after max attempts.
--
-- op read: KEYS[1] journal stream, KEYS[2] the group's held set (ids read from the stream
--   but held back, never handed out)
--   ARGV[2] group, ARGV[3] consumer, ARGV[4] max events, ARGV[5] claim idle (ms)
--   Creates the group (from the start of the stream) if missing. Walks the group's pending
--   entries in id order (at most max(1000, 10 x max)): an entry idle for the claim time or
--   held is claimed and handed out unless an earlier entry of its user is not; then reads
--   new entries (only when the whole pending list was seen), holding back those of users
--   with an earlier entry not handed out.
--   Reply: flat list: stream id, then the event's field/value array, for each event.
-- op ack: KEYS[1] journal stream, KEYS[2] the partition's pending zset, KEYS[3] the group's
--   failures hash, KEYS[4..] the users' pending zsets and high-water hashes (wallet.lua);
--   ARGV[2] group, ARGV[3] the persisting group, then per event: stream id, key numbers (in
--   KEYS) of the user's pending zset and high-water hash, user, order
--   Another group only acknowledges: its reading is no persistence. The persisting group also
--   removes the order's pending entries and, for each event acknowledged now (or a parked one
--   acknowledged after its parking), takes one from the user's high-water count, deleting the
--   hash when none is left: then every event up to its version is persisted. A parked one
--   also takes one from the hash's parked count (the field goes at 0).
--   Reply: number of events acknowledged now (an event acknowledged before counts 0).
-- op fail: KEYS[1] journal stream, KEYS[2] the group's failures hash (stream id -> failed
--   attempts, or "parked"), KEYS[3] the group's dead-letter stream, KEYS[4..] the users'
--   high-water hashes (wallet.lua); ARGV[2] group, ARGV[3] the persisting group, ARGV[4]
--   consumer, ARGV[5] max attempts (>= 1), ARGV[6] error text, then per event: stream id, key
--   number (in KEYS, >= 4) of its user's high-water hash
--   Counts a failed attempt of each event still pending and restarts its claim idle time
--   (the retry back-off); at max attempts the event is copied to the dead-letter stream
--   (its fields, then stream_id, group, attempts, error), acknowledged and marked "parked"
--   in the failures hash. Its pending entries and its part of the high-water count stay: it is
--   still not persisted. The persisting group's parking also adds one to the high-water hash's
--   parked count: the user's later events go on, so the system of record may get a version
--   newer than the parked event without it, and wallet.lua's load refuses every snapshot
--   while the count is above 0. Acknowledging it again (op ack, once the host wrote it) counts.
--   Reply: number of events parked now.
-- op hold: KEYS[1] journal stream, KEYS[2] the group's held set; ARGV[2] group, ARGV[3..]
--   stream ids read but not handed out (a batch's later events of a user whose event
--   failed): those still pending join the held set, so they go as soon as the failed event
--   is handed out again or parked.
--   Reply: number of events held.
-- op lag: KEYS[1] journal stream; ARGV[2] group. Reads only.
--   Reply: {unread, pending}: the group's `lag` and `pending` of XINFO GROUPS (unread -1 when
--   Redis cannot tell); {XLEN, 0} if the group does not exist yet (the first read creates it
--   from the start of the stream); {0, 0} if the stream does not exist.
-- Trimming (after ack and fail): XTRIM MINID to the oldest entry some group still needs:
--   its smallest pending id, else the entry after its last delivered id.

local op = ARGV[1]
local journal = KEYS[1]

-- Stream ids "<ms>-<seq>" as two numbers (both below 2^53 for ids made by XADD *).
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function before(a, b)
  local a_ms, a_seq = parse(a)
  local b_ms, b_seq = parse(b)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

-- The stream's consumer groups (XINFO GROUPS), each as a table of its fields.
local function groups()
  local found = {}
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', journal)) do
    local group = {}
    for i = 1, #info, 2 do
      group[info[i]] = info[i + 1]
    end
    found[#found + 1] = group
  end
  return found
end

local function trim()
  local oldest_needed = nil
  for _, group in ipairs(groups()) do
    local needed
    if tonumber(group['pending']) > 0 then
      needed = redis.call('XPENDING', journal, group['name'])[2]
    else
      local ms, seq = parse(group['last-delivered-id'])
      needed = string.format('%d-%d', ms, seq + 1)
    end
    if oldest_needed == nil or before(needed, oldest_needed) then
      oldest_needed = needed
    end
  end
  if oldest_needed then
    redis.call('XTRIM', journal, 'MINID', oldest_needed)
  end
end

local function is_pending(group, id)
  return #redis.call('XPENDING', journal, group, id, id, 1) == 1
end

local function user_of(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'user' then
      return fields[i + 1]
    end
  end
  return ''
end

if op == 'read' then
  local held = KEYS[2]
  local group, consumer, max, claim_idle = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  local ok = pcall(redis.call, 'XGROUP', 'CREATE', journal, group, '0', 'MKSTREAM')
  local _ = ok -- BUSYGROUP: the group exists already
  local events = {}
  local waiting = {} -- users with an earlier event not handed out by this read
  local scan = math.max(1000, 10 * max)
  local pending = redis.call('XPENDING', journal, group, '-', '+', scan)
  for _, entry in ipairs(pending) do
    local id = entry[1]
    local found = redis.call('XRANGE', journal, id, id)
    if #found == 0 then -- deleted from the stream by someone else: nothing to deliver
      redis.call('XACK', journal, group, id)
      redis.call('SREM', held, id)
    else
      local user = user_of(found[1][2])
      local ready = entry[3] >= claim_idle or redis.call('SISMEMBER', held, id) == 1
      if waiting[user] or not ready or #events / 2 >= max then
        waiting[user] = true
      else
        redis.call('XCLAIM', journal, group, consumer, 0, id)
        redis.call('SREM', held, id)
        events[#events + 1] = id
        events[#events + 1] = found[1][2]
      end
    end
  end
  -- New entries come after every pending one: read them only if none was left unseen.
  if #pending < scan and #events / 2 < max then
    local fresh = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', max - #events / 2,
      'STREAMS', journal, '>')
    if fresh then
      for _, entry in ipairs(fresh[1][2]) do
        if waiting[user_of(entry[2])] then
          redis.call('SADD', held, entry[1])
        else
          events[#events + 1] = entry[1]
          events[#events + 1] = entry[2]
        end
      end
    end
  end
  return events
end

if op == 'ack' then
  local pending, failures, group = KEYS[2], KEYS[3], ARGV[2]
  local persists = group == ARGV[3]
  local acknowledged = 0
  for i = 4, #ARGV, 5 do
    local now = redis.call('XACK', journal, group, ARGV[i])
    acknowledged = acknowledged + now
    local parked = redis.call('HGET', failures, ARGV[i]) == 'parked'
    redis.call('HDEL', failures, ARGV[i])
    if persists then
      redis.call('ZREM', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 4])
      redis.call('ZREM', pending, ARGV[i + 3] .. ':' .. ARGV[i + 4])
      local high_water = KEYS[tonumber(ARGV[i + 2])]
      if parked and redis.call('HINCRBY', high_water, 'parked', -1) <= 0 then
        redis.call('HDEL', high_water, 'parked')
      end
      if (now == 1 or parked) and redis.call('HINCRBY', high_water, 'events', -1) <= 0 then
        redis.call('DEL', high_water)
      end
    end
  end
  trim()
  return acknowledged
end

if op == 'fail' then
  local failures, dead = KEYS[2], KEYS[3]
  local group, consumer, max_attempts, error_text = ARGV[2], ARGV[4], tonumber(ARGV[5]), ARGV[6]
  local persists = group == ARGV[3]
  if not max_attempts or max_attempts < 1 then
    return redis.error_reply('journal: max attempts ' .. tostring(ARGV[5]) .. ' must be at least 1')
  end
  if #ARGV % 2 ~= 0 then
    return redis.error_reply('journal: fail takes a stream id and a key number per event')
  end
  for i = 8, #ARGV, 2 do
    local number = tonumber(ARGV[i])
    if not number or number < 4 or not KEYS[number] then
      return redis.error_reply('journal: high-water key number ' .. ARGV[i] .. ' is not in KEYS[4..]')
    end
  end
  local parked = 0
  for i = 7, #ARGV, 2 do
    local id = ARGV[i]
    if is_pending(group, id) then
      local attempts = redis.call('HINCRBY', failures, id, 1)
      local found = redis.call('XRANGE', journal, id, id)
      if attempts >= max_attempts and #found == 1 then
        local fields = found[1][2]
        for _, extra in ipairs({'stream_id', id, 'group', group, 'attempts', attempts, 'error', error_text}) do
          fields[#fields + 1] = extra
        end
        redis.call('XADD', dead, '*', unpack(fields))
        redis.call('XACK', journal, group, id)
        redis.call('HSET', failures, id, 'parked')
        if persists then
          redis.call('HINCRBY', KEYS[tonumber(ARGV[i + 1])], 'parked', 1)
        end
        parked = parked + 1
      else
        -- back to this consumer with idle 0: the next attempt waits the claim idle time
        redis.call('XCLAIM', journal, group, consumer, 0, id, 'JUSTID')
      end
    end
  end
  trim()
  return parked
end

if op == 'hold' then
  local count = 0
  for i = 3, #ARGV do
    count = count + (is_pending(ARGV[2], ARGV[i]) and redis.call('SADD', KEYS[2], ARGV[i]) or 0)
  end
  return count
end

if op == 'lag' then
  if redis.call('EXISTS', journal) == 0 then
    return {0, 0}
  end
  for _, group in ipairs(groups()) do
    if group['name'] == ARGV[2] then
      -- lag is a null (false here) when an XDEL left a gap Redis cannot count over
      return {group['lag'] or -1, group['pending']}
    end
  end
  return {redis.call('XLEN', journal), 0}
end

return redis.error_reply('journal: unknown op ' .. tostring(op))
