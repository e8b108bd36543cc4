#include <catch2/catch.hpp>

#include <thread>

#include "limit_counter/exhausted_cache.hpp"

using namespace std::chrono_literals;
using limitcounter::Denial;
using limitcounter::Error;
using limitcounter::ExhaustedCacheOptions;
using limitcounter::Metric;
using limitcounter::TimePoint;
using limitcounter::detail::exhausted_place;
using limitcounter::detail::ExhaustedCache;
using limitcounter::detail::ExhaustedPlace;

namespace {

using Steady = ExhaustedCache::SteadyTime;

const TimePoint wall{std::chrono::hours{24 * 20000}}; // a wall clock time in 2024
const TimePoint window_end = wall + 1h;
const Steady t0{std::chrono::hours{1}};

ExhaustedPlace place(const std::string& field = "m1") {
  return exhausted_place("daily", "20240510", field, window_end);
}

// A count limit of 10, full (10 used), and an amount limit of 1000 with 900 used.
const Denial count_full{"daily", Metric::count, 10, 10, 1};
const Denial amount_full{"daily", Metric::amount, 1000, 900, 200};

std::optional<Denial> look(ExhaustedCache& cache, const ExhaustedPlace& at, std::int64_t amount,
                           Steady now = t0, TimePoint when = wall, const std::string& id = "t1") {
  return cache.lookup({at}, id, amount, when, wall, now);
}

} // namespace

TEST_CASE("exhausted cache: a full count limit denies any amount until its staleness bound",
          "[exhausted_cache]") {
  ExhaustedCache cache(1000ms, 100);
  CHECK_FALSE(look(cache, place(), 1)); // nothing learnt yet
  cache.remember(place(), count_full, cache.generation(), wall, t0);
  const auto denial = look(cache, place(), 0, t0 + 999ms);
  REQUIRE(denial);
  CHECK(denial->rule == "daily");
  CHECK(denial->metric == Metric::count);
  CHECK(denial->limit == 10);
  CHECK(denial->used == 10);
  CHECK(denial->requested == 1);
  CHECK_FALSE(look(cache, place("m2"), 1, t0 + 1ms)); // another dimension
  CHECK_FALSE(look(cache, place(), 1, t0 + 1000ms));  // stale: Redis decides again
  CHECK(cache.size() == 0);                           // and the entry is gone
}

TEST_CASE("exhausted cache: a full amount limit denies only what would not fit",
          "[exhausted_cache]") {
  ExhaustedCache cache(1000ms, 100);
  cache.remember(place(), amount_full, cache.generation(), wall, t0);
  CHECK_FALSE(look(cache, place(), 100)); // 900 + 100 fits in 1000: Redis decides
  const auto denial = look(cache, place(), 101);
  REQUIRE(denial);
  CHECK(denial->metric == Metric::amount);
  CHECK(denial->used == 900);
  CHECK(denial->requested == 101);
}

TEST_CASE("exhausted cache: an entry ends with its window, by the transaction's time",
          "[exhausted_cache]") {
  ExhaustedCache cache(1h, 100);
  cache.remember(place(), count_full, cache.generation(), wall, t0);
  CHECK(look(cache, place(), 1, t0, window_end - 1ms));
  CHECK_FALSE(look(cache, place(), 1, t0, window_end));
  CHECK(cache.size() == 0);
}

TEST_CASE("exhausted cache: clear drops every entry and a denial begun before it",
          "[exhausted_cache]") {
  ExhaustedCache cache(1h, 100);
  const auto before = cache.generation();
  cache.remember(place("m1"), count_full, before, wall, t0);
  cache.clear(); // e.g. a refund: room may have been freed
  CHECK_FALSE(look(cache, place("m1"), 1));
  // A denial whose call was sent before the clear arrives after it: not remembered.
  cache.remember(place("m2"), count_full, before, wall, t0);
  CHECK_FALSE(look(cache, place("m2"), 1));
  cache.remember(place("m2"), count_full, cache.generation(), wall, t0);
  CHECK(look(cache, place("m2"), 1));
}

TEST_CASE("exhausted cache: a hold of this process keeps its counter out until it ends",
          "[exhausted_cache]") {
  ExhaustedCache cache(1h, 100);
  cache.remember(place(), count_full, cache.generation(), wall, t0);
  cache.note_hold({place()}, wall + 15min, wall);
  CHECK_FALSE(look(cache, place(), 1)); // the hold's expiry would free room
  cache.remember(place(), count_full, cache.generation(), wall, t0);
  CHECK(cache.size() == 0); // not kept while the hold may expire
  cache.remember(place(), count_full, cache.generation(), wall + 15min, t0);
  CHECK(cache.lookup({place()}, "t1", 1, wall, wall + 15min, t0)); // the hold has ended
}

TEST_CASE("exhausted cache: holds beyond max_entries keep every counter out until they end",
          "[exhausted_cache]") {
  ExhaustedCache cache(1h, 2);
  cache.note_hold({place("a"), place("b")}, wall + 10min, wall);
  cache.note_hold({place("c")}, wall + 5min, wall); // a hold of a or b is forgotten
  cache.remember(place("d"), count_full, cache.generation(), wall + 9min, t0);
  CHECK(cache.size() == 0); // the forgotten hold may still be there
  cache.remember(place("d"), count_full, cache.generation(), wall + 10min, t0);
  CHECK(cache.size() == 1);
}

TEST_CASE("exhausted cache: an unsettled id goes to Redis until settled", "[exhausted_cache]") {
  ExhaustedCache cache(1h, 100);
  cache.remember(place(), count_full, cache.generation(), wall, t0);
  cache.unsettled("t1"); // its call may have run: Redis replays what it decided
  CHECK_FALSE(look(cache, place(), 1, t0, wall, "t1"));
  CHECK(look(cache, place(), 1, t0, wall, "t2"));
  cache.settled("t1");
  CHECK(look(cache, place(), 1, t0, wall, "t1"));
}

TEST_CASE("exhausted cache: at most max_entries, the oldest makes room", "[exhausted_cache]") {
  ExhaustedCache cache(1h, 2);
  cache.remember(place("a"), count_full, cache.generation(), wall, t0);
  cache.remember(place("b"), count_full, cache.generation(), wall, t0);
  cache.remember(place("a"), count_full, cache.generation(), wall, t0); // a is now the newest
  cache.remember(place("c"), count_full, cache.generation(), wall, t0);
  CHECK(cache.size() == 2);
  CHECK(look(cache, place("a"), 1));
  CHECK_FALSE(look(cache, place("b"), 1));
  CHECK(look(cache, place("c"), 1));
}

TEST_CASE("exhausted cache: only count and amount denials are remembered", "[exhausted_cache]") {
  ExhaustedCache cache(1h, 100);
  cache.remember(place(), Denial{"daily", Metric::single_amount, 10, 0, 20}, cache.generation(),
                 wall, t0);
  cache.remember(place(), Denial{"daily", Metric::unavailable, 0, 0, 20}, cache.generation(), wall,
                 t0);
  CHECK(cache.size() == 0);
}

TEST_CASE("exhausted cache: options are checked", "[exhausted_cache]") {
  ExhaustedCacheOptions options;
  CHECK(ExhaustedCache::make(options) == nullptr); // off by default
  options.enabled = true;
  CHECK(ExhaustedCache::make(options) != nullptr);
  options.max_staleness = 0ms;
  CHECK_THROWS_WITH(ExhaustedCache::make(options), Catch::Contains("max_staleness 0 ms"));
  options.max_staleness = 1ms;
  options.max_entries = 0;
  CHECK_THROWS_WITH(ExhaustedCache::make(options), Catch::Contains("max_entries 0"));
}

TEST_CASE("exhausted cache: many threads learn, look up and clear at once",
          "[exhausted_cache][threads]") {
  ExhaustedCache cache(1h, 64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const auto at = place("d" + std::to_string(i % 100));
        switch ((t + i) % 5) {
        case 0: cache.remember(at, count_full, cache.generation(), wall, t0); break;
        case 1: cache.note_hold({at}, wall + 1ms, wall); break;
        case 2: cache.unsettled("t" + std::to_string(i)); break;
        case 3:
          if (i % 97 == 0) {
            cache.clear();
          }
          break;
        default: look(cache, at, 1);
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(cache.size() <= 64); // the bound held under contention
}
