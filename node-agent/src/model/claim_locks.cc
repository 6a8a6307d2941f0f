#include "model/claim_locks.h"

namespace tessera::agent {

ClaimLocks::Guard ClaimLocks::lock(const std::string& uid) {
  std::unique_lock lock(mutex_);
  if (held_.count(uid) != 0) {
    ++waiting_;
    released_.wait(lock, [&] { return held_.count(uid) == 0; });
    --waiting_;
  }
  held_.insert(uid);
  return Guard(*this, uid);
}

std::optional<ClaimLocks::Guard> ClaimLocks::try_lock(const std::string& uid) {
  std::lock_guard lock(mutex_);
  if (!held_.insert(uid).second) return std::nullopt;
  return Guard(*this, uid);
}

int ClaimLocks::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_;
}

void ClaimLocks::release(const std::string& uid) {
  {
    std::lock_guard lock(mutex_);
    held_.erase(uid);
  }
  released_.notify_all();
}

}  // namespace tessera::agent
