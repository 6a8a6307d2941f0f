#include "model/claim_locks.h"

namespace tessera::agent {

ClaimLocks::Guard ClaimLocks::lock(const std::string& uid) {
  MutexLock lock(mutex_);
  if (held_.count(uid) != 0) {
    ++waiting_;
    while (held_.count(uid) != 0) mutex_.wait(released_);
    --waiting_;
  }
  held_.insert(uid);
  return Guard(*this, uid);
}

std::optional<ClaimLocks::Guard> ClaimLocks::try_lock(const std::string& uid) {
  MutexLock lock(mutex_);
  if (!held_.insert(uid).second) return std::nullopt;
  return Guard(*this, uid);
}

int ClaimLocks::waiting() const {
  MutexLock lock(mutex_);
  return waiting_;
}

void ClaimLocks::release(const std::string& uid) {
  {
    MutexLock lock(mutex_);
    held_.erase(uid);
  }
  released_.notify_all();
}

}  // namespace tessera::agent
