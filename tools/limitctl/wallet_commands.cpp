// limitctl wallet show | compare | journal-lag | freeze | unfreeze.
#include <chrono>
#include <map>
#include <set>

#include <limitcounter/journal_consumer.hpp>
#include <limitcounter/wallet.hpp>

#include "limitctl.hpp"

namespace limitctl {
namespace {

using limitcounter::Reply;
using limitcounter::Wallet;

struct WalletArgs {
  std::string user;
  std::uint32_t partitions = limitcounter::WalletOptions{}.partitions;
};

limitcounter::WalletOptions wallet_options(const Context& context, const WalletArgs& args) {
  limitcounter::WalletOptions options;
  options.key_prefix = context.prefix_or(limitcounter::WalletKeys::default_prefix);
  options.partitions = args.partitions;
  return options;
}

Wallet wallet_of(const Context& context, const WalletArgs& args) {
  return Wallet(context.redis(), wallet_options(context, args));
}

// Every wallet command takes --partitions (it picks a user's keys); most take USER too.
CLI::App* wallet_command(CLI::App& wallet, const std::string& name, const std::string& about,
                         WalletArgs& args, bool with_user) {
  CLI::App* command = wallet.add_subcommand(name, about);
  if (with_user) {
    command->add_option("USER", args.user, "the wallet's user id")->required();
  }
  command->add_option("--partitions", args.partitions,
                      "journal partitions of the wallet (default 16, as the library)");
  return command;
}

Failure not_cached(const std::string& user) {
  return Failure(exit_not_found, "wallet " + user + " is not cached in Redis");
}

void add_show(CLI::App& wallet, Context& context) {
  auto args = std::make_shared<WalletArgs>();
  wallet_command(wallet, "show", "balance, version, frozen and reason, pending orders", *args, true)
      ->callback([&context, args] {
        Wallet w = wallet_of(context, *args);
        const auto account = w.account(args->user);
        if (!account) {
          throw not_cached(args->user);
        }
        Json pending = Json::array();
        for (const auto& order : w.pending_orders(args->user, std::chrono::milliseconds(0))) {
          pending.push(order);
        }
        context.show(
            Json::object()
                .set("user", args->user)
                .set("balance", account->balance)
                .set("threshold", account->threshold)
                .set("version", account->version)
                .set("updated", format_time(account->updated))
                .set("frozen", account->frozen)
                .set("freeze_reason", account->freeze_reason)
                .set("freeze_changed", account->freeze_changed.time_since_epoch().count() == 0
                                           ? Json()
                                           : Json(format_time(account->freeze_changed)))
                .set("pending_orders", std::move(pending)));
      });
}

void add_compare(CLI::App& wallet, Context& context) {
  struct Args : WalletArgs {
    std::int64_t balance = 0, version = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = wallet_command(
      wallet, "compare",
      "compare the cached balance and version with the system of record's: exit 0 when they "
      "match, 4 when they differ, 1 when the user is not cached",
      *args, true);
  command->add_option("BALANCE", args->balance, "the system of record's balance")->required();
  command->add_option("VERSION", args->version, "the system of record's version")->required();
  command->callback([&context, args] {
    const auto comparison =
        wallet_of(context, *args).compare(args->user, args->balance, args->version);
    context.show(Json::object()
                     .set("user", args->user)
                     .set("cached", comparison.cached)
                     .set("matches", comparison.matches)
                     .set("cached_balance", comparison.cached_balance)
                     .set("cached_version", comparison.cached_version));
    if (!comparison.cached) {
      throw not_cached(args->user);
    }
    if (!comparison.matches) {
      throw Failure(exit_conflict, "wallet " + args->user + " differs from the system of record");
    }
  });
}

// `argv`'s reply; an error reply throws server_error naming the command and key.
Reply checked(limitcounter::Redis& redis, const std::vector<std::string>& argv) {
  Reply reply = redis.command(argv);
  if (reply.is_error()) {
    throw limitcounter::Error(limitcounter::errc::server_error,
                              argv[0] + " " + argv[1] + ": " + reply.as_string(),
                              limitcounter::Outcome::failed);
  }
  return reply;
}

// The consumer groups of any partition's journal (XINFO GROUPS), in name order.
std::set<std::string> group_names(limitcounter::Redis& redis,
                                  const limitcounter::WalletKeys& keys) {
  std::set<std::string> names;
  for (std::uint32_t p = 0; p < keys.partitions(); ++p) {
    const std::string journal = keys.journal(p);
    if (checked(redis, {"EXISTS", journal}).as_integer() == 0) {
      continue; // XINFO of a missing stream is an error
    }
    // Held by value: the loop below walks its array (a temporary would die first).
    const Reply groups = checked(redis, {"XINFO", "GROUPS", journal});
    for (const Reply& group : groups.as_array()) {
      const auto& items = group.as_array();
      for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        if (items[i].as_string() == "name") {
          names.insert(items[i + 1].as_string());
        }
      }
    }
  }
  return names;
}

void add_journal_lag(CLI::App& wallet, Context& context) {
  auto args = std::make_shared<WalletArgs>();
  wallet_command(wallet, "journal-lag",
                 "per partition: journal length, unpersisted orders, and each consumer group's "
                 "unread events (lag) and unacknowledged ones (pending), as JournalConsumer::lag",
                 *args, false)
      ->callback([&context, args] {
        limitcounter::Redis redis = context.redis();
        const limitcounter::WalletOptions options = wallet_options(context, *args);
        const limitcounter::WalletKeys keys(options.key_prefix, options.partitions);
        // Every group's lag in every partition, one round trip per group (the library's own
        // reading of XINFO GROUPS; a partition the group never read counts all its events).
        std::map<std::string, std::vector<limitcounter::JournalLag>> lags;
        for (const std::string& group : group_names(redis, keys)) {
          limitcounter::JournalConsumerOptions consumer;
          consumer.group = group;
          lags[group] = limitcounter::JournalConsumer(redis, options, consumer).lag();
        }
        Json partitions = Json::array();
        for (std::uint32_t p = 0; p < keys.partitions(); ++p) {
          Json groups = Json::array();
          for (const auto& [group, lag] : lags) {
            groups.push(Json::object()
                            .set("group", group)
                            .set("pending", lag[p].pending)
                            .set("lag", lag[p].unread ? Json(*lag[p].unread) : Json()));
          }
          partitions.push(
              Json::object()
                  .set("partition", static_cast<std::int64_t>(p))
                  .set("length", checked(redis, {"XLEN", keys.journal(p)}).as_integer())
                  .set("unpersisted", checked(redis, {"ZCARD", keys.pending(p)}).as_integer())
                  .set("groups", std::move(groups)));
        }
        context.show(Json::object().set("partitions", std::move(partitions)));
      });
}

void add_freeze(CLI::App& wallet, Context& context, bool freeze) {
  struct Args : WalletArgs {
    std::string reason, author;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = wallet_command(
      wallet, freeze ? "freeze" : "unfreeze",
      freeze ? "refuse the user's deductions (credits and rollbacks still apply); the reason is "
               "kept with the account and in the journal"
             : "lift a freeze; the reason is kept with the account and in the journal",
      *args, true);
  command->add_option("--reason", args->reason, "why (required)")->required();
  command->add_option("--author", args->author,
                      "who: kept as \"<author>: <reason>\" (the account keeps one reason text)");
  command->callback([&context, args, freeze] {
    context.writes = true;
    Wallet w = wallet_of(context, *args);
    const std::string reason =
        args->author.empty() ? args->reason : args->author + ": " + args->reason;
    const bool changed = freeze ? w.freeze(args->user, reason) : w.unfreeze(args->user, reason);
    context.show(Json::object()
                     .set("user", args->user)
                     .set("frozen", freeze)
                     .set("changed", changed)
                     .set("reason", reason));
  });
}

} // namespace

void add_wallet_commands(CLI::App& app, Context& context) {
  CLI::App* wallet = app.add_subcommand("wallet", "balances (job 4)");
  wallet->require_subcommand(1);
  add_show(*wallet, context);
  add_compare(*wallet, context);
  add_journal_lag(*wallet, context);
  add_freeze(*wallet, context, true);
  add_freeze(*wallet, context, false);
}

} // namespace limitctl
