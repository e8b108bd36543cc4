-- journal: the persister's side of one wallet journal partition (a stream with a
-- consumer group). Reading claims events whose consumer went silent; acknowledging
-- clears their pending entries in the same step.
--
-- op read: KEYS[1] journal stream
--   ARGV[2] group, ARGV[3] consumer, ARGV[4] max events, ARGV[5] claim events idle for (ms)
--   Creates the group (from the start of the stream) if missing. Takes first events
--   other consumers left idle too long (XAUTOCLAIM), then new ones (XREADGROUP >).
--   Reply: flat list: stream id, then the event's field/value array, for each event.
-- op ack: KEYS[1] journal stream, KEYS[2] the partition's pending zset, KEYS[3..] the users'
--   pending zsets; ARGV[2] group, then per event: stream id, key number of the user's
--   pending zset (in KEYS), user, order
--   Reply: number of events acknowledged now (an event acknowledged before counts 0).

local op = ARGV[1]
local journal = KEYS[1]

if op == 'read' then
  local group, consumer, max = ARGV[2], ARGV[3], tonumber(ARGV[4])
  local ok = pcall(redis.call, 'XGROUP', 'CREATE', journal, group, '0', 'MKSTREAM')
  local _ = ok -- BUSYGROUP: the group exists already
  local events = {}
  local claimed = redis.call('XAUTOCLAIM', journal, group, consumer, ARGV[5], '0-0', 'COUNT', max)
  for _, entry in ipairs(claimed[2]) do
    if entry[2] then -- a claimed id whose entry was trimmed away has no fields
      events[#events + 1] = entry[1]
      events[#events + 1] = entry[2]
    end
  end
  if #events / 2 < max then
    local fresh = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', max - #events / 2,
      'STREAMS', journal, '>')
    if fresh then
      for _, entry in ipairs(fresh[1][2]) do
        events[#events + 1] = entry[1]
        events[#events + 1] = entry[2]
      end
    end
  end
  return events
end

if op == 'ack' then
  local pending, group = KEYS[2], ARGV[2]
  local acknowledged = 0
  for i = 3, #ARGV, 4 do
    acknowledged = acknowledged + redis.call('XACK', journal, group, ARGV[i])
    redis.call('ZREM', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 3])
    redis.call('ZREM', pending, ARGV[i + 2] .. ':' .. ARGV[i + 3])
  end
  return acknowledged
end

return redis.error_reply('journal: unknown op ' .. tostring(op))
