// ClaimLocks: one call per claim at a time; different claims never wait for each other.
#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "model/claim_locks.h"

namespace tessera::agent {
namespace {

bool wait_for_waiters(const ClaimLocks& locks, int n) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (locks.waiting() != n) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(ClaimLocks, SameClaimWaitsOtherClaimsDoNot) {
  ClaimLocks locks;
  std::optional<ClaimLocks::Guard> a(locks.lock("a"));
  { ClaimLocks::Guard b = locks.lock("b"); }  // another claim: no wait
  EXPECT_EQ(locks.waiting(), 0);

  std::atomic<bool> entered{false};
  auto second = std::async(std::launch::async, [&] {
    ClaimLocks::Guard again = locks.lock("a");
    entered = true;
  });
  ASSERT_TRUE(wait_for_waiters(locks, 1));
  EXPECT_FALSE(entered.load());
  a.reset();  // release
  second.get();
  EXPECT_TRUE(entered.load());
  EXPECT_EQ(locks.waiting(), 0);
  { ClaimLocks::Guard free_again = locks.lock("a"); }  // released by the second holder too
}

// try_lock (reconcile's: a claim being changed is left for the next pass) never waits.
TEST(ClaimLocks, TryLockTakesAFreeClaimAndRefusesAHeldOne) {
  ClaimLocks locks;
  std::optional<ClaimLocks::Guard> a = locks.try_lock("a");
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(locks.try_lock("a").has_value());
  EXPECT_TRUE(locks.try_lock("b").has_value());  // another claim, released again at once
  EXPECT_EQ(locks.waiting(), 0);
  a.reset();
  EXPECT_TRUE(locks.try_lock("a").has_value());
  { ClaimLocks::Guard held = locks.lock("b"); }  // the refused try left nothing held
}

}  // namespace
}  // namespace tessera::agent
