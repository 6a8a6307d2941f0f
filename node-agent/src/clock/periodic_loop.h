// PeriodicLoop: the one way the node agent runs something every interval (the device monitor's
// turns, the GPU-time meter's passes, the reconcile loop). It owns its thread (started by start(),
// joined by stop() or the destructor), reads the time only through an injected Clock, can tick at
// once on demand, and counts its ticks so that tests wait for them instead of sleeping.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "clock/clock.h"
#include "tessera/status.h"
#include "tessera/thread_annotations.h"

namespace tessera::agent {

class PeriodicLoop {
 public:
  enum class FirstTick {
    kAfterInterval,  // start + interval
    kAtOnce,         // as soon as the thread runs, then start + interval, ...
  };

  // Ticks come at start + k * interval on `clock`. A tick that overruns (or a clock that jumps)
  // skips the deadlines it missed: one tick, then the next deadline after now, never a burst.
  // `tick` runs on the loop's thread, one at a time; an exception from it is caught and counted
  // (the loop goes on). Fails (invalid argument) for an interval <= 0, or when no thread can be
  // started.
  static Result<std::unique_ptr<PeriodicLoop>> start(Clock& clock, Clock::duration interval,
                                                     std::function<void()> tick,
                                                     FirstTick first = FirstTick::kAfterInterval);

  ~PeriodicLoop();  // stop()
  PeriodicLoop(const PeriodicLoop&) = delete;
  PeriodicLoop& operator=(const PeriodicLoop&) = delete;

  // Waits for a running tick to end, then joins the thread: no tick starts after stop() returns.
  // Idempotent. Not from inside the tick.
  void stop() noexcept TESSERA_EXCLUDES(mutex_);

  // One extra tick as soon as the thread is free (requests made while one is pending merge into
  // it); the periodic deadlines stay as they are. Ignored after stop().
  void tick_now() noexcept TESSERA_EXCLUDES(mutex_);

  // Ticks completed so far (periodic and on demand).
  std::uint64_t ticks() const noexcept TESSERA_EXCLUDES(mutex_);
  // Ticks whose function threw.
  std::uint64_t failed_ticks() const noexcept TESSERA_EXCLUDES(mutex_);
  // The message of the last exception a tick threw ("" if none).
  std::string last_failure() const TESSERA_EXCLUDES(mutex_);

  // For tests: blocks until `count` ticks have completed, or `timeout` of real time has passed
  // (a bound against a hang, not a guess: it returns as soon as the count is reached). False on
  // timeout, or when the loop stopped short of the count.
  bool wait_for_ticks(std::uint64_t count,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) const
      TESSERA_EXCLUDES(mutex_);

 private:
  PeriodicLoop(Clock& clock, Clock::duration interval, std::function<void()> tick, FirstTick first);
  void run() noexcept TESSERA_EXCLUDES(mutex_);
  void run_tick() noexcept TESSERA_EXCLUDES(mutex_);
  Clock::time_point next_deadline_after(Clock::time_point now) const noexcept;

  Clock& clock_;
  const Clock::duration interval_;
  const std::function<void()> tick_;
  const std::unique_ptr<Clock::Timer> timer_;
  const Clock::time_point started_;
  Clock::time_point next_;  // loop thread only

  mutable Mutex mutex_;
  mutable std::condition_variable ticked_;
  bool stopping_ TESSERA_GUARDED_BY(mutex_) = false;
  bool stopped_ TESSERA_GUARDED_BY(mutex_) = false;  // the thread has ended
  bool tick_requested_ TESSERA_GUARDED_BY(mutex_) = false;
  std::uint64_t ticks_ TESSERA_GUARDED_BY(mutex_) = 0;
  std::uint64_t failed_ticks_ TESSERA_GUARDED_BY(mutex_) = 0;
  std::string last_failure_ TESSERA_GUARDED_BY(mutex_);
  std::thread thread_;  // last: started when everything above is ready
};

}  // namespace tessera::agent
