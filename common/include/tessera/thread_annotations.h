// Clang's thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html), so
// the lock rules that comments state are checked by the compiler: the thread_safety.* tests build
// the annotated sources with clang++ -Wthread-safety -Werror (docs/build.md). Under GCC every macro
// expands to nothing. libstdc++'s std::mutex carries no capability attribute, so an annotated lock
// is a tessera::Mutex and is taken with a tessera::MutexLock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TESSERA_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TESSERA_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are locks ("mutex" in the compiler's messages).
#define TESSERA_CAPABILITY(name) TESSERA_THREAD_ANNOTATION(capability(name))
// On a class: an RAII holder of a lock.
#define TESSERA_SCOPED_CAPABILITY TESSERA_THREAD_ANNOTATION(scoped_lockable)
// On a member: read and written only while holding `mu`.
#define TESSERA_GUARDED_BY(mu) TESSERA_THREAD_ANNOTATION(guarded_by(mu))
// On a pointer member: what it points to is read and written only while holding `mu`.
#define TESSERA_PT_GUARDED_BY(mu) TESSERA_THREAD_ANNOTATION(pt_guarded_by(mu))
// On a lock: the order in which locks are taken (checked with -Wthread-safety-beta).
#define TESSERA_ACQUIRED_AFTER(...) TESSERA_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define TESSERA_ACQUIRED_BEFORE(...) TESSERA_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
// On a function: its callers hold the locks.
#define TESSERA_REQUIRES(...) TESSERA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// On a function: its callers must not hold the locks (it takes them, or waits for I/O).
#define TESSERA_EXCLUDES(...) TESSERA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: it takes or releases the locks and returns (or ends) holding them / not.
#define TESSERA_ACQUIRE(...) TESSERA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TESSERA_RELEASE(...) TESSERA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TESSERA_TRY_ACQUIRE(...) TESSERA_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: it asserts (at run time, or by construction) that the lock is held.
#define TESSERA_ASSERT_CAPABILITY(x) TESSERA_THREAD_ANNOTATION(assert_capability(x))
// On a function: the analysis skips it. Each use says why in a comment.
#define TESSERA_NO_THREAD_SAFETY_ANALYSIS TESSERA_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tessera {

// A std::mutex the analysis knows as a lock.
class TESSERA_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() TESSERA_ACQUIRE() { mutex_.lock(); }
  void unlock() TESSERA_RELEASE() { mutex_.unlock(); }
  bool try_lock() TESSERA_TRY_ACQUIRE(true) { return mutex_.try_lock(); }

  // Releases the lock until `changed` is notified (or wakes spuriously), then takes it again:
  // callers loop on their condition, which they read holding the lock.
  void wait(std::condition_variable& changed) TESSERA_REQUIRES(this) {
    std::unique_lock held(mutex_, std::adopt_lock);
    changed.wait(held);
    held.release();  // still locked: the caller's MutexLock releases it
  }

  // As wait(), but returns by `deadline` at the latest: false when the deadline passed (callers
  // then read their condition once more, holding the lock again).
  template <class WaitClock, class Duration>
  bool wait_until(std::condition_variable& changed,
                  const std::chrono::time_point<WaitClock, Duration>& deadline)
      TESSERA_REQUIRES(this) {
    std::unique_lock held(mutex_, std::adopt_lock);
    const bool notified = changed.wait_until(held, deadline) == std::cv_status::no_timeout;
    held.release();  // still locked: the caller's MutexLock releases it
    return notified;
  }

 private:
  std::mutex mutex_;
};

// Holds a Mutex for its scope (std::lock_guard, known to the analysis).
class TESSERA_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) TESSERA_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~MutexLock() TESSERA_RELEASE() { mutex_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mutex_;
};

}  // namespace tessera
