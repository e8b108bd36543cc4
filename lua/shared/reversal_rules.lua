-- reversal_rules: what a confirm, cancel, refund or void of a limits transaction does, decided
-- once for both records that keep a transaction: lua/limit.lua's (standalone Redis, and each
-- slot's share on a Redis Cluster) and lua/transaction_home.lua's home record. A script gets this
-- text where a line of it includes this file, when the scripts are embedded
-- (cmake/LimitcounterEmbedLua.cmake); it defines one local, `reversal_rules`.
--
-- Pure: the rules read no key and write none. The script reads its record, asks the rule, then
-- writes what the verdict says in its own record format and answers in its own protocol. States
-- are named in full (consumed, reserved, confirmed, cancelled, expired, voided, denied, as in
-- src/limit_counter/transition_table.hpp); amounts are integers, times ms.
--
-- confirm(state, held, asked, hold_expiry, now): a confirm of `asked` (-1: all that is held) of a
--   transaction in `state` that holds `held`, whose hold ends at `hold_expiry` (0: no hold is
--   left, a sweep released it), at `now` (0: whatever the time, a share following its home).
--   Verdicts: 'confirm', final | 'replay' (confirmed before) | 'expire' (its hold ran out:
--   record it expired, give back what it still holds) | 'expired' (recorded expired before)
--   | 'bad_state' | 'too_much' (more than is held).
-- cancel(state, hold_expiry, now): 'cancel' | 'expire' (as confirm's) | 'replay' (cancelled,
--   expired or voided before: nothing to give back) | 'bad_state'.
-- refund(state, amount, refunded, earlier, asked): a refund of `asked` (text: a refund id is
--   tied to the text it was first asked with; '-1' is all that is left) under a refund id whose
--   earlier refund is `earlier` ("<asked>:<given>", nil for none), of a transaction of `amount`
--   of which `refunded` was given back.
--   Verdicts: 'refund', give | 'replay', given (the id's first refund) | 'conflict', the text
--   the id was first asked with | 'too_much', refundable | 'bad_state'.
-- void(state): the void of one share of a transaction another share denied or the sweep
--   abandoned: 'void' | 'replay' (voided or denied before) | 'bad_state'.

local reversal_rules = {}

function reversal_rules.confirm(state, held, asked, hold_expiry, now)
  if state == 'confirmed' then
    return 'replay'
  elseif state == 'expired' then
    return 'expired'
  elseif state ~= 'reserved' then
    return 'bad_state'
  elseif hold_expiry <= now then
    return 'expire'
  elseif asked < 0 then
    return 'confirm', held
  elseif asked > held then
    return 'too_much'
  end
  return 'confirm', asked
end

function reversal_rules.cancel(state, hold_expiry, now)
  if state == 'cancelled' or state == 'expired' or state == 'voided' then
    return 'replay'
  elseif state ~= 'reserved' then
    return 'bad_state'
  elseif hold_expiry <= now then
    return 'expire'
  end
  return 'cancel'
end

function reversal_rules.refund(state, amount, refunded, earlier, asked)
  if state ~= 'consumed' and state ~= 'confirmed' then
    return 'bad_state'
  end
  if earlier then
    local first_asked, given = string.match(earlier, '^(-?%d+):(%d+)$')
    if first_asked ~= asked then
      return 'conflict', first_asked
    end
    return 'replay', tonumber(given)
  end
  local refundable, give = amount - refunded, tonumber(asked)
  if give < 0 then
    return 'refund', refundable
  elseif give > refundable then
    return 'too_much', refundable
  end
  return 'refund', give
end

function reversal_rules.void(state)
  if state == 'voided' or state == 'denied' then
    return 'replay'
  elseif state ~= 'consumed' and state ~= 'reserved' then
    return 'bad_state'
  end
  return 'void'
end
