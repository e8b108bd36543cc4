#include "redis/operation_resends.hpp"

namespace limitcounter::detail {
namespace {

thread_local OperationResends* innermost = nullptr;

} // namespace

OperationResends::OperationResends(const Redis& redis)
    : owner_(&redis.options()), outer_(innermost) {
  if (of(*owner_) == nullptr) {
    policy_.emplace(owner_->retry, ResendPolicy::Clock::now());
  }
  innermost = this;
}

OperationResends::~OperationResends() { innermost = outer_; }

ResendPolicy* OperationResends::of(const RedisOptions& owner) {
  for (OperationResends* scope = innermost; scope != nullptr; scope = scope->outer_) {
    if (scope->owner_ == &owner && scope->policy_) {
      return &*scope->policy_;
    }
  }
  return nullptr;
}

} // namespace limitcounter::detail
