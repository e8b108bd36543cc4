#pragma once
// One known password for the tests that check no message shows it: URIs of every scheme that
// hold it and are malformed, and a check that sees a piece of it as well as the whole.

#include <string>
#include <string_view>
#include <vector>

namespace limitcounter::testing {

/// The password no message may show. It has '/', '+' and '=' (base64 has them, and a URI
/// parser cuts at '/' and '='), and no lower-case run a parser would take for a name.
inline constexpr std::string_view known_secret = "Sekr3T+PW/X9Q==";

/// Whether `text` shows the secret or any 5 consecutive characters of it: a parser that cut
/// the URI at '/' or a server that truncated its echo shows only a piece.
bool shows_secret(std::string_view text);

/// URIs of every scheme the parser knows, each holding the secret (as password, query
/// value, query key, port, db, path) and each malformed in its own way.
std::vector<std::string> malformed_uris_with_secret();

} // namespace limitcounter::testing
