// One claim is never prepared or unprepared by two kubelet calls at once. Kubelet retries a batch
// whose call timed out (45 s) while the first call may still be running, and prepares pods in
// parallel; the DRA services hold a claim's lock around each ClaimPreparer call, so a retry waits
// for the first attempt and then finds its result (prepare is idempotent). Different claims never
// wait for each other. The share manager holds its own ClaimLocks (it is called from elsewhere
// too), and the time-slice backend one keyed by GPU UUID: a ClaimLocks serves any string key. A
// value-level primitive (standard library and tessera/thread_annotations.h), so every layer above
// model/ may hold one.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "tessera/thread_annotations.h"

namespace tessera::agent {

class ClaimLocks {
 public:
  class Guard {
   public:
    Guard(ClaimLocks& locks, std::string uid) : locks_(&locks), uid_(std::move(uid)) {}
    ~Guard() {
      if (locks_ != nullptr) locks_->release(uid_);
    }
    Guard(Guard&& other) noexcept : locks_(other.locks_), uid_(std::move(other.uid_)) {
      other.locks_ = nullptr;
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    Guard& operator=(Guard&&) = delete;

   private:
    ClaimLocks* locks_;
    std::string uid_;
  };

  // Blocks while another call holds `uid`.
  [[nodiscard]] Guard lock(const std::string& uid) TESSERA_EXCLUDES(mutex_);
  // The guard when no other call holds `uid`, else nullopt at once (never blocks).
  [[nodiscard]] std::optional<Guard> try_lock(const std::string& uid) TESSERA_EXCLUDES(mutex_);
  // Calls now waiting for a claim another call holds (for tests and metrics).
  int waiting() const TESSERA_EXCLUDES(mutex_);

 private:
  void release(const std::string& uid) TESSERA_EXCLUDES(mutex_);

  mutable Mutex mutex_;
  std::condition_variable released_;
  std::set<std::string> held_ TESSERA_GUARDED_BY(mutex_);
  int waiting_ TESSERA_GUARDED_BY(mutex_) = 0;
};

}  // namespace tessera::agent
