// The shim's lock order (libvgpu/src/spin_lock.h): the run-time check aborts a thread that takes a
// lock of a rank not above every lock it holds. Builds without NDEBUG run it inside every
// SpinLock; the checker itself is tested here in every build.
#include <gtest/gtest.h>

#include <thread>

#include "spin_lock.h"

namespace {

using tessera::vgpu::lock_order_acquire;
using tessera::vgpu::lock_order_release;
using tessera::vgpu::LockRank;

TEST(LockOrder, LocksTakenInRankOrderPass) {
  // In a thread of its own: the checker's state is per thread.
  bool finished = false;
  std::thread([&] {
    lock_order_acquire(LockRank::kContexts);
    lock_order_acquire(LockRank::kPools);
    lock_order_acquire(LockRank::kLedger);
    lock_order_acquire(LockRank::kTracker);
    lock_order_release(LockRank::kTracker);
    lock_order_release(LockRank::kLedger);
    // Released: a lower rank than the pools' may follow the ledger again.
    lock_order_acquire(LockRank::kLedger);
    lock_order_release(LockRank::kLedger);
    lock_order_release(LockRank::kPools);
    lock_order_release(LockRank::kContexts);
    lock_order_acquire(LockRank::kPools);  // nothing held: any lock
    lock_order_release(LockRank::kPools);
    finished = true;
  }).join();
  EXPECT_TRUE(finished);
}

TEST(LockOrderDeathTest, ThePoolsUnderTheLedgerAbort) {
  // The cycle charge_context once had: the pools' lock taken while the ledger is held.
  EXPECT_DEATH(
      {
        lock_order_acquire(LockRank::kLedger);
        lock_order_acquire(LockRank::kPools);
      },
      "lock order violated: taking a lock of rank 3 while holding rank 4");
}

TEST(LockOrderDeathTest, ALockTakenTwiceAborts) {
  EXPECT_DEATH(
      {
        lock_order_acquire(LockRank::kTracker);
        lock_order_acquire(LockRank::kTracker);
      },
      "lock order violated: taking a lock of rank 7 while holding rank 7");
}

#ifndef NDEBUG
TEST(LockOrderDeathTest, ASpinLockOutOfOrderAbortsInADebugBuild) {
  EXPECT_DEATH(
      {
        tessera::vgpu::SpinLock ledger{LockRank::kLedger};
        tessera::vgpu::SpinLock pools{LockRank::kPools};
        tessera::vgpu::SpinGuard outer(ledger);
        tessera::vgpu::SpinGuard inner(pools);
      },
      "lock order violated");
}
#endif

}  // namespace
