#include <limitcounter/version.hpp>

namespace limitcounter {

// The macro as the library was compiled: what a program calling this actually links.
const char* version() noexcept { return LIMITCOUNTER_VERSION_STRING; }

} // namespace limitcounter
