// A tenant process the multi-process enforcement tests start (hostile_tenant, honest or not): its
// pid and the read end of its stdout, owned (SIGKILLed and reaped, the pipe closed, when it goes).
// Shared by the hostile-tenant and the reclaim tests.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace tessera::agent::testing {

struct TenantProcess {
  using Steady = std::chrono::steady_clock;

  pid_t pid = 0;
  int out = -1;

  TenantProcess() = default;
  TenantProcess(const TenantProcess&) = delete;
  TenantProcess& operator=(const TenantProcess&) = delete;
  ~TenantProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out >= 0) close(out);
  }

  // The child's next line, or what came of it after `timeout` (poll: a child that hangs before
  // writing, or never exits, cannot block the test past it).
  std::string line(std::chrono::seconds timeout) {
    std::string text;
    const auto deadline = Steady::now() + timeout;
    char c;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now());
      if (left.count() <= 0) return text;
      pollfd readable{out, POLLIN, 0};
      if (poll(&readable, 1, static_cast<int>(left.count())) <= 0) continue;  // EINTR, time
      const ssize_t got = read(out, &c, 1);
      if (got <= 0) return text;  // EOF: the child exited
      if (c == '\n') return text;
      text += c;
    }
  }

  // True when the child died of SIGKILL within `timeout` (then reaped).
  bool killed_within(std::chrono::seconds timeout) {
    const auto deadline = Steady::now() + timeout;
    while (Steady::now() < deadline) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = 0;
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  bool alive() const { return pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0; }
};

}  // namespace tessera::agent::testing
