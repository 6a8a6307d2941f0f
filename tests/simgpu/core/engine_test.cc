// The simulated execution engine: asynchronous launches, kernel time from waves, event timing,
// and time-slicing between processes.
#include <cuda.h>
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <cmath>
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
    for (int i = 0; i < 20; ++i) {
      if (launch_waves(function, 1) != CUDA_SUCCESS) return 2;
    }
    if (cuStreamQuery(nullptr) != CUDA_ERROR_NOT_READY) return 3;  // 20 ms of work queued
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

TEST_F(SimEngine, TwoBusyProcessesShareTheDeviceEvenly) {
  // Both count kernels completed in the same 2 s window, which opens at a time fixed before either
  // is forked: on a loaded machine one child's start-up (fork, context, module) can take far longer
  // than the other's, and a window of its own would give the first the device alone meanwhile.
  const double start = now_seconds() + 2.0;
  auto worker = [start](FILE* out) {
    CUfunction function;
    if (load_kernel(&function) != CUDA_SUCCESS) return 1;
    CUevent done_event;
    cuEventCreate(&done_event, CU_EVENT_DISABLE_TIMING);
    if (now_seconds() > start) {  // not ready within 2 s: the window would not be shared
      std::fprintf(out, "-1\n");
      return 2;
    }
    while (now_seconds() < start) {
      const double left = start - now_seconds();
      timespec pause{0, static_cast<long>(std::min(left, 0.001) * 1e9)};
      nanosleep(&pause, nullptr);
    }
    int completed = 0;
    // Keep 4 kernels in flight; count those finished within the window.
    while (now_seconds() - start < 2.0) {
      for (int i = 0; i < 4; ++i) launch_waves(function, 1);
      cuEventRecord(done_event, nullptr);
      cuEventSynchronize(done_event);
      if (now_seconds() - start <= 2.0) completed += 4;
    }
    std::fprintf(out, "%d\n", completed);
    return 0;
  };
  Child a(worker);
  Child b(worker);
  const int done_a = std::stoi(a.read_line());
  const int done_b = std::stoi(b.read_line());
  EXPECT_EQ(a.wait_exit(), 0);
  EXPECT_EQ(b.wait_exit(), 0);
  const double share_a = 100.0 * done_a / (done_a + done_b);
  EXPECT_NEAR(share_a, 50.0, 5.0) << done_a << " vs " << done_b;
  // Together they keep the device busy: about 2,000 one-millisecond kernels in 2 s.
  EXPECT_GT(done_a + done_b, 1800);
  EXPECT_LE(done_a + done_b, 2004);
}

}  // namespace
}  // namespace simgpu::testing
