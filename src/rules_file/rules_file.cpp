// Rules as data: the YAML format of docs/RULES.md, read with yaml-cpp.
#include <limitcounter/rules_file.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <sstream>
#include <utility>

#include <yaml-cpp/yaml.h>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter {
namespace {

constexpr std::int64_t format_version = 1;
constexpr std::string_view per_transaction_word = "transaction";

const char* policy_name(FailurePolicy policy) {
  switch (policy) {
  case FailurePolicy::raise: return "raise";
  case FailurePolicy::allow: return "allow";
  case FailurePolicy::deny: return "deny";
  case FailurePolicy::local: return "local";
  }
  return "raise";
}

// Reads one document. Every error names the source, the line of the offending node, the rule
// being read (once its name is known) and the problem.
class Reader {
public:
  explicit Reader(std::string_view source) : source_(source) {}

  RuleSet read(const YAML::Node& root) {
    if (!root.IsMap()) {
      fail(root, "the document must be a mapping with a \"rules\" key");
    }
    std::optional<YAML::Node> attributes;
    std::optional<YAML::Node> rules;
    for_each_key(root, {"format", "attributes", "rules"},
                 [&](const std::string& key, const YAML::Node& value) {
                   if (key == "format") {
                     const std::int64_t version = integer(value, key);
                     if (version != format_version) {
                       fail(value, "format " + std::to_string(version) +
                                       " is not supported (this library reads format " +
                                       std::to_string(format_version) + ")");
                     }
                   } else if (key == "attributes") {
                     attributes = value;
                   } else {
                     rules = value;
                   }
                 });
    if (!rules) {
      // An empty set allows everything: that must be written, never implied by a typo.
      fail(root, "no \"rules\" key (write `rules: []` for a set that allows everything)");
    }
    RuleSet set = attributes ? attribute_set(*attributes) : RuleSet();
    if (!rules->IsSequence()) {
      fail(*rules, "\"rules\" must be a list of rules");
    }
    for (std::size_t i = 0; i < rules->size(); ++i) {
      const YAML::Node node = (*rules)[i];
      Rule rule = read_rule(node, i);
      try {
        set.add(std::move(rule));
      } catch (const Error& error) {
        rule_.clear(); // RuleSet's message names the rule itself
        fail(node, error.what());
      }
    }
    return set;
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& problem) const {
    fail_at(at.Mark(), problem);
  }
  [[noreturn]] void fail_at(const YAML::Mark& mark, const std::string& problem) const {
    std::string message = source_;
    if (!mark.is_null()) {
      message += ":" + std::to_string(mark.line + 1);
    }
    message += ": " + (rule_.empty() ? problem : rule_ + ": " + problem);
    throw Error(errc::invalid_argument, message);
  }

private:
  // Calls `handle(key, value)` for each pair of `map`; an unknown or repeated key is an error.
  template <typename Handle>
  void for_each_key(const YAML::Node& map, std::initializer_list<std::string_view> known,
                    Handle handle) {
    std::vector<std::string> seen;
    for (const auto& pair : map) {
      const std::string key = scalar(pair.first, "a key");
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        std::string list;
        for (const auto name : known) {
          list += (list.empty() ? "" : ", ") + std::string(name);
        }
        fail(pair.first,
             "unknown key " + detail::quote_for_message(key) + " (known: " + list + ")");
      }
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        fail(pair.first, "key \"" + key + "\" is given twice");
      }
      seen.push_back(key);
      if (pair.second.IsNull()) {
        // (an empty value's own mark is where the next token starts: name the key's line)
        fail(pair.first, key + " has no value");
      }
      handle(key, pair.second);
    }
  }

  std::string scalar(const YAML::Node& node, const std::string& what) const {
    if (!node.IsScalar()) {
      fail(node, what + " must be a single value, not " +
                     (node.IsNull()       ? std::string("empty")
                      : node.IsSequence() ? std::string("a list")
                                          : std::string("a mapping")));
    }
    return node.Scalar();
  }

  // A non-negative integer: decimal digits, optionally grouped with '_' (10_000_00).
  std::int64_t integer(const YAML::Node& node, const std::string& what) const {
    const std::string text = scalar(node, what);
    std::string digits;
    bool negative = false;
    bool well_formed = !text.empty();
    for (std::size_t i = 0; i < text.size() && well_formed; ++i) {
      const char c = text[i];
      if (c == '-' && i == 0) {
        negative = true;
      } else if (c >= '0' && c <= '9') {
        digits += c;
      } else {
        // '_' groups digits: never first, last or doubled.
        well_formed = c == '_' && !digits.empty() && i + 1 < text.size() && text[i + 1] != '_';
      }
    }
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (!well_formed || digits.empty() || error != std::errc() ||
        end != digits.data() + digits.size()) {
      fail(node, what + " " + detail::quote_for_message(text) +
                     (error == std::errc::result_out_of_range
                          ? " is too large"
                          : " is not an integer (minor units, e.g. 100000 or 1000_00)"));
    }
    if (negative && value != 0) {
      fail(node, what + " " + text + " must not be negative");
    }
    return value;
  }

  RuleSet attribute_set(const YAML::Node& node) const {
    if (!node.IsSequence() || node.size() == 0) {
      fail(node, "\"attributes\" must be a non-empty list of attribute names");
    }
    std::vector<std::string> names;
    for (const auto& item : node) {
      names.push_back(scalar(item, "an attribute name"));
    }
    try {
      return RuleSet(std::move(names));
    } catch (const Error& error) {
      fail(node, error.what());
    }
  }

  Rule read_rule(const YAML::Node& node, std::size_t index) {
    rule_ = "rule #" + std::to_string(index + 1);
    if (!node.IsMap()) {
      fail(node, "must be a mapping (name, where, per, max_count, max_amount, ...)");
    }
    const YAML::Node name = node["name"];
    if (!name) {
      fail(node, "has no \"name\"");
    }
    Rule rule(scalar(name, "name"));
    rule_ = "rule " + detail::quote_for_message(rule.name());
    std::optional<FailurePolicy> policy;
    std::optional<YAML::Node> share;
    bool has_per = false;
    for_each_key(node,
                 {"name", "where", "per", "max_count", "max_amount", "blocking", "on_redis_failure",
                  "local_share"},
                 [&](const std::string& key, const YAML::Node& value) {
                   if (key == "where") {
                     read_conditions(value, rule);
                   } else if (key == "per") {
                     has_per = true;
                     read_per(value, rule);
                   } else if (key == "max_count") {
                     rule.max_count(integer(value, key));
                   } else if (key == "max_amount") {
                     rule.max_amount(integer(value, key));
                   } else if (key == "blocking") {
                     if (read_bool(value, key)) {
                       rule.blocking();
                     }
                   } else if (key == "on_redis_failure") {
                     policy = read_policy(value);
                   } else if (key == "local_share") {
                     share = value;
                   }
                 });
    if (!has_per) {
      fail(node, "has no \"per\" (a period such as day, or transaction)");
    }
    if (policy == FailurePolicy::local && !share) {
      fail(node["on_redis_failure"],
           "on_redis_failure: local needs a local_share (0 < share <= 1)");
    }
    if (share && policy != FailurePolicy::local) {
      fail(*share, "local_share applies only with on_redis_failure: local");
    }
    if (policy) {
      rule.on_redis_failure(*policy, share ? number(*share, "local_share") : 0.0);
    }
    return rule;
  }

  void read_conditions(const YAML::Node& node, Rule& rule) const {
    if (!node.IsSequence() || node.size() == 0) {
      fail(node, "\"where\" must be a non-empty list: `- merchant` (any value) or "
                 "`- dept: cmb` (one value), in the order of the counter's shape");
    }
    for (const auto& item : node) {
      if (item.IsMap()) {
        if (item.size() != 1) {
          fail(item, "a condition names one attribute (`- dept: cmb`), this one names " +
                         std::to_string(item.size()));
        }
        const auto pair = *item.begin();
        rule.where(scalar(pair.first, "an attribute name"),
                   scalar(pair.second, "the value of " + pair.first.Scalar()));
      } else {
        rule.where(scalar(item, "a condition"));
      }
    }
  }

  void read_per(const YAML::Node& node, Rule& rule) const {
    const std::string text = scalar(node, "per");
    if (text == per_transaction_word) {
      rule.per_transaction();
      return;
    }
    try {
      rule.per(parse_period(text));
    } catch (const Error&) {
      fail(node, "per " + detail::quote_for_message(text) +
                     " is not minute, hour, day, week, month, year or transaction");
    }
  }

  bool read_bool(const YAML::Node& node, const std::string& what) const {
    const std::string text = scalar(node, what);
    if (text != "true" && text != "false") {
      fail(node, what + " " + detail::quote_for_message(text) + " must be true or false");
    }
    return text == "true";
  }

  FailurePolicy read_policy(const YAML::Node& node) const {
    const std::string text = scalar(node, "on_redis_failure");
    for (const auto policy :
         {FailurePolicy::raise, FailurePolicy::allow, FailurePolicy::deny, FailurePolicy::local}) {
      if (text == policy_name(policy)) {
        return policy;
      }
    }
    fail(node, "on_redis_failure " + detail::quote_for_message(text) +
                   " is not raise, allow, deny or local");
  }

  double number(const YAML::Node& node, const std::string& what) const {
    const std::string text = scalar(node, what);
    double value = 0.0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) {
      fail(node, what + " " + detail::quote_for_message(text) + " is not a number");
    }
    return value;
  }

  std::string source_;
  std::string rule_; ///< the rule being read, for messages; empty outside a rule
};

// The shortest text that reads back as exactly `value` (0.1, not 0.10000000000000001).
std::string shortest(double value) {
  std::array<char, 32> text{};
  const auto result = std::to_chars(text.data(), text.data() + text.size(), value);
  return std::string(text.data(), result.ptr);
}

} // namespace

RuleSet rules_from_yaml(std::string_view text, std::string_view source_name) {
  Reader reader(source_name);
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& error) {
    reader.fail_at(error.mark, error.msg);
  }
  if (documents.size() != 1) {
    // A second document would be ignored by a reader that takes the first: refuse both.
    reader.fail_at(documents.empty() ? YAML::Mark::null_mark() : documents[1].Mark(),
                   documents.empty()
                       ? "no YAML document (write `rules: []` for an empty set)"
                       : "more than one YAML document (`---`): put every rule in one");
  }
  return reader.read(documents.front());
}

RuleSet rules_from_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  if (!file || !(text << file.rdbuf())) {
    throw Error(errc::invalid_argument,
                "rules file " + detail::quote_for_message(path) + " cannot be read");
  }
  return rules_from_yaml(text.str(), path);
}

std::string to_yaml(const RuleSet& rules) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "format" << YAML::Value << format_version;
  if (rules.attributes() != RuleSet::default_attributes()) {
    out << YAML::Key << "attributes" << YAML::Value << YAML::Flow << rules.attributes();
  }
  out << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
  for (const auto& rule : rules.rules()) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << rule.name();
    // `where: [merchant, dept]` when every value is a wildcard, else one condition a line.
    out << YAML::Key << "where" << YAML::Value;
    if (rule.specificity() == 0) {
      out << YAML::Flow;
    }
    out << YAML::BeginSeq;
    for (const auto& condition : rule.conditions()) {
      if (condition.is_wildcard()) {
        out << condition.attribute;
      } else {
        out << YAML::BeginMap << YAML::Key << condition.attribute << YAML::Value << condition.value
            << YAML::EndMap;
      }
    }
    out << YAML::EndSeq << YAML::Key << "per" << YAML::Value;
    if (rule.kind() == Rule::Kind::per_transaction) {
      out << std::string(per_transaction_word);
    } else {
      out << std::string(to_string(rule.period().value_or(Period::day)));
    }
    if (rule.max_count()) {
      out << YAML::Key << "max_count" << YAML::Value << *rule.max_count();
    }
    if (rule.max_amount()) {
      out << YAML::Key << "max_amount" << YAML::Value << *rule.max_amount();
    }
    if (rule.is_blocking()) {
      out << YAML::Key << "blocking" << YAML::Value << true;
    }
    if (rule.failure_policy() != FailurePolicy::raise) {
      out << YAML::Key << "on_redis_failure" << YAML::Value << policy_name(rule.failure_policy());
      if (rule.failure_policy() == FailurePolicy::local) {
        out << YAML::Key << "local_share" << YAML::Value << shortest(rule.local_share());
      }
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

} // namespace limitcounter
