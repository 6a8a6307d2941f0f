// The time the node agent's loops run on. A loop takes a Clock& (real_clock() by default) so that
// its tests drive it with SimulatedClock: they advance the time and wait for the loop's ticks
// instead of sleeping and guessing. The lowest layer of the agent: the standard library and the
// lock annotations only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>

#include "tessera/thread_annotations.h"

namespace tessera::agent {

class Clock {
 public:
  using duration = std::chrono::steady_clock::duration;
  using time_point = std::chrono::steady_clock::time_point;

  // What one thread waits on; any thread may wake it. Made by the clock it waits on, so that a
  // simulated clock can wake its waiters when the time moves.
  class Timer {
   public:
    virtual ~Timer() = default;
    // Blocks until the clock reads `deadline` or later, or until wake() (called before or during
    // the wait; the wake is consumed). True when woken, false when the deadline came.
    virtual bool wait_until(time_point deadline) noexcept = 0;
    virtual void wake() noexcept = 0;
  };

  virtual ~Clock() = default;
  virtual time_point now() const noexcept = 0;
  virtual std::unique_ptr<Timer> make_timer() = 0;
};

// std::chrono::steady_clock: what the agent runs on.
class SteadyClock final : public Clock {
 public:
  time_point now() const noexcept override { return std::chrono::steady_clock::now(); }
  std::unique_ptr<Timer> make_timer() override;
};

// The process's SteadyClock, the default of every loop.
Clock& real_clock() noexcept;

// Time that moves only when a test advances it. Waiters whose deadline is reached are woken by
// advance() itself, so what a loop does at a given time does not depend on the machine's speed.
// Outlives its timers.
class SimulatedClock final : public Clock {
 public:
  // Starts at an arbitrary, fixed time (not zero: code may subtract intervals from now()).
  SimulatedClock() : now_(std::chrono::hours(24)) {}
  ~SimulatedClock() override;

  time_point now() const noexcept override TESSERA_EXCLUDES(mutex_);
  std::unique_ptr<Timer> make_timer() override;

  // Moves the time forward and wakes every waiter whose deadline it reaches.
  void advance(duration by) noexcept TESSERA_EXCLUDES(mutex_);
  // Threads blocked in a Timer::wait_until now.
  std::size_t waiters() const noexcept TESSERA_EXCLUDES(mutex_);

 private:
  class SimulatedTimer;

  mutable Mutex mutex_;            // also guards every timer's wake flag
  std::condition_variable moved_;  // the time moved or a timer was woken
  time_point now_ TESSERA_GUARDED_BY(mutex_);
  std::size_t waiters_ TESSERA_GUARDED_BY(mutex_) = 0;
  std::size_t timers_ TESSERA_GUARDED_BY(mutex_) = 0;
};

}  // namespace tessera::agent
