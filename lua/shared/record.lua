-- record: the one format of a limits transaction's record, read. Every record of a transaction
-- has it: lua/limit.lua's (standalone Redis, and each slot's share on a Redis Cluster) and
-- lua/transaction_home.lua's home record on a cluster, which adds words of its own. A script
-- gets this text where a line of it includes this file (cmake/LimitcounterEmbedLua.cmake); it
-- defines the locals state_names, words, base36 and parse_record. Writing a record is
-- shared/record_edit.lua's (which a consume does not need).
--
-- A record is a string, words separated by spaces:
--   <state> <fp> <amount> <counter set> [<fields>] [<hold expiry>] [^<reserved>] [!]
--   [<refund>]... [<home word>]...
--   state: one letter (state_names): p pending (a home's, between begin and finish),
--   c consumed, d denied, r reserved, f confirmed, x cancelled, e expired, v voided;
--   fp: the client's digest of operation and attributes ('-' for a tombstone);
--   amount: the transaction's (a confirmed one's final amount; ^<reserved> what it reserved,
--   when that differs); counter set: the name of the counter set of the counters it moved, '-'
--   for none (then no fields word; a home record has none); fields: the counters' hash fields,
--   ':'-joined; hold expiry (ms, base 36): a reservation's without counters (a home's, and a
--   share's that moved none), '-' for none (a pending consume's home); '!': the count was given
--   back too; a refund: G:<id>:<given> (asked = given), '*' (the full refund: id '', asked -1,
--   it gave all that was left), else R:<id>:<asked>:<given>, in the order they were made.
--   A denial: d <fp> <amount> <rule> <metric> <limit> <used> [<home word>]... (metric: c count
--   | a amount | s single_amount, else the metric's name).
--   Home words (lua/transaction_home.lua): P:{<tag>}... the plan, its share tags each in braces
--   as in a key (a tag holds no brace, no space); B:<begin> (ms, base 36) while pending; O:<open> (ms, base 36, '-' before it
--   once closed): the last change the shares may not all have followed.

local state_names = {p = 'pending', c = 'consumed', d = 'denied', r = 'reserved', f = 'confirmed',
                     x = 'cancelled', e = 'expired', v = 'voided'}

local function words(text)
  local parts = {}
  for part in string.gmatch(text, '%S+') do
    parts[#parts + 1] = part
  end
  return parts
end

-- `n` (an integer, 0 <= n < 2^53) in base 36: 8 digits for a time in ms, where decimal takes 13.
local function base36(n)
  local digits = {}
  repeat
    local digit = n % 36
    digits[#digits + 1] = string.sub('0123456789abcdefghijklmnopqrstuvwxyz', digit + 1, digit + 1)
    n = (n - digit) / 36
  until n == 0
  return string.reverse(table.concat(digits))
end

-- Record `text` as a table: state (a name), fp, amount, counters, fields, hexp, requested,
-- refunded, count_back, refunds (id -> "<asked>:<given>"), refund_ids (their order), denial
-- ("<rule> <metric name> <limit> <used>"), and a home's plan (tags, newline-joined), begun and
-- open (numbers). A word missing from a hand-edited record reads as '?', never an error (a batch
-- may meet it after an earlier transaction's writes).
local function parse_record(text)
  local w = words(text)
  local r = {state = state_names[w[1]] or '?', fp = w[2] or '?', amount = tonumber(w[3]),
             refunded = 0, count_back = false, refunds = {}, refund_ids = {}}
  local i
  if w[1] == 'd' then
    local metric = ({c = 'count', a = 'amount', s = 'single_amount'})[w[5]] or w[5]
    r.denial = (w[4] or '?') .. ' ' .. (metric or '?') .. ' ' .. (w[6] or '?') .. ' ' ..
      (w[7] or '?')
    i = 8
  else
    r.counters = w[4]
    i = 5
    if r.counters ~= '-' then
      r.fields = w[5]
      i = 6
    elseif w[1] == 'r' or w[1] == 'p' then -- (with counters, its hold sets' scores keep it)
      r.hexp = tonumber(w[i], 36)
      i = i + 1
    end
  end
  local full_refund = false
  for j = i, #w do
    local token = w[j]
    local head = string.sub(token, 1, 1)
    local id, asked, given
    if head == '^' then
      r.requested = tonumber(string.sub(token, 2))
    elseif head == '!' then
      r.count_back = true
    elseif head == '*' then
      full_refund = true
      r.refund_ids[#r.refund_ids + 1] = ''
    elseif head == 'G' then
      id, given = string.match(token, '^G:(.*):(%d+)$')
      asked = given
    elseif head == 'R' then
      id, asked, given = string.match(token, '^R:(.*):(-?%d+):(%d+)$')
    elseif head == 'P' then
      r.plan = string.gsub(string.sub(token, 4, -2), '}{', '\n')
    elseif head == 'B' then
      r.begun = tonumber(string.sub(token, 3), 36)
    elseif head == 'O' then
      r.open = string.sub(token, 3, 3) == '-' and -tonumber(string.sub(token, 4), 36) or
        tonumber(string.sub(token, 3), 36)
    end -- ('=<refunded>': a record of an earlier version; the same as the sum below)
    if id then
      r.refunds[id] = asked .. ':' .. given
      r.refund_ids[#r.refund_ids + 1] = id
      r.refunded = r.refunded + tonumber(given)
    end
  end
  if full_refund then -- it gave all that was left: every refund after it gave nothing
    r.refunds[''] = '-1:' .. string.format('%d', (r.amount or 0) - r.refunded)
    r.refunded = r.amount
  end
  return r
end
