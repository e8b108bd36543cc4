// limitctl packet show | dead-letters | requeue.
#include <limitcounter/red_packet.hpp>

#include "limitctl.hpp"

namespace limitctl {
namespace {

using limitcounter::RedPacketPool;

struct PacketArgs {
  std::uint32_t partitions = limitcounter::RedPacketOptions{}.partitions;
};

RedPacketPool pool_of(const Context& context, const PacketArgs& args) {
  limitcounter::RedPacketOptions options;
  options.key_prefix = context.prefix_or(limitcounter::RedPacketKeys::default_prefix);
  options.partitions = args.partitions;
  return RedPacketPool(context.redis(), options);
}

CLI::App* packet_command(CLI::App& packet, const std::string& name, const std::string& about,
                         PacketArgs& args) {
  CLI::App* command = packet.add_subcommand(name, about);
  command->add_option("--partitions", args.partitions,
                      "payout partitions of the pool (default 16, as the library)");
  return command;
}

// "<packet>:<user>" (ids are key parts: no ':' inside).
std::pair<std::string, std::string> split_task(const std::string& task) {
  const auto cut = task.find(':');
  if (cut == std::string::npos || task.find(':', cut + 1) != std::string::npos) {
    throw Failure(exit_usage, "task \"" + task + "\" is not <packet>:<user>");
  }
  return {task.substr(0, cut), task.substr(cut + 1)};
}

void add_show(CLI::App& packet, Context& context) {
  struct Args : PacketArgs {
    std::string id;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = packet_command(
      packet, "show",
      "a packet's state, what is left (count, amount) and its grabs; exit 1 when unknown", *args);
  command->add_option("ID", args->id, "packet id")->required();
  command->callback([&context, args] {
    const auto status = pool_of(context, *args).status(args->id);
    if (!status) {
      throw Failure(exit_not_found, "red packet " + args->id + " not found");
    }
    context.show(Json::object()
                     .set("id", args->id)
                     .set("state", std::string(to_string(status->state)))
                     .set("total", status->total)
                     .set("count", status->count)
                     .set("packets_left", status->packets_left)
                     .set("amount_left", status->amount_left)
                     .set("grabs", status->grabs)
                     .set("losing_users", status->losing_users)
                     .set("expires_at", format_time(status->expires_at)));
  });
}

void add_dead_letters(CLI::App& packet, Context& context) {
  struct Args : PacketArgs {
    std::optional<std::uint32_t> partition;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = packet_command(
      packet, "dead-letters", "payouts that failed every attempt, of one partition or all", *args);
  command->add_option("--partition", args->partition, "one partition (default all)");
  command->callback([&context, args] {
    RedPacketPool pool = pool_of(context, *args);
    Json dead = Json::array();
    const std::uint32_t first = args->partition.value_or(0);
    const std::uint32_t end = args->partition ? first + 1 : args->partitions;
    for (std::uint32_t p = first; p < end; ++p) {
      for (const std::string& entry : pool.dead_payouts(p)) {
        // "<packet>:<user>:<amount>:<attempts>"
        const auto last = entry.rfind(':');
        const auto middle = entry.rfind(':', last - 1);
        dead.push(Json::object()
                      .set("partition", static_cast<std::int64_t>(p))
                      .set("task", entry.substr(0, middle))
                      .set("amount",
                           std::int64_t{std::stoll(entry.substr(middle + 1, last - middle - 1))})
                      .set("attempts", std::int64_t{std::stoll(entry.substr(last + 1))}));
      }
    }
    context.show(Json::object().set("dead_letters", std::move(dead)));
  });
}

void add_requeue(CLI::App& packet, Context& context) {
  struct Args : PacketArgs {
    std::vector<std::string> tasks;
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = packet_command(
      packet, "requeue",
      "move dead payouts back to their queue (due now, attempts reset); exit 1 if one was not "
      "dead-lettered (e.g. requeued already)",
      *args);
  command->add_option("TASK", args->tasks, "<packet>:<user>, as dead-letters prints it")
      ->required();
  command->callback([&context, args] {
    context.writes = true;
    std::vector<std::pair<std::string, std::string>> tasks;
    for (const auto& task : args->tasks) {
      tasks.push_back(split_task(task)); // every argument checked before anything is moved
    }
    RedPacketPool pool = pool_of(context, *args);
    Json results = Json::array();
    bool all = true;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const auto result = pool.requeue_payout(tasks[i].first, tasks[i].second);
      // a replay (requeued before) is not a move now: it reports requeued false, as not_dead
      const bool requeued =
          result.status == limitcounter::RequeueResult::Status::requeued && !result.replayed;
      all = all && requeued;
      results.push(Json::object().set("task", args->tasks[i]).set("requeued", requeued));
    }
    context.show(Json::object().set("requeue", std::move(results)));
    if (!all) {
      throw Failure(exit_not_found, "a task was not dead-lettered (see requeued: false)");
    }
  });
}

} // namespace

void add_packet_commands(CLI::App& app, Context& context) {
  CLI::App* packet = app.add_subcommand("packet", "red packets and their payouts (job 5)");
  packet->require_subcommand(1);
  add_show(*packet, context);
  add_dead_letters(*packet, context);
  add_requeue(*packet, context);
}

} // namespace limitctl
