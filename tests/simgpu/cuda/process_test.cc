// Which process the simulated driver charges, and what a driver call costs the kernel. The
// simulator keeps this process's id cached (a real driver makes no getpid() per call), so these
// tests prove a forked child is still charged under its own pid, and that driver calls make no
// system calls that grow with their number.
#include <cuda.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/shared_state.h"
#include "sim_test_support.h"

namespace simgpu::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kOverhead = 500 * kMiB;

// Device 0's memory per live process, as the simulator's state file records it. Read from this
// (orchestrating) process without taking a slot: the children are idle while it looks.
std::map<int, uint64_t> charged_by_pid(const std::string& state_path) {
  std::map<int, uint64_t> charged;
  const int fd = open(state_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return charged;
  void* memory = mmap(nullptr, sizeof(SharedState), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) return charged;
  const auto* state = static_cast<const SharedState*>(memory);
  for (const ProcessSlot& slot : state->processes) {
    if (slot.pid != 0) charged[slot.pid] = slot.used_memory[0];
  }
  munmap(memory, sizeof(SharedState));
  return charged;
}

// A child that allocates `bytes` on the primary context, writes its pid and holds the memory
// until it reads a line (or its parent closes the pipe).
class Tenant {
 public:
  explicit Tenant(uint64_t bytes) : child_([bytes](FILE* output) { return hold(bytes, output); }) {
    ready_ = child_.read_line() == "ready";
  }
  bool ready() const { return ready_; }
  pid_t pid() const { return child_.pid(); }
  int finish() {
    child_.kill_now();
    return child_.wait_exit();
  }

 private:
  static int hold(uint64_t bytes, FILE* output) {
    CUcontext context;
    if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
    CUdeviceptr pointer = 0;
    if (cuMemAlloc_v2(&pointer, bytes) != CUDA_SUCCESS) return 100;
    std::fprintf(output, "ready\n");
    pause();  // until killed
    return 0;
  }
  Child child_;
  bool ready_ = false;
};

TEST(SimProcess, ForkedTenantsAreChargedUnderTheirOwnPids) {
  SimEnvironment env;
  // This process loaded the simulated libcuda (its pid was cached then); each tenant is a fork of
  // it and must be charged as itself.
  Tenant first(1 * kGiB);
  Tenant second(2 * kGiB);
  ASSERT_TRUE(first.ready());
  ASSERT_TRUE(second.ready());
  const std::map<int, uint64_t> charged = charged_by_pid(env.state_path());
  EXPECT_EQ(charged, (std::map<int, uint64_t>{{first.pid(), kOverhead + 1 * kGiB},
                                              {second.pid(), kOverhead + 2 * kGiB}}));
  EXPECT_EQ(charged.count(getpid()), 0u) << "the parent used no driver call";
  first.finish();
  second.finish();
}

TEST(SimProcess, ChildOfAnInitialisedProcessCannotUseItsParentsDriver) {
  SimEnvironment env;
  Child parent([](FILE* output) {
    CUcontext context;
    if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
    CUdeviceptr pointer = 0;
    if (cuMemAlloc_v2(&pointer, 1 * kGiB) != CUDA_SUCCESS) return 100;
    // As with a real driver, the fork's child gets "not initialised" from everything; it must
    // not reach (and charge) its parent's process slot.
    Child child([](FILE*) {
      CUdeviceptr child_pointer = 0;
      if (cuMemAlloc_v2(&child_pointer, 1 * kGiB) != CUDA_ERROR_NOT_INITIALIZED) return 1;
      CUdevice device = -1;
      if (cuCtxGetDevice(&device) != CUDA_ERROR_NOT_INITIALIZED) return 2;
      CUcontext current = nullptr;
      if (cuCtxGetCurrent(&current) != CUDA_ERROR_NOT_INITIALIZED) return 3;
      return cuInit(0) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 4;
    });
    if (int code = child.wait_exit(); code != 0) return 10 + code;
    size_t free_bytes = 0, total = 0;
    if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return 101;
    if (total - free_bytes != kOverhead + 1 * kGiB) return 102;
    std::fprintf(output, "checked\n");
    pause();
    return 0;
  });
  ASSERT_EQ(parent.read_line(), "checked");
  EXPECT_EQ(charged_by_pid(env.state_path()),
            (std::map<int, uint64_t>{{parent.pid(), kOverhead + 1 * kGiB}}));
  parent.kill_now();
  parent.wait_exit();
}

// Runs the call probe under `strace -f -c` for `iterations` rounds of driver calls; returns the
// count of each system call, or an empty map when it could not run.
std::map<std::string, long> syscalls_of_probe(int iterations) {
  char summary_path[] = "/tmp/simgpu-strace-XXXXXX";
  const int fd = mkstemp(summary_path);
  if (fd < 0) return {};
  close(fd);
  const std::string command = std::string("strace -f -qq -c -o ") + summary_path + " " +
                              SIMGPU_CALL_PROBE + " " + std::to_string(iterations) +
                              " >/dev/null 2>&1";
  std::map<std::string, long> counts;
  if (std::system(command.c_str()) == 0) {
    std::ifstream summary(summary_path);
    std::string line;
    // Rows: "% time  seconds  usecs/call  calls  [errors]  syscall"; the name is last and the
    // call count is the fourth field.
    while (std::getline(summary, line)) {
      std::istringstream fields(line);
      std::string percent, seconds, per_call, calls, name, last;
      if (!(fields >> percent >> seconds >> per_call >> calls)) continue;
      if (calls.find_first_not_of("0123456789") != std::string::npos) continue;
      while (fields >> name) last = name;
      if (!last.empty() && last != "total") counts[last] = std::stol(calls);
    }
  }
  unlink(summary_path);
  return counts;
}

long total(const std::map<std::string, long>& counts) {
  long sum = 0;
  for (const auto& [name, count] : counts) sum += count;
  return sum;
}

TEST(SimProcess, DriverCallsMakeNoSystemCallsPerCall) {
  if (std::system("strace -f -qq -c -o /dev/null true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "strace is not installed or cannot trace here (ptrace denied); "
                    "scripts/install-deps.sh installs it";
  }
  SimEnvironment env;
  setenv("SIMGPU_KERNEL_US", "default=0.001", 1);  // 1 ns: a full push buffer has run
  // LeakSanitizer refuses to run under ptrace: in a sanitizer build the probe runs without it (its
  // own start-up system calls are the same for every round count).
  const char* asan = getenv("ASAN_OPTIONS");
  setenv("ASAN_OPTIONS", (std::string(asan ? asan : "") + ":detect_leaks=0").c_str(), 1);
  constexpr int kFew = 100;
  constexpr int kMany = 2000;
  const auto few = syscalls_of_probe(kFew);
  const auto many = syscalls_of_probe(kMany);
  ASSERT_FALSE(few.empty()) << "the probe failed under strace";
  ASSERT_FALSE(many.empty()) << "the probe failed under strace";
  const long getpid_few = few.count("getpid") ? few.at("getpid") : 0;
  const long getpid_many = many.count("getpid") ? many.at("getpid") : 0;
  EXPECT_EQ(getpid_many, getpid_few) << "getpid() per driver call";
  // Each round is cuCtxGetDevice + cuCtxGetCurrent + cuMemAlloc_v2 + cuMemFree_v2 +
  // cuLaunchKernel: 1,900 more rounds may not cost even one system call per hundred rounds (the
  // slack is for the C library's own allocator, not for the driver).
  EXPECT_LT(total(many) - total(few), (kMany - kFew) / 100)
      << "system calls: " << total(few) << " for " << kFew << " rounds, " << total(many) << " for "
      << kMany;
}

}  // namespace
}  // namespace simgpu::testing
