// The shim's spin locks. Each one is a SpinLock with its rank in the one lock order below; a
// thread takes locks only in increasing rank (docs/libvgpu.md, "Locks", has the same table).
//
//   rank  lock                    file           guards
//   1     g_context_lock          contexts.cc    the primary contexts retained through the shim
//   2     g_graph_lock            graph.cc       the devices' graph memory pools
//   3     g_pool_lock             pools.cc       the stream-ordered pools' records and charges
//   4     g_ledger_lock           state.cc       the contexts charged on every Gpu
//   5     Shim::gpu_lock          state.h        appending a GPU to Shim::gpus
//   6     Region::claim_lock_     region.h       claiming this process's slot in a share
//   7     Tracker::lock_          tracker.h      the handle table
//   8     PendingQueue::lock   timed_launch.cc  a share's pending spans not yet published
//
// Ranks 5 to 8 are leaves: nothing is locked under them. The reservation path runs under ranks
// 1 to 3 (a context, a graph launch, a pool allocation reserve memory), and the ledger (4) is
// taken inside a reservation when the context cost changed; so nothing that holds the ledger may
// reach the pools: the before-refusal callback (pools.cc, settle_idle_pools) runs only with the
// ledger released (state.cc, charge_context).
//
// Clang checks the locks' use statically (-Wthread-safety: the TESSERA_* annotations, with the
// order as TESSERA_ACQUIRED_AFTER where the locks are declared); a build without NDEBUG checks
// the order at run time too: a thread that takes a lock of a rank not above every lock it holds
// aborts with both ranks named.
#pragma once

#include <atomic>
#include <cstdint>

#include "os/system_calls.h"
#include "tessera/thread_annotations.h"

namespace tessera::vgpu {

enum class LockRank : uint8_t {
  kContexts = 1,
  kGraph = 2,
  kPools = 3,
  kLedger = 4,
  kGpus = 5,
  kSlotClaim = 6,
  kTracker = 7,
  kPendingSpans = 8,
};

// The run-time order check (lock_order.cc): the ranks this thread holds, one bit each; taking a
// rank not above every held one aborts. SpinLock calls them in builds without NDEBUG only.
void lock_order_acquire(LockRank rank);
void lock_order_release(LockRank rank);

class TESSERA_CAPABILITY("spin lock") SpinLock {
 public:
  constexpr explicit SpinLock(LockRank rank) : rank_(rank) {}
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() TESSERA_ACQUIRE() {
#ifndef NDEBUG
    lock_order_acquire(rank_);
#endif
    while (held_.exchange(true, std::memory_order_acquire)) {
      while (held_.load(std::memory_order_relaxed)) os::yield();
    }
  }
  void unlock() TESSERA_RELEASE() {
    held_.store(false, std::memory_order_release);
#ifndef NDEBUG
    lock_order_release(rank_);
#endif
  }
  // For a caller that knows this thread holds the lock (a callback run under it).
  void assert_held() const TESSERA_ASSERT_CAPABILITY(this) {}
  // In a forked child: the thread that held it in the parent does not exist there.
  void reset_after_fork() {
    held_.store(false, std::memory_order_relaxed);
  }
  LockRank rank() const {
    return rank_;
  }

 private:
  std::atomic<bool> held_{false};
  LockRank rank_;
};

class TESSERA_SCOPED_CAPABILITY SpinGuard {
 public:
  explicit SpinGuard(SpinLock& lock) TESSERA_ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
  ~SpinGuard() TESSERA_RELEASE() { lock_.unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock& lock_;
};

}  // namespace tessera::vgpu
