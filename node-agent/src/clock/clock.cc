#include "clock/clock.h"

#include <cassert>

namespace tessera::agent {
namespace {

class SteadyTimer final : public Clock::Timer {
 public:
  bool wait_until(Clock::time_point deadline) noexcept override TESSERA_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    while (!woken_ && mutex_.wait_until(woken_changed_, deadline)) {
    }
    const bool woken = woken_;
    woken_ = false;
    return woken;
  }
  void wake() noexcept override TESSERA_EXCLUDES(mutex_) {
    {
      MutexLock lock(mutex_);
      woken_ = true;
    }
    woken_changed_.notify_all();
  }

 private:
  Mutex mutex_;
  std::condition_variable woken_changed_;
  bool woken_ TESSERA_GUARDED_BY(mutex_) = false;
};

}  // namespace

std::unique_ptr<Clock::Timer> SteadyClock::make_timer() {
  return std::make_unique<SteadyTimer>();
}

Clock& real_clock() noexcept {
  static SteadyClock clock;
  return clock;
}

// Shares the clock's mutex: advance() and wake() cannot slip between a waiter's check and its
// sleep, and no timer has to be found (or kept alive) to be woken.
class SimulatedClock::SimulatedTimer final : public Clock::Timer {
 public:
  explicit SimulatedTimer(SimulatedClock& clock) : clock_(clock) {
    MutexLock lock(clock_.mutex_);
    ++clock_.timers_;
  }
  ~SimulatedTimer() override {
    MutexLock lock(clock_.mutex_);
    --clock_.timers_;
  }

  bool wait_until(Clock::time_point deadline) noexcept override TESSERA_EXCLUDES(clock_.mutex_) {
    MutexLock lock(clock_.mutex_);
    ++clock_.waiters_;
    while (!woken_ && clock_.now_ < deadline) clock_.mutex_.wait(clock_.moved_);
    --clock_.waiters_;
    const bool woken = woken_;
    woken_ = false;
    return woken;
  }
  void wake() noexcept override TESSERA_EXCLUDES(clock_.mutex_) {
    {
      MutexLock lock(clock_.mutex_);
      woken_ = true;
    }
    clock_.moved_.notify_all();
  }

 private:
  SimulatedClock& clock_;
  bool woken_ TESSERA_GUARDED_BY(clock_.mutex_) = false;
};

SimulatedClock::~SimulatedClock() {
  MutexLock lock(mutex_);
  assert(timers_ == 0 && "a SimulatedClock must outlive its timers (and the loops using it)");
}

Clock::time_point SimulatedClock::now() const noexcept {
  MutexLock lock(mutex_);
  return now_;
}

std::unique_ptr<Clock::Timer> SimulatedClock::make_timer() {
  return std::make_unique<SimulatedTimer>(*this);
}

void SimulatedClock::advance(duration by) noexcept {
  {
    MutexLock lock(mutex_);
    if (by > duration::zero()) now_ += by;
  }
  moved_.notify_all();
}

std::size_t SimulatedClock::waiters() const noexcept {
  MutexLock lock(mutex_);
  return waiters_;
}

}  // namespace tessera::agent
