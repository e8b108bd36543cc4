-- limit: atomic check-and-consume of every rule that matches one transaction, and the
-- operations that give quota back (refund, confirm, cancel), for one group of counters that
-- share a slot. One call decides; nothing is half done: every check runs before the first
-- write. One call may decide several transactions (op batch), each on its own.
--
-- Transaction record (string KEYS[1], the format of lua/shared/record.lua, which a cluster's home
-- record shares), kept for the replay horizon (ARGV record lifetime) whatever the windows (a
-- reservation's too: its hold set member says what to release when the record is gone); a
-- reversal keeps the record it changes ten minutes more at least, so that a resend of it
-- replays, and then its counter set an hour past it (keep_after_reversal). This
-- script writes the states c, r, f, x, e, v and d; fp '-' is a tombstone: a cancel that came
-- before its reserve ("x - 0 -") or a void before its share ("v - 0 -"). A retry must bring the
-- same fp and amount (the reserved amount, ^<reserved>, of a reservation confirmed for less).
-- Fields: the counters' hash fields (dimension values, which hold no ':' and no space), each
-- distinct one once; a record with counters keeps no hold expiry (its members' score in the
-- hold sets keeps it). A record with a plan (P:) is a home record: read as pending, never
-- written here.
-- Counter set (string <counter-set prefix><name>): which counters a transaction moved but their
--   fields, so that every transaction under the same rules and windows shares one:
--   "<c> <expiry>\n" then c lines "<key> <i>" (the counter's field is the record's i-th field),
--   then c lines: counter j's hold set (its window's, "<key>:holds"). Its name is the client's
--   digest of that text (48 bits; a name another text has is refused before anything is
--   written, and records of an earlier version may name a set "<name>.<n>", or have a text
--   without its expiry). It expires at its text's expiry (ms): the first of its windows' ends,
--   their grace, the replay horizon and an hour (the clocks of other callers). A decision writes
--   its record (kept the replay horizon from then, by the server's clock) only while all its
--   windows are open (within their grace by the server's clock too, or its counters' keys would
--   expire at once), so the set outlives every record a decision writes naming it, and a
--   decision never extends it (a reservation's hold set members say what to release without
--   it); the record a reversal makes from an original transaction (its windows perhaps over)
--   extends it to its own expiry and an hour, if that is later.
-- Counter field value: "<count>:<amount>", integers below 2^53. A call reads each counter field
--   it needs once and writes each one it moved once, when it ends. A call that fails writes
--   nothing: every read and check that can fail comes before its first write.
-- Hold set (zset, one per counter window hash, "<key>:holds"): a reservation has one member in
--   the hold set of each counter it moved, "<record key> <amount> <field>" (what releasing that
--   hold takes from that counter alone), score = hold expiry in ms; the set lives as long as its
--   window's key. Releasing an expired member gives one count and its amount back to its own
--   window's field and removes it, and leaves the record as it is: a reservation's counters
--   whose members are gone were given back; one with none left, or with the member of a counter
--   whose key is still there gone (a sweep released part of it), reads as expired, and a later
--   cancel or confirm records it so, giving back only what is still held, whatever its `now`.
--
-- Keys: every key a call touches is in its KEYS (Redis's migration guard, TRYAGAIN/ASK while a
--   slot is half moved, protects only declared keys). A decision declares each of its counters'
--   hold sets, and releasing an expired member there touches only that counter. A reversal finds
--   its keys in its record and counter set: one it was not given ends the call with
--   {"needs", key...}, nothing written; the client sends it again with those keys.
--
-- ARGV[1] = op.
--
-- op consume | reserve | check | batch (consumes): n transactions under P rule programs and S
--   counter sets.
--   ARGV[2] n, [3] now (ms), [4] record lifetime (ms: how long a record this call writes is
--   kept, by the server's clock, so that no client's clock can make one that is gone at once),
--   [5] hold expiry (ms; reserve only), [6] P;
--   then P programs (the rules a transaction matched; transactions matching the same rules share
--   one, as long as their windows are the same), each two arguments: a MessagePack array of
--   integers (one argument that cmsgpack decodes in C, not a string per number):
--   h (hold sets), c (counters), the c counters' key expiries (ms, as text: they go to
--   PEXPIREAT, and Redis formats a number argument with snprintf), the c counters' field
--   numbers (counter j's field is the transaction's f_j-th), r, then r rules of 3 (counter
--   number 1..c, max count, max amount; -1: no such limit; counter number 0 is a
--   per-transaction rule: its max amount limits the transaction's own amount, metric
--   "single_amount"); then the rules' names, space-separated (a denial keeps its rule's);
--   then S, then S counter sets (which counters a transaction moves; transactions under the
--   same program whose counters are in the same keys share one, sent once): program number,
--   counter set name ('' for a check, which keeps none), the counter set's text;
--   then n transactions: counter set number (only when S > 1; else the one set), fingerprint,
--   amount, fields (as its record keeps them: each distinct field once, ':'-joined; '' without
--   counters); op batch sends them, in that order, as one argument: a MessagePack array of
--   strings (Redis makes an object of each argument it reads; cmsgpack makes only the strings).
--   KEYS: the n transactions' records, then per counter set: its key (with no counters, any key
--   of the call's slot), its c counter window hashes, its h = c hold sets (the last c lines of
--   the counter set's text, counter j's window's hold set j).
--   Reply: one flat array of integers (strings only in a replay), each transaction's reply
--   after the one before (a batch's n, in order; a reply's length follows from its code and c):
--          {code, c, then per counter: count, amount, then the code's extras} with the
--          counters' totals after the write (allowed) or as found (denied, check, replay).
--          code 1 allowed | 2 denied (extras: rule number, metric 1 count | 2 amount |
--          3 single_amount) | 3 would_allow | 4 would_deny (extras as denied) (check) |
--          5 replay (extras: the first decision's state, its denial "<rule> <metric> <limit>
--          <used>" or ""); without c and totals: {6} conflict (a different fingerprint or
--          amount) | {7} cancelled (an id cancelled before it was reserved) | {8, counter
--          number} overflow (a counter total that would reach 2^53; nothing written).
--   Expired holds are released first by reserve (up to 64 per set); by consume and reserve, all
--   of them before a denial is final (then the counters are read and the rules decided again:
--   an expired hold never denies); never by check. When several sets are sent, each is read
--   (and checked) before the first record is written.
--
-- op one: a host's lone consume (one transaction, program and counter set), without the arguments
--   that say so: ARGV[2] now, [3] record lifetime, [4] the program, [5] its rules' names, [6]
--   the counter set's name, [7] its text, [8] fingerprint, [9] amount, [10] fields. KEYS and
--   reply as op consume's. (Each argument costs Redis about 1,000 instructions a call.)
--
-- The reversals take KEYS[1] the record, then the keys it touches: its counter set (in its slot,
-- counter_set_prefix), the set's counters and hold sets (else {"needs", key...}, see Keys).
-- A refund, confirm or cancel of an id whose record is gone (past its replay horizon) may bring
-- the original transaction (ARGV[o..o+6]: the fingerprint of its consume, its amount, counter
-- set name, counter set text, record expiry (ms), the fingerprint of its reserve, its fields as
-- a record keeps them), with KEYS[2] its counter set (and the set's keys after it): the refund
-- then records it as consumed and goes on; a confirm answers
-- "expired" and a cancel "already expired" (a reservation's hold never outlives its record).
-- While the record lives it decides, and an original it was not decided for (other attributes,
-- or an amount neither consumed nor reserved) is refused: {"mismatch"}.
-- op refund:  ARGV[2] amount (-1 = all that is left), ARGV[3] refund id ('' = the full refund),
--   o = 4. Idempotent by refund id: the same id again replays, with another amount it is a
--   conflict.
--   Reply: {"refunded", amount given back (by the first call of this id), refunded in total,
--           amount, replayed "0" | "1"}
--          | {"unknown"} | {"bad_state", state} | {"too_much", refundable}
--          | {"conflict", the amount the id was first used with}
-- op confirm: ARGV[2] final amount (-1 = all held), ARGV[3] now (ms), o = 4
--   Reply: {"confirmed", final amount, released amount} | {"already", state, amount}
--          | {"unknown"} | {"expired"} | {"bad_state", state} | {"too_much", held}
-- op cancel:  ARGV[2] now (ms), ARGV[3] expiry of a tombstone (ms), ARGV[4] "probe" to write no
--   tombstone for an unknown id (a cluster's client probes every record the id may have before
--   it writes tombstones), o = 5
--   Reply: {"cancelled", released amount} | {"already", state} (cancelled, expired or voided
--          before, or its hold ran out before now: then recorded expired, what it held given
--          back)
--          | {"tombstone"} | {"bad_state", state} | {"unknown"} (probe only)
-- op void:    (record of one slot's share of a transaction that another slot denied, or that
--   the sweep abandoned) ARGV[2] expiry (ms) of a tombstone, ARGV[3] the transaction's
--   fingerprint and amount as its home record keeps them, "<fp>:<amount>" (the amount it began
--   with; absent from an earlier version's client: any).
--   Gives back what this share took and marks it voided: its replays then report the state.
--   A share without a record gets a tombstone "v - 0 -" until ARGV[2]: its decision arriving
--   later replays "voided" and counts nothing. A record of another fingerprint or amount is
--   another transaction's (its id used again past the horizon while this share outlived its
--   home record): {"other"}, nothing written.
--   Reply: {"voided"} | {"already"} | {"tombstone"} | {"other"} | {"bad_state", state}
-- op inspect: KEYS[1] a transaction's record of any kind (this script's, a home record of
--   lua/transaction_home.lua); reads only, for operators.
--   Reply: {"missing"} | {"record", expiry (unix ms, -1 for none), n, then n field/value pairs}:
--   state, amount, refunded, hexp (a reservation's, or a pending one's), denial, a home
--   record's plan (its share tags, a line each), begun and open (ms; open negative once closed),
--   keys (the counters it moved, "<key> <field>" a line) and r:<refund id> (rf: the full
--   refund) = "<asked>:<given>" in the order they were made; no field of a tombstone or of a
--   hash (a home record of an unreleased format).

-- (Locals of the globals used per transaction: an upvalue is cheaper to reach than a global,
-- measured ~0.9 % of a 1-rule batch's server instructions: KEYS, ARGV, redis and string are
-- such locals, which the build declares, see cmake/LimitcounterEmbedLua.cmake.)
-- This chunk's definitions run once when Redis loads it as a library (FCALL) and at every call
-- by EVALSHA; main() runs per call. So a local of the chunk that a call changes is set anew in
-- main(), never left from the call before; and the chunk's own statements use no global (a
-- library's chunk sees only `redis.register_function` and `redis.log`).
local op
local max_exact = 9007199254740991 -- 2^53 - 1: the largest integer a Lua number holds exactly

-- Counter fields are read once and written once a call, however many of its transactions
-- move them (a batch's shared merchant or channel counters): `counters` keeps what this call
-- read or wrote, and flush_counters writes what changed (an HSET of up to 256 fields at a time
-- per key) when the call ends; a call that fails drops them unwritten (main).
-- counters[key] = {key = key, fields = {field -> {count, amount, changed}}, expiry = ms or
-- nil}; counter_keys: the keys in the order first met. Both nil until the call's first counter
-- (a lone consume keeps none: consume_alone).
local counters, counter_keys

local function counter_entry(key)
  if not counters then
    counters, counter_keys = {}, {}
  end
  local entry = counters[key]
  if not entry then
    entry = {key = key, fields = {}}
    counters[key] = entry
    counter_keys[#counter_keys + 1] = key
  end
  return entry
end

-- A counter field's value (as HGET answers it: false for none) as its count and amount. (`text
-- + 0` converts numeric text as tonumber does, with one strtod where tonumber takes two: this
-- runs per counter read. Text that is not a number, which only a hand edit leaves, raises an
-- error here, where tonumber's nil failed later.)
local function counter_totals(value)
  if not value then
    return 0, 0
  end
  local colon = string.find(value, ':', 1, true) -- (cheaper than a pattern, per counter)
  return string.sub(value, 1, colon - 1) + 0, string.sub(value, colon + 1) + 0
end

-- The same as a cache cell: {count, amount, changed}.
local function parse_counter(value)
  local count, amount = counter_totals(value)
  return {count, amount, false}
end

-- A counter field's value (see the contract).
local counter_format = '%d:%d'
local function counter_value(count, amount)
  return string.format(counter_format, count, amount)
end

-- Fields per HSET: unpack's limit is a few thousand values (a denied consume may release
-- thousands of expired holds of one hash at once).
local flush_chunk = 256

-- HSET's arguments, reused by every key and, in a library, every call (its chunk's tables
-- outlive a call): entries 1..m are set before a call of m.
local flush_args = {}

local function flush_counters()
  local call, args = redis.call, flush_args
  for k = 1, counter_keys and #counter_keys or 0 do
    local key = counter_keys[k]
    local entry = counters[key]
    local m, created = 1, 0
    args[1] = key
    for field, cell in pairs(entry.fields) do
      if cell and cell[3] then -- (false: asked by read_ahead, never read)
        args[m + 1], args[m + 2] = field, counter_value(cell[1], cell[2])
        m = m + 2
        if m > 2 * flush_chunk then
          created = created + call('HSET', unpack(args, 1, m))
          m = 1
        end
      end
    end
    if m > 1 then
      created = created + call('HSET', unpack(args, 1, m))
    end
    -- A new field may be a new key: only then can the key lack its expiry.
    if created > 0 and entry.expiry then
      call('PEXPIREAT', key, entry.expiry, 'NX')
    end
  end
end

--#include shared/record.lua

-- The fields of a record's fields word (one field: the word itself).
local function split_fields(word)
  local fields, from = {}, 1
  while true do
    local colon = string.find(word, ':', from, true)
    if not colon then
      fields[#fields + 1] = string.sub(word, from)
      return fields
    end
    fields[#fields + 1] = string.sub(word, from, colon - 1)
    from = colon + 1
  end
end

-- split_fields of the fields words of this call's transactions, once per word (a batch's
-- transactions of one merchant share theirs).
local split_words
local function split_word(word)
  split_words = split_words or {}
  local fields = split_words[word]
  if not fields then
    fields = split_fields(word)
    split_words[word] = fields
  end
  return fields
end

-- Record `text` as a table (parse_record), nil if there is none. `text` is what GET (or SET ...
-- GET) answered, by redis.pcall. A cluster's home record (lua/transaction_home.lua, begun after
-- the client found none) reads as a pending transaction of no fingerprint: a call of this script
-- neither replays nor changes it.
local function parse(text)
  if not text then
    return nil
  end
  local r = type(text) == 'string' and parse_record(text)
  if r and not r.plan then
    return r
  end
  if not r and string.sub(text.err or '', 1, 9) ~= 'WRONGTYPE' then
    -- not a record (READONLY on a demoted master, OOM...): the caller's error, as it is
    error(text)
  end
  return {state = 'pending', fp = '', amount = 0, refunded = 0, count_back = false, refunds = {},
          refund_ids = {}}
end

local function load(key)
  return parse(redis.pcall('GET', key))
end

-- Whether `text` is a time in ms that PXAT, PEXPIREAT and a score take: 1 to 18 digits, not 0
-- (checked before a call's first write, as a command refusing it would fail after).
local function is_time_ms(text)
  return #text <= 18 and string.find(text, '^[1-9]%d*$') ~= nil
end

-- The counter set stored under `key`, checked to be `text` (nil if there is none yet). Two texts
-- of one name (a 48-bit digest) are refused before anything is written: the name would have to
-- be suffixed, and a suffixed key is one the caller could not declare. (Records of an earlier
-- version may name a suffixed set, "<name>.<n>": they are read as they name it.)
local function stored_counter_set(key, text)
  local found = redis.call('GET', key)
  if found and found ~= text then
    error('limit: counter set names collide: ' .. key)
  end
  return found
end

-- The expiry (ms, as text) of the counter set `text` that `key` is to hold.
local function counter_set_expiry(key, text)
  local expiry = string.match(text, '^%d+ (%d+)')
  if not expiry or not is_time_ms(expiry) then
    error('limit: the counter set ' .. key .. ' has no expiry in its text') -- (a client's bug)
  end
  return expiry
end

-- Stores the counter set `text` under `key` until `expiry` (ms), its text's if nil.
local function store_counter_set(key, text, expiry)
  redis.call('SET', key, text, 'PXAT', expiry or counter_set_expiry(key, text))
end

-- Stores the counter set `text` under `key` unless it is there: where it is, one GET (cheaper
-- than a SET ... NX GET) reads it and nothing is written.
local function keep_counter_set(key, text)
  if not stored_counter_set(key, text) then
    store_counter_set(key, text)
  end
end

-- keep_counter_set for the record a reversal makes from an original transaction, which expires
-- at `expire_at` (ms) while the set's windows may be long over: a set that would expire within
-- an hour (the clocks of other callers) of it is made to last two.
local function keep_counter_set_until(key, text, expire_at)
  keep_counter_set(key, text)
  local least = expire_at + 3600000
  if redis.call('PEXPIRETIME', key) < least then
    store_counter_set(key, text, least + 3600000)
  end
end

-- The numerals '1', '2', ... of numbers, which programs and sets are named by: made once by a
-- library (its chunk's tables outlive a call), where tostring would format one per call.
local numerals = {}
local function numeral(n)
  local text = numerals[n]
  if not text then
    text = tostring(n)
    numerals[n] = text
  end
  return text
end

-- Programs decoded, by their bytes: a library decodes a program once, not at every call (its
-- chunk's tables outlive a call), and a program is never changed once decoded. At most 64 are
-- kept (a host's rules and windows make a few at a time); then they are decoded anew.
local decoded, decoded_count = {}, 0

-- The program `bytes` encodes. Everything is read where it is, in `w`: counter j's key expiry
-- (text) at w[2 + j], its field number at w[fields + j], rule i (its counter, max count and max
-- amount, -1 for no such limit) from w[rules + 3 * (i - 1)]. (A table a call builds costs about
-- as much as one of its Redis commands.)
local function decode_program(bytes)
  local program = decoded[bytes]
  if not program then
    local w = cmsgpack.unpack(bytes)
    local c = w[2]
    -- Checked once, here, so that a decision never fails after its call's first write (a batch
    -- decides transactions one after the other): what PEXPIREAT and the rules' sums take.
    if type(w[1]) ~= 'number' or type(c) ~= 'number' or type(w[3 + 2 * c]) ~= 'number' then
      error('limit: a rule program without its counts: ' .. tostring(w[1]) .. ' ' .. tostring(c))
    end
    program = {h = w[1], c = c, fields = 2 + c, w = w, r = w[3 + 2 * c], rules = 4 + 2 * c}
    for j = 1, c do
      if not is_time_ms(tostring(w[2 + j])) or type(w[2 + c + j]) ~= 'number' then
        error('limit: a rule program gives counter ' .. j .. ' the key expiry ' ..
          tostring(w[2 + j]) .. ' and field ' .. tostring(w[2 + c + j]))
      end
    end
    for base = program.rules, program.rules + 3 * (program.r - 1), 3 do
      local j = w[base] -- (a rule's counter: the decision reads totals 1..c only)
      if type(j) ~= 'number' or j < 0 or j > c then
        error('limit: a rule program names counter ' .. tostring(j) .. ' of ' .. c)
      end
      if type(w[base + 1]) ~= 'number' or type(w[base + 2]) ~= 'number' then
        error('limit: a rule program gives a rule the limits ' .. tostring(w[base + 1]) ..
          ' and ' .. tostring(w[base + 2]))
      end
    end
    if decoded_count == 64 then
      decoded, decoded_count = {}, 0
    end
    decoded[bytes], decoded_count = program, decoded_count + 1
  end
  return program
end

-- The names of a program's r rules, as a list, from their text; split once by a library (at
-- most 64 texts kept, as programs) and checked to be r before anything is written: a denial
-- that found no name would fail after a batch's earlier writes.
local name_lists, name_list_count = {}, 0
local function rule_names(text, r)
  local list = name_lists[text]
  if not list then
    list = words(text)
    if name_list_count == 64 then
      name_lists, name_list_count = {}, 0
    end
    name_lists[text], name_list_count = list, name_list_count + 1
  end
  if #list ~= r then
    error('limit: a rule program of ' .. r .. ' rules comes with the names "' .. text .. '"')
  end
  return list
end

-- The rule programs of a decide call (ARGV[6] and on) and their rules' names (lists), by the
-- programs' numerals, and where the counter sets' arguments start.
local function read_programs()
  local programs, names, at = {}, {}, 7
  for p = 1, ARGV[6] + 0 do
    local name, program = numeral(p), decode_program(ARGV[at])
    programs[name], names[name] = program, rule_names(ARGV[at + 1], program.r)
    at = at + 2
  end
  return programs, names, at
end

-- The counter sets of a decide call (ARGV[at] = S, then the sets), whose keys start at
-- KEYS[k], by their number as the transactions' arguments name them ('1', '2', ...); the one
-- set if S is 1 (the transactions then name none), else nil; and where the transactions'
-- arguments start. A set's counter j is KEYS[set.k + j], cached in set.entries[j]; its hold set
-- is KEYS[set.holds + j].
local function read_sets(programs, names, at, k)
  local sets, at0 = {}, at
  local count = ARGV[at]
  for s = 1, count + 0 do
    local program = programs[ARGV[at + 1]]
    local entries = {}
    for j = 1, program.c do
      entries[j] = counter_entry(KEYS[k + j])
    end
    sets[numeral(s)] = {program = program, names = names[ARGV[at + 1]], name = ARGV[at + 2],
                        text = ARGV[at + 3], k = k, entries = entries, holds = k + program.c}
    at = at + 3
    k = k + 1 + program.c + program.h
  end
  if #KEYS ~= k - 1 then -- (a key missing would fail at its first use, perhaps after a write)
    error('limit: ' .. #KEYS .. ' keys where the call names ' .. (k - 1))
  end
  return sets, count == '1' and sets['1'] or nil, at + 1
end

-- The replies of a decide call, one flat array (see the contract): a table per transaction,
-- and strings for its verdict, cost Redis more to send than the decision itself. The table
-- outlives the call in a library (made once, not per call): Redis reads a reply up to its first
-- nil, so a call ends its reply with one (out[out_n + 1]), whatever an earlier call left after it.
local out, out_n = {}, 0
-- Scratch of `decide`, reused by every transaction of a call and, in a library, by every call:
-- its counters' counts, amounts and cache cells (where a decision writes them back); entries
-- 1..c are written before they are read.
local counts, amounts, cells = {}, {}, {}
-- The reply codes and a denial's metric numbers (see the contract), as locals: a table a call
-- builds costs about as much as one of its Redis commands.
local code_allowed, code_denied, code_would_allow, code_would_deny = 1, 2, 3, 4
local code_replay, code_conflict, code_cancelled, code_overflow = 5, 6, 7, 8

local function emit(value)
  out_n = out_n + 1
  out[out_n] = value
end

-- Emits `code`, c and the c counters' totals (`counts`, `amounts`).
local function emit_totals(code, c)
  local at = out_n + 2
  out[out_n + 1], out[at] = code, c
  for j = 1, c do
    out[at + 1], out[at + 2] = counts[j], amounts[j]
    at = at + 2
  end
  out_n = at
end

-- The denial a record keeps: "<rule> <metric> <limit> <used>" (rule names have no spaces).
-- `metric`: its number (1 count, 2 amount, 3 single_amount); a record keeps its letter.
local function denial_text(set, denied, metric)
  local program = set.program
  local w, base = program.w, program.rules + 3 * (denied - 1)
  local j, limit, used = w[base], w[base + 2], 0
  if metric == 1 then
    limit, used = w[base + 1], counts[j]
  elseif metric == 2 then
    used = amounts[j]
  end
  return set.names[denied] .. ' ' .. string.sub('cas', metric, metric) .. ' ' ..
    string.format('%d', limit) .. ' ' .. string.format('%d', used)
end

-- Reads counter set `set` (once a call; a set without counters is never kept) before the
-- call's first write that comes before a record naming it: a set of another text under its
-- name, or a text without its expiry, fails there, having written nothing. set.stored: whether
-- it is there. (A call of several transactions reads its sets before the first is decided; a
-- call of one, before its hold sets are swept or its record written: a denial reads none.)
local function read_counter_set(set)
  if set.stored ~= nil or set.program.c == 0 then
    return
  end
  local key = KEYS[set.k]
  set.stored = stored_counter_set(key, set.text) and true or false
  if not set.stored then
    counter_set_expiry(key, set.text)
  end
end

-- The name a record gives the set's counters: the set stored (once a call) before the first
-- record names it.
local function kept_counter_set(set)
  if not set.kept then
    read_counter_set(set)
    if not set.stored then
      store_counter_set(KEYS[set.k], set.text)
    end
    set.kept = set.name
  end
  return set.kept
end

-- Emits what a call of an id decided before answers now: the replay of `first` (with the
-- counters as read, in `counts` and `amounts`), or why the call is not a retry of it.
local function replay(first, c, fingerprint, amount)
  if first.fp == '-' and first.state == 'voided' then
    -- a void's tombstone: the transaction was abandoned before this share was decided
    emit_totals(code_replay, c)
    emit(first.state)
    emit('')
  elseif first.fp == '-' then
    emit(code_cancelled) -- a tombstone: cancel came first
  elseif first.fp ~= fingerprint or (first.requested or first.amount) ~= amount then
    emit(code_conflict)
  else
    emit_totals(code_replay, c)
    emit(first.state)
    emit(first.denial or '')
  end
end

-- The keys this call declared, as a set: made by the first reversal that asks (main() resets
-- it at every call).
local declared

-- The reversals (refund, confirm, cancel, void, inspect) and the release of holds, which a
-- decide call needs only to sweep expired holds: made by `reversals()` the first time they are
-- needed. By EVALSHA, Lua creates a chunk's functions at every call (with what the collector
-- spends on them, ~1,600 server instructions each here), so a consume that never needs them
-- does not pay for them; a library makes them once and keeps them (they keep no state of a
-- call: `declared` and the counters are the chunk's, reset by main()).
local made_reversals
local function reversals()
  if made_reversals then
    return made_reversals
  end

--#include shared/reversal_rules.lua

  -- (Made here: a consume never writes a record by name.)
--#include shared/record_edit.lua

--#include limit/reversals.lua
end

-- The first rule of `program` without room for one more transaction of `amount`, the counters'
-- totals in `counts` and `amounts` (counter 0: the transaction's own amount; -1: no such limit),
-- and its metric's number (as a reply gives it); 0 if every rule has room.
local function first_denial(program, amount)
  local w, base = program.w, program.rules
  for i = 1, program.r do
    local j, max_count, max_amount = w[base], w[base + 1], w[base + 2]
    if j == 0 then
      if max_amount >= 0 and amount > max_amount then
        return i, 3
      end
    elseif max_count >= 0 and counts[j] + 1 > max_count then
      return i, 1
    elseif max_amount >= 0 and amounts[j] + amount > max_amount then
      return i, 2
    end
    base = base + 3
  end
  return 0, nil
end

-- The first of the c counters whose total would pass 2^53 - 1 with one more transaction of
-- `amount` (counts first), or nil. (A total a rule limits cannot, once the rules passed: this
-- finds only counters no rule limits.)
local function overflowing(c, amount)
  for j = 1, c do
    if counts[j] + 1 > max_exact then
      return j
    end
  end
  for j = 1, c do
    if amounts[j] + amount > max_exact then
      return j
    end
  end
end

-- A consumed transaction's record (see the contract): `kept` names its counter set (false: none).
local function consumed_text(fingerprint, amount_text, kept, fields_word)
  if kept then
    return 'c ' .. fingerprint .. ' ' .. amount_text .. ' ' .. kept .. ' ' .. fields_word
  end
  return 'c ' .. fingerprint .. ' ' .. amount_text .. ' -'
end

-- The reply of a transaction that would take counter j past 2^53 - 1 (nothing written).
local function overflow(record, c, fingerprint, amount, j)
  local first = load(record)
  if first then
    return replay(first, c, fingerprint, amount)
  end
  emit(code_overflow)
  return emit(j)
end

-- Decides one transaction and emits its reply. Its counters' cells must be cached: decide_all
-- runs read_ahead for every call first, and nothing drops a cached cell (writes go in place).
local function decide(record, set, fingerprint, amount_text, amount, fields_word, kind, now,
                      record_lifetime, hold_expiry, swept)
  local program = set.program
  local c = program.c
  local first
  if kind == 'check' then -- writes nothing, so reads the record first
    first = load(record)
  elseif kind == 'reserve' and not swept then
    -- A reserve adds to the hold sets, so it sweeps them (at most 64 each): they stay small.
    -- (For an id decided before, that is housekeeping of other records; nothing of its own.)
    reversals().release_all_expired(set, now, false)
  end
  -- its counters (read_ahead cached every cell)
  local fields = c > 1 and split_word(fields_word)
  local entries, w, fields_at = set.entries, program.w, program.fields
  for j = 1, c do
    local cell = entries[j].fields[fields and fields[w[fields_at + j]] or fields_word]
    cells[j], counts[j], amounts[j] = cell, cell[1], cell[2]
  end
  if first then
    return replay(first, c, fingerprint, amount)
  end
  local denied, metric = first_denial(program, amount)
  if kind == 'check' then
    if denied == 0 then
      return emit_totals(code_would_allow, c)
    end
    emit_totals(code_would_deny, c)
    emit(denied)
    return emit(metric)
  end
  -- A consume sweeps expired holds only when they could be what stands in its way, then decides
  -- again (an expired hold never denies).
  if denied ~= 0 and not swept and reversals().release_all_expired(set, now, true) > 0 then
    return decide(record, set, fingerprint, amount_text, amount, fields_word, kind, now,
      record_lifetime, hold_expiry, true)
  end
  local text, kept
  if denied ~= 0 then
    text = 'd ' .. fingerprint .. ' ' .. amount_text .. ' ' ..
      denial_text(set, denied, metric)
  else
    local past = overflowing(c, amount)
    if past then
      return overflow(record, c, fingerprint, amount, past)
    end
    -- (its only failure, names colliding, must come before the record is written)
    kept = c > 0 and (set.kept or kept_counter_set(set))
    if kind == 'reserve' then
      -- (with counters, the hold expiry is its members' score in the hold sets)
      text = 'r ' .. fingerprint .. ' ' .. amount_text .. ' ' ..
        (kept and kept .. ' ' .. fields_word or '- ' .. base36(tonumber(hold_expiry)))
    else
      text = consumed_text(fingerprint, amount_text, kept, fields_word)
    end
  end
  -- One command creates the record unless the id has one (then answers it): a first decision
  -- reads no record, the check that none exists is the write.
  local earlier = redis.pcall('SET', record, text, 'NX', 'GET', 'PX', record_lifetime)
  if earlier then
    return replay(parse(earlier), c, fingerprint, amount)
  end
  if denied ~= 0 then
    emit_totals(code_denied, c)
    emit(denied)
    return emit(metric)
  end
  -- allowed: the counters' new totals, written back and emitted
  local at = out_n + 2
  out[out_n + 1], out[at] = code_allowed, c
  for j = 1, c do
    local count, total = counts[j] + 1, amounts[j] + amount
    local cell = cells[j]
    cell[1], cell[2], cell[3] = count, total, true
    entries[j].expiry = w[2 + j]
    out[at + 1], out[at + 2] = count, total
    at = at + 2
  end
  out_n = at
  if kind == 'reserve' then
    -- one member per counter, in its window's hold set, which lives as long as the window's key
    -- (or the hold, if that is later)
    local head = record .. ' ' .. amount_text .. ' '
    for j = 1, c do
      local hold = KEYS[set.holds + j]
      local field = fields and fields[w[fields_at + j]] or fields_word
      redis.call('ZADD', hold, hold_expiry, head .. field)
      local life = math.max(w[2 + j], hold_expiry + 0)
      if redis.call('PEXPIREAT', hold, life, 'NX') == 0 then
        redis.call('PEXPIREAT', hold, life, 'GT')
      end
    end
  end
end

-- What consume_alone read before it left a call to decide_all (see there): counter j's field
-- value as HGET answered it, in alone_values[j], when alone_read.
local alone_read, alone_values = false, {}

-- The amounts of a decide call's transactions, as numbers (read_ahead checks and converts each
-- one once; entries 1..n are written before they are read).
local tx_amounts = {}

-- Reads, with one HMGET per counter key (up to 256 fields each), every counter field the n
-- transactions from tx[a] on move, before the first of them is decided: `decide` then finds
-- every cell it needs cached (a batch's transactions would otherwise read one HGET each). One
-- transaction reads one HGET per counter (nothing to gather: no lists made).
local function read_ahead(sets, only_set, tx, a, n)
  local asked, asked_entries -- entry -> the fields to read; the entries in order
  -- (the set's counters and fields are looked up once for a call with one set)
  local entries, c, w, fields_at
  if only_set then
    local program = only_set.program
    entries, c, w, fields_at = only_set.entries, program.c, program.w, program.fields
  end
  for i = 1, n do
    local f = a
    if not only_set then
      local set = sets[tx[a]]
      if not set then
        error('limit: transaction ' .. i .. ' names counter set ' .. tostring(tx[a]))
      end
      local program = set.program
      entries, c, w, fields_at = set.entries, program.c, program.w, program.fields
      f = a + 1
    end
    -- (its record's parts, checked here: a later transaction's failure would come after an
    -- earlier one's writes. By Lua's own checks, the cheapest: an amount that is no number fails
    -- its conversion, a fingerprint that is no text its concatenation; decide_all names it.)
    tx_amounts[i] = tx[f + 1] + 0
    local _ = tx[f] .. ''
    local word = tx[f + 2]
    local fields = c > 1 and split_word(word)
    for j = 1, c do
      local entry, field = entries[j], fields and fields[w[fields_at + j]] or word
      local cells = entry.fields
      if cells[field] == nil and n == 1 then -- (nothing to gather: one HGET a counter)
        local value
        if alone_read then -- (false where there was none)
          value = alone_values[j]
        else
          value = redis.call('HGET', entry.key, field)
        end
        cells[field] = parse_counter(value)
      elseif cells[field] == nil then
        cells[field] = false -- (asked; the HMGET below fills it)
        asked, asked_entries = asked or {}, asked_entries or {}
        local list = asked[entry]
        if not list then
          list = {}
          asked[entry] = list
          asked_entries[#asked_entries + 1] = entry
        end
        list[#list + 1] = field
      end
    end
    a = f + 3
  end
  for i = 1, asked_entries and #asked_entries or 0 do
    local entry = asked_entries[i]
    local list, cells = asked[entry], entry.fields
    for from = 1, #list, flush_chunk do
      local upto = math.min(from + flush_chunk - 1, #list)
      local values = redis.call('HMGET', entry.key, unpack(list, from, upto))
      for k = from, upto do
        cells[list[k]] = parse_counter(values[k - from + 1])
      end
    end
  end
end

-- Raises the error that names the first of the n transactions from tx[a] on (a set number
-- first when not only_set) whose fingerprint is no text or whose amount is no number, if any:
-- when read_ahead failed.
local function name_bad_transaction(only_set, tx, a, n)
  for i = 1, n do
    local f = only_set and a or a + 1
    local fingerprint = type(tx[f])
    if (fingerprint ~= 'string' and fingerprint ~= 'number') or not tonumber(tx[f + 1]) then
      error('limit: transaction ' .. i .. ' has the fingerprint ' .. tostring(tx[f]) ..
        ' and the amount ' .. tostring(tx[f + 1]))
    end
    a = f + 3
  end
end

-- Decides the call's n transactions, emitting their replies.
local function decide_all(kind)
  local n = ARGV[2] + 0
  if n ~= 1 and kind == 'reserve' then -- (a reserve sweeps before it writes: one a call)
    error('limit: ' .. kind .. ' decides one transaction a call, not ' .. n)
  end
  local programs, names, at = read_programs()
  local sets, only_set, a = read_sets(programs, names, at, n + 1)
  local now, record_lifetime, hold_expiry = ARGV[3], ARGV[4], ARGV[5]
  if kind ~= 'check' then
    if not is_time_ms(record_lifetime) then -- (else SET ... PX would fail after other writes)
      error('limit: the record lifetime ' .. record_lifetime .. ' is not a number of ms')
    end
    -- Everything that can fail is read and checked before the first record: the times each
    -- transaction's writes take, every counter set (read_ahead then reads every counter and
    -- checks each transaction's arguments).
    if not is_time_ms(now) or (kind == 'reserve' and not is_time_ms(hold_expiry)) then
      error('limit: now ' .. now .. ' and hold expiry ' .. hold_expiry .. ' are not times in ms')
    end
    if n > 1 then
      for _, set in pairs(sets) do
        read_counter_set(set)
      end
    end
  end
  local tx = ARGV -- the transactions' arguments, from tx[a] on
  if op == 'batch' then
    tx, a = cmsgpack.unpack(ARGV[a]), 1
  end
  local read, failure = pcall(read_ahead, sets, only_set, tx, a, n)
  if not read then
    name_bad_transaction(only_set, tx, a, n)
    error(failure, 0)
  end
  for i = 1, n do
    local set, f = only_set, a
    if not set then
      set, f = sets[tx[a]], a + 1
    end
    decide(KEYS[i], set, tx[f], tx[f + 1], tx_amounts[i], tx[f + 2], kind, now, record_lifetime,
      hold_expiry)
    a = f + 3
  end
  out[out_n + 1] = nil
  return out
end

-- A host's single consume (op one), decided without the cache and lists a call of many builds,
-- when it is the common case: allowed, a first decision, no total near 2^53. It decides by the
-- same rules and writes the same record and counters as decide_all. Anything else returns nil
-- having written nothing, and the call goes on in decide_all as op consume (consume_args) with
-- the values this read (alone_read, alone_values). (A record lifetime that is no number of ms
-- fails the record's SET, which then writes nothing: decide_all names it.) It runs outside
-- main's pcall and builds no table: a host calls it per payment, and each costs Redis ~1,000
-- instructions a call (docs/BENCHMARKS.md, "A lone consume before main's pcall").
local function consume_alone()
  local program = decode_program(ARGV[4])
  local c, w, at = program.c, program.w, program.fields
  local record = KEYS[1]
  local fingerprint, amount_text, fields_word = ARGV[8], ARGV[9], ARGV[10]
  local amount = tonumber(amount_text)
  if not amount then
    return nil -- (decide_all names it)
  end
  rule_names(ARGV[5], program.r) -- (what a call of many checks, before anything is written)
  local fields = c > 1 and split_fields(fields_word)
  for j = 1, c do -- (KEYS: the record, the counter set, the c counters, their hold sets)
    local field = fields and fields[w[at + j]] or fields_word
    local value = redis.call('HGET', KEYS[2 + j], field)
    alone_values[j], counts[j], amounts[j] = value, counter_totals(value)
  end
  alone_read = true
  if first_denial(program, amount) ~= 0 then
    return nil
  end
  if overflowing(c, amount) then
    return nil -- (decide_all names the counter)
  end
  -- the counter set read (a collision fails here) before the record, stored after it
  local kept, set_expiry = c > 0 and ARGV[6], nil
  if kept and not stored_counter_set(KEYS[2], ARGV[7]) then
    set_expiry = counter_set_expiry(KEYS[2], ARGV[7])
  end
  if redis.pcall('SET', record, consumed_text(fingerprint, amount_text, kept, fields_word), 'NX',
    'GET', 'PX', ARGV[3]) then
    return nil -- decided before, not this script's record, or no lifetime: decide_all answers it
  end
  if set_expiry then
    store_counter_set(KEYS[2], ARGV[7], set_expiry)
  end
  out[1], out[2] = code_allowed, c
  for j = 1, c do
    local key, count, total = KEYS[2 + j], counts[j] + 1, amounts[j] + amount
    if redis.call('HSET', key, fields and fields[w[at + j]] or fields_word,
      string.format(counter_format, count, total)) == 1 then -- (counter_value, inlined)
      redis.call('PEXPIREAT', key, w[2 + j], 'NX') -- (a new field may be a new key)
    end
    out[1 + 2 * j], out[2 + 2 * j] = count, total
  end
  out[3 + 2 * c] = nil
  return out
end

-- The arguments of op one as op consume's: one transaction, program, counter set (see the
-- contract), no hold expiry.
local function consume_args()
  return {'consume', '1', ARGV[2], ARGV[3], '', '1', ARGV[4], ARGV[5], '1', '1', ARGV[6], ARGV[7],
          ARGV[8], ARGV[9], ARGV[10]}
end

local function run()
  if op == 'consume' or op == 'reserve' or op == 'check' then
    return decide_all(op)
  elseif op == 'batch' then
    return decide_all('consume')
  elseif op == 'refund' then
    return reversals().refund()
  elseif op == 'confirm' then
    return reversals().confirm()
  elseif op == 'cancel' then
    return reversals().cancel()
  elseif op == 'void' then
    return reversals().void()
  elseif op == 'inspect' then
    return reversals().inspect()
  end
  return redis.error_reply('limit: unknown op ' .. tostring(op))
end

-- One call. Every failure comes before the call's first write (reads and checks first), so a
-- failed call has written nothing and its cached counters are dropped, never flushed. (A lone
-- consume runs outside the pcall: it caches nothing, and an error it raises reaches Redis as
-- main would raise it, `ERR ` and its position for an error of its own, a command's as it is.)
local function main()
  op = ARGV[1]
  out_n = 0
  alone_read = false
  if op == 'one' then
    local reply = consume_alone()
    if reply then
      return reply
    end
    ARGV, op = consume_args(), 'consume'
  end
  counters, counter_keys, split_words = nil, nil, nil
  declared = nil
  local ok, result = pcall(run)
  if not ok then
    if type(result) == 'table' and result.needs then
      return {'needs', unpack(result.needs)}
    end
    -- pcall gives an error as text: raise it as Redis would have, with its code (READONLY, OOM,
    -- ... which the client acts on), or ERR for an error of this script's own
    if type(result) == 'string' then
      result = {err = string.find(result, '^[A-Z]+ ') and result or 'ERR ' .. result}
    end
    error(result, 0)
  end
  flush_counters()
  return result
end

return main()
