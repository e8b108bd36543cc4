// limitcounter's Functions libraries on every master of the test topology: listed, and other
// versions' deleted (loaded_libraries, delete_other_libraries, Redis::command_on_masters), read
// back from each master itself; and the same through limitctl functions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <limitcounter/function_libraries.hpp>
#include <limitcounter/redis.hpp>

#include "limitcounter/detail/lua_scripts.hpp"
#include "support/topology.hpp"

using limitcounter::LoadedLibrary;
using limitcounter::Redis;
using limitcounter::Reply;
using limitcounter::testing::master_clients;
using limitcounter::testing::test_options;

namespace {

// A library `name` whose one function is also `name` (function names are server-wide).
std::string library_text(const std::string& name) {
  return "#!lua name=" + name + "\nredis.register_function('" + name +
         "', function() return 1 end)\n";
}

// The library names FUNCTION LIST shows on `master`.
std::set<std::string> listed_on(Redis& master) {
  std::set<std::string> names;
  const Reply listed = master.command({"FUNCTION", "LIST"});
  for (const Reply& library : listed.as_array()) {
    const auto& fields = library.as_array();
    for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
      if (fields[i].as_string() == "library_name") {
        names.insert(fields[i + 1].as_string());
      }
    }
  }
  return names;
}

std::size_t count_named(const std::vector<LoadedLibrary>& libraries, const std::string& name,
                        bool current) {
  return static_cast<std::size_t>(
      std::count_if(libraries.begin(), libraries.end(), [&](const LoadedLibrary& library) {
        return library.name == name && library.current == current;
      }));
}

} // namespace

TEST_CASE("other versions' libraries are deleted from every master; current and foreign ones "
          "stay",
          "[redis][functions]") {
  Redis redis(test_options());
  std::vector<Redis> masters = master_clients();
  const std::string current(limitcounter::scripts::limit.function_name);
  const std::string old_limit = "limitcounter_limit_00000000000000aa";
  const std::string old_wallet = "limitcounter_wallet_00000000000000bb";
  const std::string foreign = "acme_limits_library";
  for (Redis& master : masters) {
    master.command({"FUNCTION", "LOAD", "REPLACE", library_text(old_limit)});
    master.command({"FUNCTION", "LOAD", "REPLACE", library_text(foreign)});
    master.command(
        {"FUNCTION", "LOAD", "REPLACE", std::string(limitcounter::scripts::limit.library)});
  }
  masters.front().command({"FUNCTION", "LOAD", "REPLACE", library_text(old_wallet)});

  const std::vector<LoadedLibrary> listed = limitcounter::loaded_libraries(redis);
  CHECK(count_named(listed, old_limit, false) == masters.size());
  CHECK(count_named(listed, old_wallet, false) == 1);
  CHECK(count_named(listed, current, true) == masters.size());
  CHECK(count_named(listed, foreign, false) + count_named(listed, foreign, true) == 0);
  std::set<std::string> addresses;
  for (const LoadedLibrary& library : listed) {
    addresses.insert(library.master);
  }
  CHECK(addresses.size() == masters.size()); // every master, each under its own address

  const std::vector<LoadedLibrary> deleted = limitcounter::delete_other_libraries(redis);
  CHECK(deleted.size() == masters.size() + 1);
  CHECK(count_named(deleted, old_limit, false) == masters.size());
  CHECK(count_named(deleted, old_wallet, false) == 1);
  for (Redis& master : masters) { // read back from each master itself
    const std::set<std::string> left = listed_on(master);
    CHECK(left.count(current) == 1);
    CHECK(left.count(foreign) == 1);
    CHECK(left.count(old_limit) == 0);
    CHECK(left.count(old_wallet) == 0);
  }
  CHECK(limitcounter::delete_other_libraries(redis).empty()); // nothing left to delete

  for (Redis& master : masters) {
    master.command({"FUNCTION", "DELETE", foreign});
  }
}
