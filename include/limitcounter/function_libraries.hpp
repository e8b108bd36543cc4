#pragma once
// The Redis Functions libraries limitcounter loads on each master (docs/OPERATIONS.md, "What a
// version leaves on the server"), listed and pruned for an operator (limitctl functions).

#include <string>
#include <vector>

#include <limitcounter/redis.hpp>

namespace limitcounter {

/// A Functions library of limitcounter's, loaded on one master.
struct LoadedLibrary {
  std::string master;   ///< the master's address, as `Redis::command_on_masters` gives it
  std::string name;     ///< e.g. "limitcounter_limit_45e4d6ebb1ff01b1"
  bool current = false; ///< a library this build of limitcounter calls
};

/// limitcounter's libraries (named "limitcounter_...") loaded on every master of `redis`: per
/// master in slot order, by name. Reads only (FUNCTION LIST). A library is loaded on a master
/// at its first call there, so a current one may be missing from a master no call reached yet.
/// Throws the `Error` of a Redis failure, and server_error naming the master when one refuses
/// FUNCTION LIST (a server before Redis 7, an ACL without it).
std::vector<LoadedLibrary> loaded_libraries(Redis& redis);

/// Deletes from every master limitcounter's libraries that this build does not call (other
/// versions'), one FUNCTION DELETE each, and returns them. Libraries of other names are left
/// alone. Run it with the newest version once no host runs an older one: a host still running
/// another version loads its library again at its next call (one round trip more, nothing
/// lost), and an older build run this way deletes the newer version's libraries the same way.
/// A library already gone from a master (deleted meanwhile) is not an error and is not
/// returned. Throws as `loaded_libraries`, and server_error naming the master and library when
/// a master refuses a FUNCTION DELETE: the libraries listed before it were deleted.
std::vector<LoadedLibrary> delete_other_libraries(Redis& redis);

} // namespace limitcounter
