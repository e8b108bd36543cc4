// limitctl rules validate | diff | apply | get | clear | history | rollback: rule files
// (docs/RULES.md) and the shared rule store.
#include <limitcounter/rule_store.hpp>
#include <limitcounter/rules_file.hpp>

#include "limitctl.hpp"

namespace limitctl {
namespace {

Json names(const std::vector<std::string>& list) {
  Json array = Json::array();
  for (const auto& name : list) {
    array.push(name);
  }
  return array;
}

void add_validate(CLI::App& rules, Context& context) {
  auto file = std::make_shared<std::string>();
  CLI::App* command = rules.add_subcommand(
      "validate", "parse and validate a rule file; prints the rule count, or the error as "
                  "<file>:<line>: rule \"<name>\": <problem> (exit 2)");
  command->add_option("FILE", *file, "a rule file (docs/RULES.md)")->required();
  command->callback([&context, file] {
    const limitcounter::RuleSet set = limitcounter::rules_from_file(*file);
    context.show(Json::object()
                     .set("file", *file)
                     .set("valid", true)
                     .set("rules", static_cast<std::int64_t>(set.rules().size())));
  });
}

// --store NAME (and --author, --reason for the writes): the options every store command takes.
struct StoreArgs {
  std::string store, author, reason;
};

void store_options(CLI::App& command, StoreArgs& args, bool writes) {
  command.add_option("--store", args.store, "the rule store's name")->required();
  if (writes) {
    command.add_option("--author", args.author, "who changes the rules (kept in the history)")
        ->required();
    command.add_option("--reason", args.reason, "why (kept in the history)")->required();
  }
}

limitcounter::RuleStore store_of(const Context& context, const StoreArgs& args) {
  limitcounter::RuleStoreOptions options;
  options.key_prefix = context.prefix_or(options.key_prefix);
  return limitcounter::RuleStore(context.redis(), args.store, options);
}

// The store's current set; an empty set when nothing is stored yet.
limitcounter::RuleSet current_rules(const limitcounter::RuleStore& store) {
  const auto current = store.current();
  return current ? limitcounter::RuleStore::parse(*current) : limitcounter::RuleSet();
}

Json diff_json(const RuleDiff& diff) {
  return Json::object()
      .set("added", names(diff.added))
      .set("removed", names(diff.removed))
      .set("changed", names(diff.changed))
      .set("unchanged", static_cast<std::int64_t>(diff.unchanged))
      .set("attributes_changed", diff.attributes_changed);
}

void add_apply(CLI::App& rules, Context& context) {
  struct Args : StoreArgs {
    std::string file;
    std::optional<std::uint64_t> expect;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = rules.add_subcommand(
      "apply", "validate FILE and store it as the store's next version (followers swap to it); "
               "exit 4 when --expect-version is not the current version");
  command->add_option("FILE", args->file, "a rule file (docs/RULES.md)")->required();
  store_options(*command, *args, true);
  command->add_option("--expect-version", args->expect,
                      "store only if this is the current version (0: an empty store)");
  command->callback([&context, args] {
    context.writes = true;
    const limitcounter::RuleSet set = limitcounter::rules_from_file(args->file);
    limitcounter::RuleStore store = store_of(context, *args);
    const RuleDiff diff = diff_rules(current_rules(store), set);
    const std::uint64_t version = store.put(set, {args->author, args->reason}, args->expect);
    context.show(Json::object()
                     .set("store", args->store)
                     .set("version", version)
                     .set("rules", static_cast<std::int64_t>(set.rules().size()))
                     .set("diff", diff_json(diff)));
  });
}

void add_history(CLI::App& rules, Context& context) {
  struct Args : StoreArgs {
    std::size_t n = 20;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = rules.add_subcommand(
      "history", "the store's versions, newest first (who, when, why); exit 1 for an empty store");
  store_options(*command, *args, false);
  command->add_option("--n", args->n, "how many (default 20)")->check(CLI::Range(1, 100000));
  command->callback([&context, args] {
    const auto versions = store_of(context, *args).history(args->n);
    if (versions.empty()) {
      throw Failure(exit_not_found, "rule store " + args->store + " has no version");
    }
    Json list = Json::array();
    for (const auto& version : versions) {
      list.push(Json::object()
                    .set("version", version.version)
                    .set("at", format_time(version.at))
                    .set("author", version.author)
                    .set("action", version.action)
                    .set("reason", version.reason));
    }
    context.show(Json::object().set("store", args->store).set("versions", std::move(list)));
  });
}

void add_rollback(CLI::App& rules, Context& context) {
  struct Args : StoreArgs {
    std::uint64_t version = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = rules.add_subcommand(
      "rollback", "store the content of VERSION again as the next version; exit 1 when VERSION "
                  "is not stored");
  command->add_option("VERSION", args->version, "the version to go back to")->required();
  store_options(*command, *args, true);
  command->callback([&context, args] {
    context.writes = true;
    const std::uint64_t version =
        store_of(context, *args).rollback(args->version, {args->author, args->reason});
    context.show(Json::object()
                     .set("store", args->store)
                     .set("version", version)
                     .set("content_of", args->version));
  });
}

void add_get(CLI::App& rules, Context& context) {
  struct Args : StoreArgs {
    std::string rule;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = rules.add_subcommand(
      "get", "one rule of the store's current version, as YAML; exit 1 when it has no such rule");
  command->add_option("NAME", args->rule, "the rule's name")->required();
  store_options(*command, *args, false);
  command->callback([&context, args] {
    const limitcounter::RuleStore store = store_of(context, *args);
    const auto rule = store.get_rule(args->rule);
    if (!rule) {
      throw Failure(exit_not_found,
                    "rule store " + args->store + " has no rule \"" + args->rule + "\"");
    }
    // Printed as a set of one rule (with the current set's attributes): the file format.
    limitcounter::RuleSet one(current_rules(store).attributes());
    one.add(*rule);
    context.show(Json::object()
                     .set("store", args->store)
                     .set("rule", args->rule)
                     .set("yaml", limitcounter::to_yaml(one)));
  });
}

void add_clear(CLI::App& rules, Context& context) {
  auto args = std::make_shared<StoreArgs>();
  CLI::App* command = rules.add_subcommand(
      "clear", "store a version with no rules (same attributes); the history keeps the old "
               "ones: rollback brings them back");
  store_options(*command, *args, true);
  command->callback([&context, args] {
    context.writes = true;
    const std::uint64_t version = store_of(context, *args).clear({args->author, args->reason});
    context.show(Json::object().set("store", args->store).set("version", version));
  });
}

void add_diff(CLI::App& rules, Context& context) {
  struct Args : StoreArgs {
    std::string file, against;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = rules.add_subcommand(
      "diff", "rules added, removed and changed in FILE against the store's current version "
              "(--store) or a second file (--against)");
  command->add_option("FILE", args->file, "the new rule file")->required();
  CLI::Option* store = command->add_option("--store", args->store, "a rule store's name");
  CLI::Option* against = command->add_option("--against", args->against, "the old rule file");
  store->excludes(against);
  command->callback([&context, args] {
    if (args->store.empty() == args->against.empty()) {
      throw Failure(exit_usage, "rules diff needs --store NAME or --against FILE");
    }
    const auto after = limitcounter::rules_from_file(args->file);
    const auto before = args->store.empty() ? limitcounter::rules_from_file(args->against)
                                            : current_rules(store_of(context, *args));
    context.show(diff_json(diff_rules(before, after)));
  });
}

} // namespace

void add_rules_commands(CLI::App& app, Context& context) {
  CLI::App* rules = app.add_subcommand("rules", "rule files and the shared rule store");
  rules->require_subcommand(1);
  add_validate(*rules, context);
  add_diff(*rules, context);
  add_apply(*rules, context);
  add_get(*rules, context);
  add_clear(*rules, context);
  add_history(*rules, context);
  add_rollback(*rules, context);
}

} // namespace limitctl
