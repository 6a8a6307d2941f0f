#include "clock/periodic_loop.h"

#include <exception>
#include <system_error>

namespace tessera::agent {

Result<std::unique_ptr<PeriodicLoop>> PeriodicLoop::start(Clock& clock, Clock::duration interval,
                                                          std::function<void()> tick,
                                                          FirstTick first) {
  if (interval <= Clock::duration::zero())
    return invalid_argument("a periodic loop needs an interval above zero");
  if (!tick) return invalid_argument("a periodic loop needs a tick function");
  std::unique_ptr<PeriodicLoop> loop(new PeriodicLoop(clock, interval, std::move(tick), first));
  try {
    loop->thread_ = std::thread([raw = loop.get()] { raw->run(); });
  } catch (const std::system_error& error) {
    return internal_error(std::string("cannot start a loop thread: ") + error.what());
  }
  return loop;
}

PeriodicLoop::PeriodicLoop(Clock& clock, Clock::duration interval, std::function<void()> tick,
                           FirstTick first)
    : clock_(clock),
      interval_(interval),
      tick_(std::move(tick)),
      timer_(clock.make_timer()),
      started_(clock.now()),
      next_(started_ + interval),
      tick_requested_(first == FirstTick::kAtOnce) {}

PeriodicLoop::~PeriodicLoop() {
  stop();
}

void PeriodicLoop::stop() noexcept {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  timer_->wake();
  if (thread_.joinable()) thread_.join();
}

void PeriodicLoop::tick_now() noexcept {
  {
    MutexLock lock(mutex_);
    if (stopping_) return;
    tick_requested_ = true;
  }
  timer_->wake();
}

std::uint64_t PeriodicLoop::ticks() const noexcept {
  MutexLock lock(mutex_);
  return ticks_;
}

std::uint64_t PeriodicLoop::failed_ticks() const noexcept {
  MutexLock lock(mutex_);
  return failed_ticks_;
}

std::string PeriodicLoop::last_failure() const {
  MutexLock lock(mutex_);
  return last_failure_;
}

bool PeriodicLoop::wait_for_ticks(std::uint64_t count, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mutex_);
  while (ticks_ < count && !stopped_ && mutex_.wait_until(ticked_, deadline)) {
  }
  return ticks_ >= count;
}

Clock::time_point PeriodicLoop::next_deadline_after(Clock::time_point now) const noexcept {
  // The first deadline of the grid started_ + k * interval_ that is later than `now`.
  if (now < started_) return started_ + interval_;
  return started_ + ((now - started_) / interval_ + 1) * interval_;
}

void PeriodicLoop::run_tick() noexcept {
  std::string failure;
  bool failed = false;
  try {
    tick_();
  } catch (const std::exception& error) {
    failed = true;
    failure = error.what();
  } catch (...) {
    failed = true;
    failure = "a non-standard exception";
  }
  // The schedule is settled before the count moves: a test that saw the tick and then advances
  // the clock by one interval always gets the next periodic tick.
  const Clock::time_point now = clock_.now();
  if (next_ <= now) next_ = next_deadline_after(now);
  {
    MutexLock lock(mutex_);
    ++ticks_;
    if (failed) {
      ++failed_ticks_;
      last_failure_ = std::move(failure);
    }
  }
  ticked_.notify_all();
}

void PeriodicLoop::run() noexcept {
  for (;;) {
    bool requested = false;
    {
      MutexLock lock(mutex_);
      if (stopping_) break;
      requested = tick_requested_;
      tick_requested_ = false;
    }
    if (requested || clock_.now() >= next_) {
      run_tick();
      continue;
    }
    timer_->wait_until(next_);  // woken (stop, tick_now) or due: the top of the loop decides
  }
  {
    MutexLock lock(mutex_);
    stopped_ = true;
  }
  ticked_.notify_all();
}

}  // namespace tessera::agent
