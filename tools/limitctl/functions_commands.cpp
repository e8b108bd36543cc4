// limitctl functions list | prune: limitcounter's Redis Functions libraries on each master.
#include <limitcounter/function_libraries.hpp>

#include "limitctl.hpp"

namespace limitctl {
namespace {

Json libraries_json(const std::vector<limitcounter::LoadedLibrary>& libraries) {
  Json listed = Json::array();
  for (const auto& library : libraries) {
    listed.push(Json::object()
                    .set("master", library.master)
                    .set("library", library.name)
                    .set("current", library.current));
  }
  return listed;
}

void add_list(CLI::App& functions, Context& context) {
  CLI::App* command = functions.add_subcommand(
      "list", "limitcounter's libraries on each master; current: this limitctl's version calls it");
  command->callback([&context] {
    limitcounter::Redis redis = context.redis();
    context.show(
        Json::object().set("libraries", libraries_json(limitcounter::loaded_libraries(redis))));
  });
}

void add_prune(CLI::App& functions, Context& context) {
  CLI::App* command = functions.add_subcommand(
      "prune", "delete from every master the limitcounter libraries of other versions than this "
               "limitctl's (run the newest limitctl, once no host runs an older version)");
  command->callback([&context] {
    context.writes = true;
    limitcounter::Redis redis = context.redis();
    context.show(
        Json::object().set("deleted", libraries_json(limitcounter::delete_other_libraries(redis))));
  });
}

} // namespace

void add_functions_commands(CLI::App& app, Context& context) {
  CLI::App* functions = app.add_subcommand(
      "functions", "the Redis Functions libraries each limitcounter version loads");
  functions->require_subcommand(1);
  add_list(*functions, context);
  add_prune(*functions, context);
}

} // namespace limitctl
