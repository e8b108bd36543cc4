#pragma once
// Umbrella header: everything a host application uses.

#include <limitcounter/acl.hpp>
#include <limitcounter/calendar.hpp>
#include <limitcounter/decision.hpp>
#include <limitcounter/dimension.hpp>
#include <limitcounter/error.hpp>
#include <limitcounter/function_libraries.hpp>
#include <limitcounter/journal_consumer.hpp>
#include <limitcounter/key_part.hpp>
#include <limitcounter/keys.hpp>
#include <limitcounter/limit_counter.hpp>
#include <limitcounter/observer.hpp>
#include <limitcounter/red_packet.hpp>
#include <limitcounter/red_packet_keys.hpp>
#include <limitcounter/red_packet_split.hpp>
#include <limitcounter/redis.hpp>
#include <limitcounter/reply.hpp>
#include <limitcounter/rule.hpp>
#include <limitcounter/script.hpp>
#include <limitcounter/server_clock.hpp>
#include <limitcounter/transaction.hpp>
#include <limitcounter/transaction_state.hpp>
#include <limitcounter/usage.hpp>
#include <limitcounter/version.hpp>
#include <limitcounter/wallet.hpp>
#include <limitcounter/wallet_keys.hpp>
