#include "process_id.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace simgpu {
namespace {

std::atomic<int> g_cached_pid{0};  // 0 until the library's static initialisation has run

void refresh_pid_in_child() {
  g_cached_pid.store(::getpid(), std::memory_order_relaxed);
}

// Runs at load (dlopen or program start), before any thread can fork through this library.
[[maybe_unused]] const bool g_pid_cache_ready = [] {
  pthread_atfork(nullptr, nullptr, refresh_pid_in_child);
  refresh_pid_in_child();
  return true;
}();

}  // namespace

int current_pid() {
  const int pid = g_cached_pid.load(std::memory_order_relaxed);
  // Only a caller in another library's static initialisation can get here before ours ran.
  return pid != 0 ? pid : ::getpid();
}

}  // namespace simgpu
