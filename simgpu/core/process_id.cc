#include "process_id.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

uint64_t process_start_time(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buffer[1024];
  const ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buffer[n] = '\0';
  // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
  const char* cursor = std::strrchr(buffer, ')');
  if (!cursor) return 0;
  cursor += 2;  // ") " -> field 3, the state
  if (*cursor == 'Z' || *cursor == 'X') return 0;
  for (int field = 3; field < 22 && *cursor; ++field) {
    cursor = std::strchr(cursor, ' ');
    if (!cursor) return 0;
    ++cursor;
  }
  return std::strtoull(cursor, nullptr, 10);
}

bool process_alive(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  return process_start_time(pid) == start_time;
}

}  // namespace simgpu
