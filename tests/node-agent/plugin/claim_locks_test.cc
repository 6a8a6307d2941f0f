// ClaimLocks: one call per claim at a time; different claims never wait for each other.
#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "claim_locks.h"

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

}  // namespace
}  // namespace tessera::agent
