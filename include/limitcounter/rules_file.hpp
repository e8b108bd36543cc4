#pragma once
// Rules as data: a RuleSet read from and written to YAML (docs/RULES.md).
//
// Part of the optional target `limitcounter::rules_file` (library limitcounter_rules_file,
// which links yaml-cpp); the core library `limitcounter::limitcounter` does not need it.
// This header includes no yaml-cpp header, so including it costs nothing else.

#include <string>
#include <string_view>

#include <limitcounter/rule.hpp>

namespace limitcounter {

/// Reads a rule set from YAML `text` in the format of docs/RULES.md and validates it as
/// `RuleSet::add` does. `source_name` names the text in error messages (a file name).
///
/// Throws `Error` (invalid_argument) at the first problem, with a message
/// `<source>:<line>: rule "<name>": <problem>`: malformed YAML, an unknown or repeated key
/// (a typo must not silently drop a limit), a value of the wrong type, a negative or
/// non-integer limit, an unknown period or failure policy, or anything `RuleSet::add`
/// refuses. Nothing is returned half read.
RuleSet rules_from_yaml(std::string_view text, std::string_view source_name = "<string>");

/// `rules_from_yaml` of the file at `path` (errors are named by `path`). Throws `Error`
/// (invalid_argument) naming the path when it cannot be read.
RuleSet rules_from_file(const std::string& path);

/// Writes `rules` in the format of docs/RULES.md; `rules_from_yaml` of the text gives an
/// equal set (same attributes, rules in the same order with the same fields). A local
/// share is written only for the `local` failure policy, the only one that uses it.
std::string to_yaml(const RuleSet& rules);

} // namespace limitcounter
