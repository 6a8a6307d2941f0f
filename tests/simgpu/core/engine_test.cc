// The simulated execution engine: asynchronous launches, kernel time from waves, event timing,
// and time-slicing between processes.
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <new>
#include <string>

#include "sim_test_support.h"

namespace simgpu::testing {
namespace {

constexpr const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry busy_kernel(
  .param .u64 busy_kernel_param_0
)
{
  ret;
}
.visible .entry other_kernel()
{
  ret;
}
)";

// 132 SMs x 8 resident blocks of 256 threads = one wave.
constexpr unsigned kBlocksPerWave = 132 * 8;

double now_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

CUresult load_kernel(CUfunction* function, const char* name = "busy_kernel") {
  CUcontext context;
  if (CUresult r = init_primary(&context); r) return r;
  CUmodule module;
  if (CUresult r = cuModuleLoadData(&module, kPtx); r) return r;
  return cuModuleGetFunction(function, module, name);
}

CUresult launch_waves(CUfunction function, unsigned waves, CUstream stream = nullptr) {
  return cuLaunchKernel(function, kBlocksPerWave * waves, 1, 1, 256, 1, 1, 0, stream, nullptr,
                        nullptr);
}

// Waves of 1 ms queued ahead of what a test times or queries: the device is busy with them while
// the host makes its next calls, so a host the machine's load delays by up to this long (0.5 s,
// against microseconds) changes nothing the test sees.
constexpr unsigned kLeadWaves = 500;

class SimEngine : public ::testing::Test {
 protected:
  SimEnvironment env_;
  void SetUp() override { setenv("SIMGPU_KERNEL_US", "busy_kernel=1000,default=50", 1); }
};

TEST_F(SimEngine, ModulesExposeTheirPtxEntries) {
  Child child([](FILE*) {
    CUfunction function;
    if (load_kernel(&function, "other_kernel") != CUDA_SUCCESS) return 1;
    CUmodule module;
    if (cuModuleLoadData(&module, kPtx) != CUDA_SUCCESS) return 2;
    CUfunction missing;
    if (cuModuleGetFunction(&missing, module, "nope") != CUDA_ERROR_NOT_FOUND) return 3;
    if (cuModuleLoadData(&module, "not ptx") != CUDA_ERROR_INVALID_IMAGE) return 4;
    return 0;
  });
  EXPECT_EQ(child.wait_exit(), 0);
}

TEST_F(SimEngine, LaunchesAreAsynchronousAndSynchronisationWaits) {
  Child child([](FILE*) {
    CUfunction function;
    if (load_kernel(&function) != CUDA_SUCCESS) return 1;
    if (launch_waves(function, kLeadWaves) != CUDA_SUCCESS) return 2;
    for (int i = 0; i < 20; ++i) {
      if (launch_waves(function, 1) != CUDA_SUCCESS) return 2;
    }
    if (cuStreamQuery(nullptr) != CUDA_ERROR_NOT_READY) return 3;  // 520 ms of work queued
    if (cuCtxSynchronize() != CUDA_SUCCESS) return 4;
    return cuStreamQuery(nullptr) == CUDA_SUCCESS ? 0 : 5;
  });
  EXPECT_EQ(child.wait_exit(), 0);
}

TEST_F(SimEngine, EventsTimeKernelsByWaves) {
  Child child([](FILE* out) {
    CUfunction function;
    if (load_kernel(&function) != CUDA_SUCCESS) return 1;
    CUevent start, stop;
    cuEventCreate(&start, 0);
    cuEventCreate(&stop, 0);
    // The start event completes when the lead does, and the timed kernel, queued by then, starts
    // at that moment: the time between the host's two calls is not in the figure.
    if (launch_waves(function, kLeadWaves) != CUDA_SUCCESS) return 5;
    cuEventRecord(start, nullptr);
    // 5 waves of a 1 ms wave; one extra block makes a sixth wave.
    if (cuLaunchKernel(function, kBlocksPerWave * 5 + 1, 1, 1, 256, 1, 1, 0, nullptr, nullptr,
                       nullptr) != CUDA_SUCCESS) {
      return 2;
    }
    cuEventRecord(stop, nullptr);
    float pending = 0;
    if (cuEventElapsedTime(&pending, start, stop) != CUDA_ERROR_NOT_READY) return 3;
    cuEventSynchronize(stop);
    float ms = 0;
    if (cuEventElapsedTime(&ms, start, stop) != CUDA_SUCCESS) return 4;
    std::fprintf(out, "%f\n", ms);
    return 0;
  });
  const double ms = std::stod(child.read_line());
  EXPECT_EQ(child.wait_exit(), 0);
  EXPECT_NEAR(ms, 6.0, 0.05);
}

TEST_F(SimEngine, BlocksPerSmFollowThreadsAndSharedMemory) {
  Child child([](FILE*) {
    CUfunction function;
    if (load_kernel(&function) != CUDA_SUCCESS) return 1;
    int blocks = 0;
    cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, function, 256, 0);
    if (blocks != 8) return 2;
    cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, function, 32, 0);
    if (blocks != 32) return 3;
    cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, function, 128, 100 * 1024);
    if (blocks != 2) return 4;
    // Cooperative launches must fit co-resident.
    if (cuLaunchCooperativeKernel(function, kBlocksPerWave + 1, 1, 1, 256, 1, 1, 0, nullptr,
                                  nullptr) != CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) {
      return 5;
    }
    if (cuLaunchKernel(function, 1, 1, 1, 2048, 1, 1, 0, nullptr, nullptr, nullptr) !=
        CUDA_ERROR_INVALID_VALUE) {
      return 6;
    }
    return 0;
  });
  EXPECT_EQ(child.wait_exit(), 0);
}

TEST_F(SimEngine, EveryLaunchPathRunsTheKernel) {
  Child child([](FILE*) {
    CUfunction function;
    if (load_kernel(&function) != CUDA_SUCCESS) return 1;
    CUstream stream;
    cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    CUlaunchConfig config{};
    config.gridDimX = kBlocksPerWave, config.gridDimY = 1, config.gridDimZ = 1;
    config.blockDimX = 256, config.blockDimY = 1, config.blockDimZ = 1;
    config.hStream = stream;
    CUgraph graph;
    if (cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS) return 2;
    launch_waves(function, 2, stream);
    if (cuStreamEndCapture(stream, &graph) != CUDA_SUCCESS) return 3;
    CUgraphExec exec;
    if (cuGraphInstantiate(&exec, graph, 0) != CUDA_SUCCESS) return 4;
    CUevent start, stop;
    cuEventCreate(&start, 0);
    cuEventCreate(&stop, 0);
    // As in EventsTimeKernelsByWaves: the launches below are queued before the lead ends.
    if (launch_waves(function, kLeadWaves, stream) != CUDA_SUCCESS) return 10;
    cuEventRecord(start, stream);
    if (launch_waves(function, 1, stream) != CUDA_SUCCESS) return 5;                      // 1 ms
    if (cuLaunchKernelEx(&config, function, nullptr, nullptr) != CUDA_SUCCESS) return 6;  // 1 ms
    if (cuLaunchCooperativeKernel(function, kBlocksPerWave, 1, 1, 256, 1, 1, 0, stream, nullptr) !=
        CUDA_SUCCESS) {
      return 7;  // 1 ms
    }
    if (cuGraphLaunch(exec, stream) != CUDA_SUCCESS) return 8;  // 2 ms
    cuEventRecord(stop, stream);
    cuEventSynchronize(stop);
    float ms = 0;
    cuEventElapsedTime(&ms, start, stop);
    return std::fabs(ms - 5.0f) < 0.05f ? 0 : 9;
  });
  EXPECT_EQ(child.wait_exit(), 0);
}

// The start of a counting window, in CLOCK_MONOTONIC ns, shared with forked workers (0: not yet).
std::atomic<int64_t>* shared_window_start() {
  void* page = mmap(nullptr, sizeof(std::atomic<int64_t>), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) std::abort();
  return new (page) std::atomic<int64_t>(0);
}

// Loads the kernel, says "ready", waits for the window's start to be set and reached, then keeps 4
// one-millisecond kernels in flight and prints how many finished within the 2 s window.
int count_kernels_in_window(FILE* out, std::atomic<int64_t>* window_start) {
  CUfunction function;
  if (load_kernel(&function) != CUDA_SUCCESS) return 1;
  CUevent done_event;
  cuEventCreate(&done_event, CU_EVENT_DISABLE_TIMING);
  std::fprintf(out, "ready\n");
  while (window_start->load() == 0) {
    timespec pause{0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  const double start = static_cast<double>(window_start->load()) / 1e9;
  while (now_seconds() < start) {
    const double left = start - now_seconds();
    timespec pause{0, static_cast<long>(std::min(left, 0.001) * 1e9)};
    nanosleep(&pause, nullptr);
  }
  int completed = 0;
  while (now_seconds() - start < 2.0) {
    for (int i = 0; i < 4; ++i) launch_waves(function, 1);
    cuEventRecord(done_event, nullptr);
    cuEventSynchronize(done_event);
    if (now_seconds() - start <= 2.0) completed += 4;
  }
  std::fprintf(out, "%d\n", completed);
  return 0;
}

// Opens a window 0.1 s from now once every worker is ready (however long their start-up took on a
// loaded machine): both count in the same window, and neither has the device alone meanwhile.
void open_window(std::atomic<int64_t>* window_start) {
  window_start->store(static_cast<int64_t>((now_seconds() + 0.1) * 1e9));
}

TEST_F(SimEngine, TwoBusyProcessesShareTheDeviceEvenly) {
  // The baseline, in the same run: one process alone, fed by the same loop.
  std::atomic<int64_t>* alone_start = shared_window_start();
  Child solo([&](FILE* out) { return count_kernels_in_window(out, alone_start); });
  ASSERT_EQ(solo.read_line(), "ready");
  open_window(alone_start);
  const int done_alone = std::stoi(solo.read_line());
  EXPECT_EQ(solo.wait_exit(), 0);

  std::atomic<int64_t>* shared_start = shared_window_start();
  Child a([&](FILE* out) { return count_kernels_in_window(out, shared_start); });
  Child b([&](FILE* out) { return count_kernels_in_window(out, shared_start); });
  ASSERT_EQ(a.read_line(), "ready");
  ASSERT_EQ(b.read_line(), "ready");
  open_window(shared_start);
  const int done_a = std::stoi(a.read_line());
  const int done_b = std::stoi(b.read_line());
  EXPECT_EQ(a.wait_exit(), 0);
  EXPECT_EQ(b.wait_exit(), 0);
  munmap(alone_start, sizeof(*alone_start));
  munmap(shared_start, sizeof(*shared_start));
  std::printf("FIGURE kernels in 2 s: alone %d; together %d + %d\n", done_alone, done_a, done_b);
  const double share_a = 100.0 * done_a / (done_a + done_b);
  EXPECT_NEAR(share_a, 50.0, 5.0) << done_a << " vs " << done_b;
  // One device, time-sliced: together they finish no more 1 ms kernels in 2 s than it holds...
  EXPECT_GT(done_alone, 0);
  EXPECT_LE(done_alone, 2004);
  EXPECT_LE(done_a + done_b, 2004);
  // ...and keep it about as busy as one process alone does with the same loop (the host's speed,
  // not the simulator, limits both).
  EXPECT_GE(done_a + done_b, 0.9 * done_alone) << "alone " << done_alone;
}

}  // namespace
}  // namespace simgpu::testing
