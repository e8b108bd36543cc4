// limitctl rules validate | diff | apply | history | rollback: rule files (docs/RULES.md)
// and the shared rule store.
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

void add_diff(CLI::App& rules, Context& context) {
  struct Args {
    std::string file, against;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = rules.add_subcommand(
      "diff", "rules added, removed and changed in FILE against a second file (--against)");
  command->add_option("FILE", args->file, "the new rule file")->required();
  command->add_option("--against", args->against, "the old rule file")->required();
  command->callback([&context, args] {
    const auto before = limitcounter::rules_from_file(args->against);
    const auto after = limitcounter::rules_from_file(args->file);
    const RuleDiff diff = diff_rules(before, after);
    context.show(Json::object()
                     .set("added", names(diff.added))
                     .set("removed", names(diff.removed))
                     .set("changed", names(diff.changed))
                     .set("unchanged", static_cast<std::int64_t>(diff.unchanged))
                     .set("attributes_changed", diff.attributes_changed));
  });
}

} // namespace

void add_rules_commands(CLI::App& app, Context& context) {
  CLI::App* rules = app.add_subcommand("rules", "rule files and the shared rule store");
  rules->require_subcommand(1);
  add_validate(*rules, context);
  add_diff(*rules, context);
}

} // namespace limitctl
