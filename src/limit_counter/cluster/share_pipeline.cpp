#include "limit_counter/cluster/share_pipeline.hpp"

#include <algorithm>
#include <map>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/decide_batch.hpp"
#include "limit_counter/codec/decide_replies.hpp"
#include "redis/key_slot.hpp"

namespace limitcounter::detail {

std::vector<BatchResult<std::vector<Reply>>>
run_shares(Redis& redis, bool consumes,
           const std::vector<const std::vector<ScriptCall>*>& shares_of) {
  using Member = std::pair<std::size_t, std::size_t>; // (transaction, share)
  std::vector<BatchResult<std::vector<Reply>>> out;
  out.reserve(shares_of.size());
  std::vector<ScriptCall> calls;
  std::vector<std::vector<Member>> call_members;
  std::map<std::uint16_t, std::vector<Member>> by_slot;
  // One transaction's shares are one per slot: alone, they are sent on their own, as they are
  // (not copied) but for consumes, which go in the fewest arguments (op one: lua/limit.lua's
  // lone consume, its fast path).
  const bool alone = shares_of.size() == 1;
  const bool as_they_are = alone && !consumes;
  const auto on_its_own = [&](const ScriptCall& share) {
    ScriptCall call = share;
    if (consumes) {
      call.args = detail::lone_consume_args(std::move(call.args));
    }
    return call;
  };
  for (std::size_t k = 0; k < shares_of.size(); ++k) {
    const std::vector<ScriptCall>& shares = *shares_of[k];
    out.emplace_back(std::vector<Reply>(shares.size()));
    for (std::size_t s = 0; s < shares.size(); ++s) {
      if (consumes && !alone) {
        by_slot[detail::key_slot(shares[s].keys.front())].emplace_back(k, s);
        continue;
      }
      if (!as_they_are) {
        calls.push_back(on_its_own(shares[s]));
      }
      call_members.push_back({{k, s}});
    }
  }
  const auto share = [&](const Member& member) -> const ScriptCall& {
    return (*shares_of[member.first])[member.second];
  };
  for (const auto& [slot, members] : by_slot) {
    for (std::size_t from = 0; from < members.size(); from += detail::max_decide_batch) {
      const std::size_t upto = std::min(members.size(), from + detail::max_decide_batch);
      call_members.emplace_back(members.begin() + from, members.begin() + upto);
      if (upto - from == 1) {
        calls.push_back(on_its_own(share(members[from])));
        continue;
      }
      detail::DecideBatch batch;
      for (std::size_t m = from; m < upto; ++m) {
        ScriptCall copy = share(members[m]);
        batch.add(std::move(copy.keys), std::move(copy.args));
      }
      auto [keys, args] = batch.take();
      calls.push_back({&scripts::limit, std::move(keys), std::move(args), Resend::same_id});
    }
  }
  const std::vector<ScriptCall>& sent = as_they_are ? *shares_of.front() : calls;
  if (sent.empty()) {
    return out;
  }
  std::vector<Reply> replies;
  std::vector<std::optional<Error>> refusals; // (their error replies in place say so)
  try {
    replies = redis.eval_pipeline(sent, refusals);
  } catch (const Error& e) {
    std::fill(out.begin(), out.end(), BatchResult<std::vector<Reply>>(e));
    return out;
  }
  for (std::size_t c = 0; c < replies.size(); ++c) {
    const std::vector<Member>& members = call_members[c];
    std::vector<Reply> own;
    if (members.size() == 1 || replies[c].is_error()) {
      own.assign(members.size(), replies[c]);
    } else {
      try {
        own = detail::split_decide_replies(replies[c], members.size());
      } catch (const Error& e) {
        for (const Member& member : members) {
          out[member.first] = e;
        }
        continue;
      }
    }
    for (std::size_t m = 0; m < members.size(); ++m) {
      if (auto* replies_of = std::get_if<std::vector<Reply>>(&out[members[m].first])) {
        (*replies_of)[members[m].second] = std::move(own[m]);
      }
    }
  }
  return out;
}

} // namespace limitcounter::detail
