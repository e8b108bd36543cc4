#include <limitcounter/function_libraries.hpp>

#include <algorithm>
#include <set>
#include <string_view>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>

namespace limitcounter {
namespace {

constexpr std::string_view name_prefix = "limitcounter_";

// The libraries this build loads (FUNCTION LOAD answers these names).
std::set<std::string, std::less<>> current_names() {
  std::set<std::string, std::less<>> names;
  for (const Script* script : scripts::all) {
    if (!script->library.empty()) {
      names.emplace(script->loaded_name());
    }
  }
  return names;
}

// The library names of a FUNCTION LIST reply (each library a flat list of name, value pairs).
std::vector<std::string> library_names(const std::string& master, const Reply& listed) {
  if (listed.is_error()) {
    throw Error(errc::server_error, "FUNCTION LIST on " + master + ": " + listed.as_string());
  }
  std::vector<std::string> names;
  for (const Reply& library : listed.as_array()) {
    const auto& fields = library.as_array();
    for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
      if (fields[i].as_string() == "library_name") {
        const std::string& name = fields[i + 1].as_string();
        // (the server's pattern ignores case: this keeps only limitcounter's own spelling)
        if (name.compare(0, name_prefix.size(), name_prefix) == 0) {
          names.push_back(name);
        }
      }
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace

std::vector<LoadedLibrary> loaded_libraries(Redis& redis) {
  const auto current = current_names();
  std::vector<LoadedLibrary> loaded;
  for (const auto& [master, listed] : redis.command_on_masters(
           {"FUNCTION", "LIST", "LIBRARYNAME", std::string(name_prefix) + "*"})) {
    for (std::string& name : library_names(master, listed)) {
      const bool is_current = current.count(name) > 0;
      loaded.push_back({master, std::move(name), is_current});
    }
  }
  return loaded;
}

std::vector<LoadedLibrary> delete_other_libraries(Redis& redis) {
  std::set<std::string> others;
  for (const LoadedLibrary& library : loaded_libraries(redis)) {
    if (!library.current) {
      others.insert(library.name);
    }
  }
  std::vector<LoadedLibrary> deleted;
  for (const std::string& name : others) {
    for (const auto& [master, reply] : redis.command_on_masters({"FUNCTION", "DELETE", name})) {
      if (!reply.is_error()) {
        deleted.push_back({master, name, false});
      } else if (reply.as_string().find("Library not found") == std::string::npos) {
        throw Error(errc::server_error,
                    "FUNCTION DELETE " + name + " on " + master + ": " + reply.as_string());
      }
    }
  }
  return deleted;
}

} // namespace limitcounter
