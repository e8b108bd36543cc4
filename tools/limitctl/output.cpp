#include "output.hpp"

#include <algorithm>
#include <iostream>

#include <limitcounter/key_part.hpp>

namespace limitctl {
namespace {

std::string quoted(const std::string& text) {
  return "\"" + limitcounter::detail::escape_text(text, limitcounter::detail::Escape::json) + "\"";
}

void pad(std::ostream& out, int indent) {
  out << std::string(static_cast<std::size_t>(indent), ' ');
}

} // namespace

std::string shown(std::string_view text) {
  return limitcounter::detail::escape_text(text, limitcounter::detail::Escape::plain);
}

Json& Json::set(std::string key, Json value) {
  members_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  items_.push_back(std::move(value));
  return *this;
}

std::string Json::scalar_text() const {
  switch (type_) {
  case Type::null: return "-";
  case Type::boolean: return integer_ != 0 ? "true" : "false";
  case Type::integer: return std::to_string(integer_);
  default: return shown(text_);
  }
}

std::string Json::dump() const {
  switch (type_) {
  case Type::null: return "null";
  case Type::string: return quoted(text_);
  case Type::array: {
    std::string out = "[";
    for (std::size_t i = 0; i < items_.size(); ++i) {
      out += (i ? "," : "") + items_[i].dump();
    }
    return out + "]";
  }
  case Type::object: {
    std::string out = "{";
    for (std::size_t i = 0; i < members_.size(); ++i) {
      out += (i ? "," : "") + quoted(members_[i].first) + ":" + members_[i].second.dump();
    }
    return out + "}";
  }
  default: return scalar_text();
  }
}

void Json::print_object(std::ostream& out, int indent) const {
  for (const auto& [key, value] : members_) {
    pad(out, indent);
    if (value.type_ == Type::string && value.text_.find('\n') != std::string::npos) {
      // Several lines (a rule set's YAML): a block below the key, each line escaped.
      out << shown(key) << ":\n";
      std::size_t begin = 0;
      while (begin < value.text_.size()) {
        const std::size_t end = std::min(value.text_.find('\n', begin), value.text_.size());
        pad(out, indent + 2);
        out << shown(std::string_view(value.text_).substr(begin, end - begin)) << '\n';
        begin = end + 1;
      }
    } else if (value.is_scalar()) {
      out << shown(key) << ": " << value.scalar_text() << '\n';
    } else if (value.type_ == Type::array && value.items_.empty()) {
      out << shown(key) << ": (none)\n";
    } else {
      out << shown(key) << ":\n";
      if (value.type_ == Type::object) {
        value.print_object(out, indent + 2);
      } else {
        value.print_array(out, indent + 2);
      }
    }
  }
}

// An array of objects is a table whose columns are the first object's keys; scalars are one
// per line.
void Json::print_array(std::ostream& out, int indent) const {
  if (items_.empty() || items_.front().type_ != Type::object) {
    for (const Json& item : items_) {
      pad(out, indent);
      out << (item.is_scalar() ? item.scalar_text() : item.dump()) << '\n';
    }
    return;
  }
  const auto& columns = items_.front().members_;
  std::vector<std::vector<std::string>> cells(items_.size() + 1);
  for (const auto& column : columns) {
    cells[0].push_back(shown(column.first));
  }
  for (std::size_t row = 0; row < items_.size(); ++row) {
    for (const auto& column : columns) {
      std::string cell = "-";
      for (const auto& [key, value] : items_[row].members_) {
        if (key == column.first) {
          cell = value.is_scalar() ? value.scalar_text() : value.dump();
        }
      }
      cells[row + 1].push_back(cell);
    }
  }
  std::vector<std::size_t> widths(columns.size(), 0);
  for (const auto& line : cells) {
    for (std::size_t i = 0; i < line.size(); ++i) {
      widths[i] = std::max(widths[i], line[i].size());
    }
  }
  for (const auto& line : cells) {
    pad(out, indent);
    for (std::size_t i = 0; i < line.size(); ++i) {
      out << line[i];
      if (i + 1 < line.size()) {
        out << std::string(widths[i] - line[i].size() + 2, ' ');
      }
    }
    out << '\n';
  }
}

void Json::print_text(std::ostream& out) const {
  if (type_ == Type::object) {
    print_object(out, 0);
  } else if (type_ == Type::array) {
    print_array(out, 0);
  } else {
    out << scalar_text() << '\n';
  }
}

void print(const Json& value, bool json) {
  if (json) {
    std::cout << value.dump() << '\n';
  } else {
    value.print_text(std::cout);
  }
}

} // namespace limitctl
