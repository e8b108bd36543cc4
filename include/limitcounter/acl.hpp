#pragma once
// The least-privilege Redis ACL for the library's user.

#include <string>
#include <vector>

namespace limitcounter {

/// The commands the library sends, directly or from its scripts (Redis checks the
/// commands a script calls against the calling user too).
inline const std::vector<std::string>& required_commands() {
  static const std::vector<std::string> commands{
      // sent directly
      "evalsha", "script|load", "hget", "hmget", "hscan", "zrangebyscore", "lrange", "time",
      "select", "ping",
      // the scripts that come as a Functions library (Script::library): without these two the
      // library runs them by EVALSHA, which costs Redis more per call (docs/SECURITY.md)
      "fcall", "function|load",
      // sent by the cluster sweep (LimitCounter::finish_interrupted) to every master
      "scan",
      // sent once per new connection: the server check (INFO server, INFO memory, COMMAND INFO
      // evalsha script|load hget hmget hset)
      "info", "command|info",
      // sent by the cluster router: the slot map, and the redirection of a migrating slot
      "cluster|slots", "asking",
      // with Redis Sentinel: is the server the sentinels name the master? (The sentinels' own
      // user needs "sentinel|get-master-addr-by-name".)
      "role",
      // called by lua/*.lua
      "hset", "hdel", "hincrby", "exists", "del", "pexpire", "pexpireat", "zadd", "zrem", "zcard",
      "zrange", "zscore", "zremrangebyscore", "lpop", "rpush", "xadd", "xack", "xgroup|create",
      "xreadgroup",
      // a limits transaction's record and counter set are strings (lua/limit.lua)
      "get", "set", "type",
      // the wallet journal: ordered reads, dead letters, trimming (lua/journal.lua), dead
      // letters read directly
      "xpending", "xclaim", "xrange", "xtrim", "xinfo|groups", "sadd", "srem", "sismember",
      // the operator calls behind limitctl: a transaction's record (lua/limit.lua inspect), a
      // packet's status and a dead payout's requeue; `limitctl wallet journal-lag` sends XLEN;
      // HGETALL is called by the cluster sweep too (lua/transaction_home.lua sweep)
      "hgetall", "pexpiretime", "hlen", "lrem", "xlen"};
  return commands;
}

/// ACL rules for `ACL SETUSER <user> on ><password> <rules>`: exactly the commands above on
/// keys under `key_prefixes` (default: the three jobs' default prefixes). No other command
/// (no KEYS, FLUSHALL, CONFIG, DEBUG) and no other key.
inline std::string least_privilege_acl(const std::vector<std::string>& key_prefixes = {
                                           "trans:limit:", "wallet:", "rp:"}) {
  std::string rules = "resetkeys -@all";
  for (const auto& command : required_commands()) {
    rules += " +" + command;
  }
  for (const auto& prefix : key_prefixes) {
    rules += " ~" + prefix + "*";
  }
  return rules;
}

} // namespace limitcounter
