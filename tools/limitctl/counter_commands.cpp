// limitctl usage | top | tx | adjust: the period counters and limits transactions.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <random>

#include <limitcounter/limit_counter.hpp>

#include "limitctl.hpp"

namespace limitctl {
namespace {

using limitcounter::LimitCounter;
using limitcounter::Period;

LimitCounter counter_of(const Context& context) {
  limitcounter::LimitCounterOptions options;
  options.key_prefix = context.prefix_or(limitcounter::CounterKeys::default_prefix);
  options.counter_buckets = context.buckets;
  return LimitCounter(context.redis(), context.calendar(), options);
}

Json window_json(Period period, const limitcounter::Window& window) {
  return Json::object()
      .set("period", std::string(limitcounter::to_string(period)))
      .set("window", window.id)
      .set("start", format_time(window.start))
      .set("end", format_time(window.end));
}

Json optional_json(const std::optional<std::int64_t>& value) {
  return value ? Json(*value) : Json();
}

void add_usage(CLI::App& app, Context& context) {
  struct Args {
    std::string counter, dimension, period, at;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = app.add_subcommand(
      "usage", "count and amount of one dimension in each period's window (minute, hour, day, "
               "week, month, year, or --period) containing --at");
  command->add_option("COUNTER", args->counter, "counter name, e.g. channel+transType+dept")
      ->required();
  command->add_option("DIMENSION", args->dimension, "values joined by '+', e.g. Ali+Deduct+cmb")
      ->required();
  command->add_option("--period", args->period, "minute, hour, day, week, month or year");
  command->add_option("--at", args->at, "ISO 8601 time (default now; no offset: --tz)");
  command->callback([&context, args] {
    const auto dimension = parse_dimension(args->dimension);
    const auto periods = periods_to_show(args->period);
    const auto at = context.time(args->at);
    LimitCounter counter = counter_of(context);
    Json windows = Json::array();
    const auto& keys = counter.keys();
    for (const Period period : periods) {
      const auto usage = counter.usage(args->counter, dimension, period, at);
      const auto window = counter.calendar().window(period, at);
      windows.push(window_json(period, window)
                       .set("key", keys.window(keys.tag(args->counter, dimension.field()), period,
                                               window.id))
                       .set("count", usage.count)
                       .set("amount", usage.amount));
    }
    context.show(Json::object()
                     .set("counter", args->counter)
                     .set("dimension", dimension.field())
                     .set("windows", std::move(windows)));
  });
}

void add_top(CLI::App& app, Context& context) {
  struct Args {
    std::string counter, period, at, by = "amount";
    int n = 10;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = app.add_subcommand(
      "top", "the busiest dimensions of a counter's window (all pages of HSCAN)");
  command->add_option("COUNTER", args->counter, "counter name")->required();
  command->add_option("PERIOD", args->period, "minute, hour, day, week, month or year")->required();
  command->add_option("--n", args->n, "how many (default 10)")->check(CLI::Range(1, 1000000));
  command->add_option("--at", args->at, "ISO 8601 time (default now; no offset: --tz)");
  command->add_option("--by", args->by, "sort by count or amount (default amount)")
      ->check(CLI::IsMember({"count", "amount"}));
  command->callback([&context, args] {
    const Period period = periods_to_show(args->period).front();
    const auto at = context.time(args->at);
    LimitCounter counter = counter_of(context);
    // HSCAN may list a dimension twice: keyed by field, each is counted once.
    std::map<std::string, limitcounter::Usage> seen;
    LimitCounter::DimensionPage page;
    std::string cursor = "0";
    do {
      page = counter.dimensions(args->counter, period, at, cursor, 1000);
      for (const auto& item : page.dimensions) {
        seen[item.dimension.field()] = item.usage;
      }
      cursor = page.cursor;
    } while (!page.done());
    std::vector<std::pair<std::string, limitcounter::Usage>> rows(seen.begin(), seen.end());
    const bool by_count = args->by == "count";
    std::stable_sort(rows.begin(), rows.end(), [by_count](const auto& a, const auto& b) {
      return by_count ? a.second.count > b.second.count : a.second.amount > b.second.amount;
    });
    Json top = Json::array();
    for (std::size_t i = 0; i < rows.size() && i < static_cast<std::size_t>(args->n); ++i) {
      top.push(Json::object()
                   .set("dimension", rows[i].first)
                   .set("count", rows[i].second.count)
                   .set("amount", rows[i].second.amount));
    }
    context.show(window_json(period, page.window)
                     .set("counter", args->counter)
                     .set("dimensions_seen", static_cast<std::int64_t>(rows.size()))
                     .set("top", std::move(top)));
  });
}

Json decision_json(const limitcounter::Decision& decision) {
  Json rules = Json::array();
  for (const auto& rule : decision.rules) {
    rules.push(Json::object()
                   .set("rule", rule.rule)
                   .set("period", std::string(limitcounter::to_string(rule.period)))
                   .set("window", rule.window_id)
                   .set("count", rule.used.count)
                   .set("amount", rule.used.amount)
                   .set("max_count", optional_json(rule.max_count))
                   .set("max_amount", optional_json(rule.max_amount))
                   .set("resets_at", format_time(rule.resets_at)));
  }
  Json denial;
  if (decision.denial) {
    denial = Json::object()
                 .set("rule", decision.denial->rule)
                 .set("metric", std::string(limitcounter::to_string(decision.denial->metric)))
                 .set("limit", decision.denial->limit)
                 .set("used", decision.denial->used)
                 .set("requested", decision.denial->requested);
  }
  return Json::object()
      .set("verdict", decision.allowed()                                            ? "allowed"
                      : decision.verdict == limitcounter::Decision::Verdict::denied ? "denied"
                                                                                    : "cancelled")
      .set("denial", std::move(denial))
      .set("windows", std::move(rules));
}

void add_tx(CLI::App& app, Context& context) {
  struct Args {
    std::string id;
    std::vector<std::string> counters;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = app.add_subcommand(
      "tx", "a limits transaction's record: state, amount, refunds, its first decision "
            "(windows and rules it touched); exit 1 when Redis has none");
  command->add_option("ID", args->id, "transaction id")->required();
  command->add_option("--counter", args->counters,
                      "on a cluster: a counter whose slot may hold the record of a transaction "
                      "of one slot (repeatable)");
  command->callback([&context, args] {
    LimitCounter counter = counter_of(context);
    const auto record = counter.transaction_record(args->id, args->counters);
    if (!record) {
      throw Failure(exit_not_found, "transaction " + args->id +
                                        " not found (never decided, "
                                        "or past its replay horizon)");
    }
    Json refunds = Json::array();
    for (const auto& [refund_id, amount] : record->refunds) {
      refunds.push(Json::object().set("refund_id", refund_id).set("amount", amount));
    }
    Json keys = Json::array();
    for (const auto& key : record->counter_keys) {
      keys.push(key);
    }
    Json records = Json::array();
    for (const auto& key : record->records) {
      records.push(key);
    }
    const auto time_json = [](const std::optional<limitcounter::TimePoint>& at) {
      return at ? Json(format_time(*at)) : Json();
    };
    context.show(Json::object()
                     .set("id", args->id)
                     .set("state", std::string(to_string(record->state)))
                     .set("amount", record->amount)
                     .set("refunded", record->refunded)
                     .set("decided_at", time_json(record->decided_at))
                     .set("hold_expires", time_json(record->hold_expires))
                     .set("record_expires", time_json(record->expires_at))
                     .set("decision", record->decision ? decision_json(*record->decision) : Json())
                     .set("refunds", std::move(refunds))
                     .set("counter_keys", std::move(keys))
                     .set("records", std::move(records)));
  });
}

std::string new_correction_id() {
  std::random_device device;
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(
                          limitcounter::Clock::now().time_since_epoch())
                          .count();
  return "limitctl-" + std::to_string(millis) + "-" + std::to_string(device() % 1000000);
}

void add_adjust(CLI::App& app, Context& context) {
  struct Args {
    std::string counter, dimension, period, at, reason, id;
    std::string author = std::getenv("USER") != nullptr ? std::getenv("USER") : "limitctl";
    std::int64_t count = 0, amount = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = app.add_subcommand(
      "adjust", "correct a counter (negative values remove) and append who, why, before and "
                "after to its audit stream <prefix>{<counter>}:audit (with --buckets N > 1: "
                "<prefix>{<bucket>:<counter>}:audit, the dimension's bucket), in one script");
  command->add_option("COUNTER", args->counter, "counter name")->required();
  command->add_option("DIMENSION", args->dimension, "values joined by '+'")->required();
  command->add_option("PERIOD", args->period, "minute, hour, day, week, month or year")->required();
  command->add_option("--count", args->count, "transactions to add (negative: remove)");
  command->add_option("--amount", args->amount, "minor units to add (negative: remove)");
  command->add_option("--reason", args->reason, "why (required; kept in the audit entry)")
      ->required();
  command->add_option("--author", args->author, "who (default $USER)");
  command->add_option("--at", args->at, "a time in the window (default now)");
  command->add_option("--id", args->id,
                      "correction id (default generated and printed): a retry with the same id "
                      "applies nothing twice");
  command->callback([&context, args] {
    const auto dimension = parse_dimension(args->dimension);
    const Period period = periods_to_show(args->period).front();
    const auto at = context.time(args->at);
    if (args->id.empty()) {
      args->id = new_correction_id();
    }
    LimitCounter counter = counter_of(context);
    limitcounter::CounterCorrection correction{args->id, args->count, args->amount, args->author,
                                               args->reason};
    limitcounter::CorrectionResult result;
    try {
      result = counter.adjust(args->counter, dimension, period, correction, at);
    } catch (const limitcounter::Error& error) {
      if (error.outcome() == limitcounter::Outcome::unknown) {
        throw Failure(exit_redis, std::string(error.what()) + " (may have run: retry with --id " +
                                      args->id + ")");
      }
      throw;
    }
    context.show(window_json(period, result.window)
                     .set("id", args->id)
                     .set("counter", args->counter)
                     .set("dimension", dimension.field())
                     .set("before_count", result.before.count)
                     .set("before_amount", result.before.amount)
                     .set("after_count", result.after.count)
                     .set("after_amount", result.after.amount)
                     .set("audit_id", result.audit_id)
                     .set("replayed", result.replayed));
  });
}

} // namespace

void add_counter_commands(CLI::App& app, Context& context) {
  add_usage(app, context);
  add_top(app, context);
  add_tx(app, context);
  add_adjust(app, context);
}

} // namespace limitctl
