-- record_edit: the one format of a limits transaction's record (shared/record.lua), written. A
-- script gets this text where a line of it includes this file, after shared/record.lua; it
-- defines the local record_text.

-- The inverse of state_names. (Written out: a table a call builds costs about as much as one of
-- its Redis commands.)
local state_codes = {pending = 'p', consumed = 'c', denied = 'd', reserved = 'r',
                     confirmed = 'f', cancelled = 'x', expired = 'e', voided = 'v'}
local metric_codes = {count = 'c', amount = 'a', single_amount = 's'}

-- How long (ms) a record that a confirm, cancel, refund or void changed is kept at least: a
-- resend of that call (its reply lost as the record's replay horizon ended) then finds it and
-- replays, where the original transaction the resend brings would make the record anew and
-- give back again. Ten minutes: past any resend budget (RetryOptions::budget, 1 s by default).
local reversal_kept_ms = 600000

-- Keeps record `key` reversal_kept_ms more at least (never less than it has: GT), and then its
-- counter set `set_key` (nil: none) an hour (the clocks of other callers) past it, as every
-- decision's set outlives its records. (Relative times: no clock read.)
local function keep_after_reversal(key, set_key)
  if redis.call('PEXPIRE', key, reversal_kept_ms, 'GT') == 1 and set_key then
    redis.call('PEXPIRE', set_key, reversal_kept_ms + 3600000, 'GT')
  end
end

-- The text of record `r` (a table as parse_record makes).
local function record_text(r)
  local w = {state_codes[r.state], r.fp, string.format('%d', r.amount)}
  if r.state == 'denied' then
    local rule, metric, limit, used = string.match(r.denial or '', '^(%S+) (%S+) (%S+) (%S+)$')
    w[4], w[5], w[6], w[7] = rule or '?', metric_codes[metric] or metric or '?', limit or '?',
      used or '?'
  else
    w[4] = r.counters
    if r.fields then
      w[#w + 1] = r.fields
    elseif r.state == 'reserved' or r.state == 'pending' then
      w[#w + 1] = r.hexp and base36(r.hexp) or '-'
    end
  end
  if r.requested then
    w[#w + 1] = '^' .. string.format('%d', r.requested)
  end
  if r.count_back then
    w[#w + 1] = '!'
  end
  for _, id in ipairs(r.refund_ids) do
    local value = r.refunds[id]
    local asked, given = string.match(value, '^(-?%d+):(%d+)$')
    if id == '' and asked == '-1' then
      w[#w + 1] = '*'
    elseif asked == given then
      w[#w + 1] = 'G:' .. id .. ':' .. given
    else
      w[#w + 1] = 'R:' .. id .. ':' .. value
    end
  end
  if r.plan then
    w[#w + 1] = 'P:{' .. string.gsub(r.plan, '\n', '}{') .. '}'
  end
  if r.begun then
    w[#w + 1] = 'B:' .. base36(r.begun)
  end
  if r.open then
    w[#w + 1] = 'O:' .. (r.open < 0 and '-' .. base36(-r.open) or base36(r.open))
  end
  return table.concat(w, ' ')
end
