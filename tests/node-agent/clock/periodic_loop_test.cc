// PeriodicLoop and the clocks under it, on simulated time: every assertion about "no tick yet"
// holds because the time has not reached the deadline, not because a sleep was long enough.
#include "clock/periodic_loop.h"

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "clock/clock.h"

namespace tessera::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The simulated times at which the ticks ran.
struct Recorder {
  explicit Recorder(const Clock& source) : clock(source) {}
  std::function<void()> tick() {
    return [this] {
      std::lock_guard lock(mutex);
      at.push_back(clock.now());
    };
  }
  std::vector<Clock::time_point> times() {
    std::lock_guard lock(mutex);
    return at;
  }
  const Clock& clock;
  std::mutex mutex;
  std::vector<Clock::time_point> at;
};

std::unique_ptr<PeriodicLoop> must_start(
    Clock& clock, Clock::duration interval, std::function<void()> tick,
    PeriodicLoop::FirstTick first = PeriodicLoop::FirstTick::kAfterInterval) {
  auto loop = PeriodicLoop::start(clock, interval, std::move(tick), first);
  EXPECT_TRUE(loop.is_ok()) << loop.status().message();
  return loop.is_ok() ? std::move(loop).value() : nullptr;
}

// Blocks (bounded) until the loop's thread sleeps on the clock: then nothing more happens until
// the time moves.
bool wait_until_sleeping(const SimulatedClock& clock, std::size_t waiters = 1) {
  const auto end = std::chrono::steady_clock::now() + seconds(10);
  while (clock.waiters() < waiters) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(SimulatedClock, MovesOnlyWhenAdvanced) {
  SimulatedClock clock;
  const Clock::time_point start = clock.now();
  EXPECT_EQ(clock.now(), start);
  clock.advance(milliseconds(250));
  EXPECT_EQ(clock.now() - start, milliseconds(250));
  clock.advance(-seconds(1));  // never backwards
  EXPECT_EQ(clock.now() - start, milliseconds(250));
}

TEST(SimulatedClock, AdvanceWakesATimerWhoseDeadlineItReaches) {
  SimulatedClock clock;
  auto timer = clock.make_timer();
  const Clock::time_point deadline = clock.now() + seconds(5);
  std::atomic<int> result{-1};
  std::thread waiter([&] { result = timer->wait_until(deadline) ? 1 : 0; });
  ASSERT_TRUE(wait_until_sleeping(clock));
  clock.advance(seconds(4));
  // Still short of the deadline: the waiter is asleep again (or never woke).
  ASSERT_TRUE(wait_until_sleeping(clock));
  EXPECT_EQ(result, -1);
  clock.advance(seconds(1));
  waiter.join();
  EXPECT_EQ(result, 0);  // the deadline, not a wake
}

TEST(SimulatedClock, WakeBeforeTheWaitIsKept) {
  SimulatedClock clock;
  auto timer = clock.make_timer();
  timer->wake();
  EXPECT_TRUE(timer->wait_until(clock.now() + seconds(60)));  // returns at once
  EXPECT_FALSE(timer->wait_until(clock.now()));               // consumed; the deadline is now
}

TEST(SteadyClock, TimerReturnsAtItsDeadlineOrWhenWoken) {
  Clock& clock = real_clock();
  auto timer = clock.make_timer();
  const Clock::time_point began = clock.now();
  EXPECT_FALSE(timer->wait_until(began + milliseconds(20)));
  EXPECT_GE(clock.now() - began, milliseconds(20));
  std::thread waker([&] { timer->wake(); });
  EXPECT_TRUE(timer->wait_until(clock.now() + seconds(60)));
  waker.join();
}

TEST(PeriodicLoop, TicksEveryIntervalOfSimulatedTime) {
  SimulatedClock clock;
  Recorder recorder(clock);
  const Clock::time_point start = clock.now();
  auto loop = must_start(clock, seconds(30), recorder.tick());
  ASSERT_TRUE(loop);
  ASSERT_TRUE(wait_until_sleeping(clock));
  EXPECT_EQ(loop->ticks(), 0u);
  clock.advance(seconds(30) - milliseconds(1));
  ASSERT_TRUE(wait_until_sleeping(clock));
  EXPECT_EQ(loop->ticks(), 0u);  // one millisecond short of the interval
  clock.advance(milliseconds(1));
  ASSERT_TRUE(loop->wait_for_ticks(1));
  for (int k = 2; k <= 5; ++k) {
    clock.advance(seconds(30));
    ASSERT_TRUE(loop->wait_for_ticks(k));
  }
  ASSERT_TRUE(wait_until_sleeping(clock));
  EXPECT_EQ(loop->ticks(), 5u);
  const std::vector<Clock::time_point> times = recorder.times();
  ASSERT_EQ(times.size(), 5u);
  for (size_t i = 0; i < times.size(); ++i)
    EXPECT_EQ(times[i] - start, seconds(30) * static_cast<int>(i + 1)) << "tick " << i;
  EXPECT_EQ(loop->failed_ticks(), 0u);
}

TEST(PeriodicLoop, MissedDeadlinesGiveOneTickNotABurst) {
  SimulatedClock clock;
  Recorder recorder(clock);
  const Clock::time_point start = clock.now();
  auto loop = must_start(clock, seconds(1), recorder.tick());
  ASSERT_TRUE(loop);
  clock.advance(milliseconds(3500));  // three deadlines passed at once
  ASSERT_TRUE(loop->wait_for_ticks(1));
  ASSERT_TRUE(wait_until_sleeping(clock));
  EXPECT_EQ(loop->ticks(), 1u);
  // Back on the grid: the next tick is at 4 s, not 4.5 s.
  clock.advance(milliseconds(500));
  ASSERT_TRUE(loop->wait_for_ticks(2));
  EXPECT_EQ(recorder.times().back() - start, seconds(4));
}

TEST(PeriodicLoop, FirstTickAtOnce) {
  SimulatedClock clock;
  Recorder recorder(clock);
  auto loop = must_start(clock, seconds(60), recorder.tick(), PeriodicLoop::FirstTick::kAtOnce);
  ASSERT_TRUE(loop);
  ASSERT_TRUE(loop->wait_for_ticks(1));
  ASSERT_TRUE(wait_until_sleeping(clock));
  EXPECT_EQ(loop->ticks(), 1u);
  clock.advance(seconds(60));
  EXPECT_TRUE(loop->wait_for_ticks(2));
}

TEST(PeriodicLoop, TickNowRunsAtOnceAndKeepsTheSchedule) {
  SimulatedClock clock;
  Recorder recorder(clock);
  const Clock::time_point start = clock.now();
  auto loop = must_start(clock, seconds(10), recorder.tick());
  ASSERT_TRUE(loop);
  clock.advance(seconds(3));
  loop->tick_now();
  ASSERT_TRUE(loop->wait_for_ticks(1));
  EXPECT_EQ(recorder.times().back() - start, seconds(3));
  ASSERT_TRUE(wait_until_sleeping(clock));
  clock.advance(seconds(7));  // the periodic deadline did not move
  ASSERT_TRUE(loop->wait_for_ticks(2));
  EXPECT_EQ(recorder.times().back() - start, seconds(10));
}

TEST(PeriodicLoop, TickNowRequestsMergeWhileATickRuns) {
  SimulatedClock clock;
  std::mutex gate;
  std::unique_lock hold(gate);  // the first tick blocks here until released
  std::atomic<int> ran{0};
  auto loop = must_start(clock, seconds(10), [&] {
    ++ran;
    std::lock_guard pass(gate);
  });
  ASSERT_TRUE(loop);
  loop->tick_now();
  while (ran == 0) std::this_thread::yield();  // the first tick is running (blocked)
  loop->tick_now();
  loop->tick_now();
  loop->tick_now();
  hold.unlock();
  ASSERT_TRUE(loop->wait_for_ticks(2));
  ASSERT_TRUE(wait_until_sleeping(clock));
  EXPECT_EQ(loop->ticks(), 2u);  // three requests during the tick: one more tick
}

TEST(PeriodicLoop, StopIsPromptAndNoTickAfterIt) {
  SimulatedClock clock;
  std::atomic<int> ran{0};
  auto loop = must_start(clock, std::chrono::hours(1), [&] { ++ran; });
  ASSERT_TRUE(loop);
  ASSERT_TRUE(wait_until_sleeping(clock));
  // Simulated time stands still: only stop()'s wake can end the loop's hour-long wait. Bounded
  // (liveness: it takes microseconds), so that a stop that does not wake it fails here.
  auto stopping = std::async(std::launch::async, [&loop] { loop->stop(); });
  const bool stopped = stopping.wait_for(seconds(30)) == std::future_status::ready;
  EXPECT_TRUE(stopped) << "stop() waited for the next tick";
  if (!stopped) clock.advance(std::chrono::hours(1));  // the tick it waits for: the test ends
  stopping.get();
  EXPECT_EQ(clock.waiters(), 0u);
  loop->tick_now();  // ignored
  clock.advance(std::chrono::hours(2));
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(loop->ticks(), 0u);
  EXPECT_FALSE(loop->wait_for_ticks(1));  // stopped: returns at once, short of the count
  loop->stop();                           // idempotent
}

TEST(PeriodicLoop, StopWaitsForTheRunningTick) {
  SimulatedClock clock;
  std::atomic<bool> in_tick{false}, finished{false};
  auto loop = must_start(
      clock, seconds(1),
      [&] {
        in_tick = true;
        std::this_thread::sleep_for(milliseconds(50));  // a slow tick (real work), not a guess
        finished = true;
      },
      PeriodicLoop::FirstTick::kAtOnce);
  ASSERT_TRUE(loop);
  while (!in_tick) std::this_thread::yield();
  loop->stop();
  EXPECT_TRUE(finished);
  EXPECT_EQ(loop->ticks(), 1u);
}

TEST(PeriodicLoop, DestructorStopsAndJoins) {
  std::atomic<int> ran{0};
  {
    SimulatedClock clock;
    auto loop = must_start(
        clock, seconds(1), [&] { ++ran; }, PeriodicLoop::FirstTick::kAtOnce);
    ASSERT_TRUE(loop);
    ASSERT_TRUE(loop->wait_for_ticks(1));
  }  // the loop goes first, then its clock
  EXPECT_EQ(ran, 1);
}

TEST(PeriodicLoop, AThrowingTickIsCountedAndTheLoopGoesOn) {
  SimulatedClock clock;
  std::atomic<int> calls{0};
  auto loop = must_start(clock, seconds(1), [&] {
    if (++calls == 1) throw std::runtime_error("boom");
  });
  ASSERT_TRUE(loop);
  clock.advance(seconds(1));
  ASSERT_TRUE(loop->wait_for_ticks(1));
  EXPECT_EQ(loop->failed_ticks(), 1u);
  EXPECT_EQ(loop->last_failure(), "boom");
  clock.advance(seconds(1));
  ASSERT_TRUE(loop->wait_for_ticks(2));
  EXPECT_EQ(loop->failed_ticks(), 1u);
}

TEST(PeriodicLoop, BadArgumentsAreErrorsNotThreads) {
  SimulatedClock clock;
  auto zero = PeriodicLoop::start(clock, Clock::duration::zero(), [] {});
  ASSERT_FALSE(zero.is_ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.status().message(), "a periodic loop needs an interval above zero");
  auto no_tick = PeriodicLoop::start(clock, seconds(1), nullptr);
  ASSERT_FALSE(no_tick.is_ok());
  EXPECT_EQ(no_tick.status().message(), "a periodic loop needs a tick function");
  EXPECT_EQ(clock.waiters(), 0u);
}

// The calls an owner makes from its destructor and stop paths cannot throw.
TEST(PeriodicLoop, StopPathsAreNoexcept) {
  static_assert(std::is_nothrow_destructible_v<PeriodicLoop>);
  static_assert(noexcept(std::declval<PeriodicLoop&>().stop()));
  static_assert(noexcept(std::declval<PeriodicLoop&>().tick_now()));
  static_assert(noexcept(std::declval<PeriodicLoop&>().ticks()));
  static_assert(
      noexcept(std::declval<Clock::Timer&>().wait_until(std::declval<Clock::time_point>())));
  static_assert(noexcept(std::declval<Clock::Timer&>().wake()));
  SUCCEED();
}

}  // namespace
}  // namespace tessera::agent
