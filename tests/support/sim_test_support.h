// Helpers for tests of the simulated GPU: every scenario runs in forked children (a CUDA process
// each, as in production), with a fresh state file per test; the parent only orchestrates.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

namespace simgpu::testing {

// Points SIMGPU_STATE at a new file for this test and removes it afterwards.
class SimEnvironment {
 public:
  explicit SimEnvironment(
      const std::string& devices = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0") {
    char path[] = "/tmp/simgpu-test-XXXXXX";
    const int fd = mkstemp(path);
    close(fd);
    unlink(path);  // the simulator creates it atomically itself
    state_path_ = path;
    setenv("SIMGPU_STATE", state_path_.c_str(), 1);
    setenv("SIMGPU_DEVICES", devices.c_str(), 1);
    setenv("SIMGPU_CONTEXT_OVERHEAD", "500Mi", 1);
    unsetenv("SIMGPU_KERNEL_US");
    unsetenv("SIMGPU_TIMESLICE_US");
    unsetenv("SIMGPU_SWITCH_US");
    unsetenv("SIMGPU_FAIL_ALLOC_AT");
    unsetenv("CUDA_VISIBLE_DEVICES");
  }
  ~SimEnvironment() { unlink(state_path_.c_str()); }
  const std::string& state_path() const { return state_path_; }

 private:
  std::string state_path_;
};

// A forked child running `body`; its exit code is the body's return value. `output` is a pipe the
// child may write a line of results to.
class Child {
 public:
  explicit Child(const std::function<int(FILE* output)>& body) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      FILE* output = fdopen(fds[1], "w");
      setvbuf(output, nullptr, _IONBF, 0);
      const int code = body(output);
      fflush(output);
      _exit(code);
    }
    close(fds[1]);
    read_fd_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      wait_exit();
    }
    close(read_fd_);
  }
  // Reads one line the child wrote (blocking).
  std::string read_line() {
    std::string line;
    char c = 0;
    while (read(read_fd_, &c, 1) == 1 && c != '\n') line.push_back(c);
    return line;
  }
  int wait_exit() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void kill_now() { kill(pid_, SIGKILL); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  bool reaped_ = false;
};

// Child-side helpers: return a CUresult as an exit code so failures are visible to the parent.
inline CUresult init_primary(CUcontext* context, int ordinal = 0) {
  if (CUresult r = cuInit(0); r != CUDA_SUCCESS) return r;
  CUdevice device = 0;
  if (CUresult r = cuDeviceGet(&device, ordinal); r != CUDA_SUCCESS) return r;
  if (CUresult r = cuDevicePrimaryCtxRetain(context, device); r != CUDA_SUCCESS) return r;
  return cuCtxSetCurrent(*context);
}

inline void wait_for_line(FILE* output, const char* message) {
  std::fprintf(output, "%s\n", message);
}

}  // namespace simgpu::testing
