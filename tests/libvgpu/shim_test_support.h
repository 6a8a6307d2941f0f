// Helpers for tests that run CUDA programs under libvgpu: vgpu_probe is exec'd with
// LD_PRELOAD=libvgpu.so and LD_LIBRARY_PATH=<simulated driver>, as a container would run a
// program; a ShareDir plays the node agent (writes the limits page, reads the usage page).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "share_dir.h"

namespace tessera::vgpu::testing {

using Env = std::vector<std::pair<std::string, std::string>>;

inline int64_t monotonic_ms() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// One vgpu_probe process. Its stdout is read line by line; stderr is collected at the end.
class Probe {
 public:
  Probe(const Env& env, const std::vector<std::string>& args, bool with_shim = true,
        const char* program = VGPU_PROBE) {
    int out[2];
    int err[2];
    if (pipe(out) != 0 || pipe(err) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]);
      close(err[0]);
      close(out[1]);
      close(err[1]);
      for (const char* name : {"TESSERA_SHARE_DIR", "TESSERA_MEMORY_LIMIT", "TESSERA_LOG_LEVEL",
                               "TESSERA_CONTEXT_OVERHEAD", "CUDA_DEVICE_MEMORY_LIMIT"}) {
        unsetenv(name);
      }
      for (int i = 0; i < 16; ++i) {
        unsetenv(("CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i)).c_str());
      }
      setenv("LD_LIBRARY_PATH", SIMGPU_LIB_DIR, 1);
#ifdef TESSERA_SANITIZED_PROBES
      // The probes are instrumented; the shim never is, and as a preloaded library it comes
      // before the sanitizer runtime in the link order, which ASan would otherwise refuse.
      setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 1);
#endif
      if (with_shim) {
        setenv("LD_PRELOAD", LIBVGPU_SO, 1);
      } else {
        unsetenv("LD_PRELOAD");
      }
      for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(program));
      for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      execv(program, argv.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Probe() {
    if (!reaped_) {
      kill(pid_, SIGKILL);
      wait_exit();
    }
    close(out_fd_);
    close(err_fd_);
  }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  // The next stdout line, or nullopt at end of output or after `timeout_ms`.
  std::optional<std::string> read_line(int timeout_ms = 30000) {
    const int64_t deadline = monotonic_ms() + timeout_ms;
    while (true) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      const int64_t left = deadline - monotonic_ms();
      if (left <= 0) return std::nullopt;
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(out_fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  // Waits for exit (killing it after `timeout_ms`); returns the exit code or 128 + signal.
  int wait_exit(int timeout_ms = 60000) {
    const int64_t deadline = monotonic_ms() + timeout_ms;
    int status = 0;
    while (true) {
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) break;
      if (monotonic_ms() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        timed_out_ = true;
        break;
      }
      usleep(1000);
    }
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string stderr_text() {
    std::string text;
    char chunk[4096];
    int flags = fcntl(err_fd_, F_GETFL);
    fcntl(err_fd_, F_SETFL, flags | O_NONBLOCK);
    ssize_t n = 0;
    while ((n = read(err_fd_, chunk, sizeof chunk)) > 0) text.append(chunk, static_cast<size_t>(n));
    return text;
  }
  void kill_now() {
    kill(pid_, SIGKILL);
  }
  bool timed_out() const {
    return timed_out_;
  }
  pid_t pid() const {
    return pid_;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string buffer_;
  bool reaped_ = false;
  bool timed_out_ = false;
};

struct ProbeRun {
  int status = -1;
  std::vector<std::string> lines;
  std::string err;
};

// Runs vgpu_probe to completion.
inline ProbeRun run_probe(const Env& env, const std::vector<std::string>& args,
                          bool with_shim = true, const char* program = VGPU_PROBE) {
  Probe probe(env, args, with_shim, program);
  ProbeRun run;
  while (auto line = probe.read_line()) run.lines.push_back(*line);
  run.status = probe.wait_exit();
  run.err = probe.stderr_text();
  return run;
}

inline std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < line.size()) {
    const size_t end = line.find(' ', start);
    out.push_back(line.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace tessera::vgpu::testing
