// LimitCounter's listing: the dimensions of a window, page by page, and a cap's usage.
// Reads only: nothing here writes to Redis.
#include "limit_counter/listing.hpp"

#include "limit_counter/limit_counter_impl.hpp"

#include "limit_counter/counter_codec.hpp"

namespace limitcounter {
namespace {

// The most a page may ask for: HSCAN's COUNT is only a hint, but a huge one would make a
// single call read a whole big window at once.
constexpr std::int64_t max_page_count = 10'000;

bool digits(std::string_view text) {
  return !text.empty() && text.size() <= 20 &&
         text.find_first_not_of("0123456789") == std::string_view::npos;
}

// Where a page starts: a bucket and the HSCAN cursor in it. With one bucket a page's cursor is
// HSCAN's own; with several it is "<bucket>:<HSCAN cursor>" ("0" starts at bucket 0).
struct ScanPosition {
  std::uint32_t bucket = 0;
  std::string cursor = "0";
};

ScanPosition parse_cursor(std::string_view cursor, std::uint32_t buckets) {
  const auto colon = cursor.find(':');
  ScanPosition position;
  bool valid = digits(cursor);
  if (valid) {
    position.cursor = std::string(cursor);
  } else if (buckets > 1 && colon != std::string_view::npos && colon <= 5 &&
             digits(cursor.substr(0, colon)) && digits(cursor.substr(colon + 1))) {
    position.bucket = static_cast<std::uint32_t>(std::stoul(std::string(cursor.substr(0, colon))));
    position.cursor = std::string(cursor.substr(colon + 1));
    valid = position.bucket < buckets;
  }
  if (!valid || (buckets > 1 && colon == std::string_view::npos && cursor != "0")) {
    throw Error(errc::invalid_argument,
                "scan cursor " + detail::quote_for_message(cursor) +
                    " is not a cursor returned by a previous page (or \"0\") with " +
                    std::to_string(buckets) + " counter bucket(s)");
  }
  return position;
}

// A hash field back into its Dimension; a field this library did not write is a protocol error.
Dimension dimension_of(const std::string& field) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (auto cut = field.find(Dimension::separator); cut != std::string::npos;
       cut = field.find(Dimension::separator, start)) {
    parts.push_back(field.substr(start, cut - start));
    start = cut + 1;
  }
  parts.push_back(field.substr(start));
  try {
    return Dimension(parts);
  } catch (const Error& error) {
    throw Error(errc::protocol_error,
                "field " + detail::quote_for_message(field) +
                    " is not a dimension: " + error.what(),
                Outcome::failed);
  }
}

} // namespace

namespace detail {

void unless_error(const Reply& reply, std::string_view what) {
  if (reply.is_error()) {
    throw Error(errc::server_error, std::string(what) + ": " + reply.as_string(), Outcome::failed);
  }
}

Usage read_usage(Redis& redis, const std::string& key, const std::string& field,
                 std::string_view what) {
  const Reply reply = redis.command({"HGET", key, field});
  unless_error(reply, what);
  return reply.is_nil() ? Usage{} : parse_counter_value(reply.as_string());
}

} // namespace detail

LimitCounter::DimensionPage LimitCounter::Impl::dimensions(std::string_view counter, Period period,
                                                           TimePoint at, std::string_view cursor,
                                                           std::int64_t count) {
  CounterKeys::validate_counter_name(counter);
  ScanPosition position = parse_cursor(cursor, keys_.buckets());
  if (count < 1 || count > max_page_count) {
    throw Error(errc::invalid_argument, "page count " + std::to_string(count) +
                                            " must be from 1 to " + std::to_string(max_page_count));
  }
  DimensionPage page;
  page.window = calendar_.window(period, at);
  // Bucket after bucket until the page has `count` dimensions or the last bucket is done.
  while (true) {
    const Reply reply = redis_.command(
        {"HSCAN", keys_.window(keys_.bucket_tag(counter, position.bucket), period, page.window.id),
         position.cursor, "COUNT",
         std::to_string(count - static_cast<std::int64_t>(page.dimensions.size()))});
    detail::unless_error(reply, "HSCAN of counter " + std::string(counter));
    position.cursor = reply.at(0).as_string();
    const auto& pairs = reply.at(1).as_array();
    if (pairs.size() % 2 != 0) {
      throw Error(errc::protocol_error,
                  "HSCAN of counter " + std::string(counter) + " returned an odd field list",
                  Outcome::failed);
    }
    for (std::size_t i = 0; i < pairs.size(); i += 2) {
      page.dimensions.push_back({dimension_of(pairs[i].as_string()),
                                 detail::parse_counter_value(pairs[i + 1].as_string())});
    }
    if (position.cursor == "0" && ++position.bucket == keys_.buckets()) {
      page.cursor = "0";
      return page;
    }
    if (static_cast<std::int64_t>(page.dimensions.size()) >= count) {
      page.cursor = keys_.buckets() == 1 ? position.cursor
                                         : std::to_string(position.bucket) + ":" + position.cursor;
      return page;
    }
  }
}

LimitCounter::CapUsage LimitCounter::Impl::cap_usage(std::string_view cap, std::string_view subject,
                                                     TimePoint at) {
  validate_key_part("cap name", cap);
  validate_key_part("cap subject", subject);
  CapUsage result;
  result.window = calendar_.window(Period::day, at);
  result.used = detail::read_usage(redis_, keys_.cap_window(cap, result.window.id),
                                   std::string(subject), "HGET of cap " + std::string(cap))
                    .count;
  return result;
}

} // namespace limitcounter
