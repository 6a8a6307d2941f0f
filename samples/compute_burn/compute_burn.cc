// compute-burn: keeps the GPU busy with a throughput-bound kernel for a while, through one of the
// launch paths a compute quota must throttle, and reports kernels per second and the latency of
// single kernels. Two of these side by side show how the GPU's time is shared.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "burn_cli.h"
#include "burn_kernels_ptx.h"
#include "burn_plan.h"
#include "common/driver.h"
#include "common/report.h"

namespace tessera::samples {
namespace {

void run(const ComputeBurnOptions& options) {
  const Driver driver = Driver::load(options.common.resolve);
  const DriverApi& cu = driver.api();
  PrimaryContext context(driver, options.common.device);
  const DeviceInfo& device = context.device();
  const bool cooperative = options.launch == "cooperative";
  const bool per_thread_stream = options.launch == "ptsz";

  CUmodule module = nullptr;
  CU_CHECK(driver, cu.cuModuleLoadData(&module, kBurnKernelsPtx));
  const char* kernel_name = cooperative ? "burn_fma_coop" : "burn_fma";
  CUfunction kernel = nullptr;
  CU_CHECK(driver, cu.cuModuleGetFunction(&kernel, module, kernel_name));

  int resident_per_sm = 0;
  CU_CHECK(driver, cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                       &resident_per_sm, kernel, static_cast<int>(options.burn.threads), 0));
  if (cooperative) {
    int supported = 0;
    CU_CHECK(driver, cu.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH,
                                             device.device));
    if (supported == 0) throw std::runtime_error("the device does not support cooperative launch");
  }
  const BurnGrid plan = plan_burn_grid(options.burn, device.sm_count, resident_per_sm, cooperative);
  unsigned grid = plan.grid;
  unsigned rounds = plan.rounds;
  const unsigned threads = options.burn.threads;

  CUdeviceptr out = 0;
  CU_CHECK(driver,
           cu.cuMemAlloc_v2(&out, static_cast<uint64_t>(grid) * rounds * threads * sizeof(float)));
  // The per-thread mode uses stream 0 through the _ptsz entry points, i.e. the thread's own
  // default stream, as code built with --default-stream per-thread does.
  CUstream stream = nullptr;
  if (!per_thread_stream) CU_CHECK(driver, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  unsigned iterations = options.burn.iterations;
  void* params[] = {&out, &iterations, &rounds};

  CUgraph graph = nullptr;
  CUgraphExec graph_exec = nullptr;
  if (options.launch == "graph") {
    CU_CHECK(driver, cu.cuGraphCreate(&graph, 0));
    CUDA_KERNEL_NODE_PARAMS node_params = {};
    node_params.func = kernel;
    node_params.gridDimX = grid;
    node_params.gridDimY = node_params.gridDimZ = 1;
    node_params.blockDimX = threads;
    node_params.blockDimY = node_params.blockDimZ = 1;
    node_params.kernelParams = params;
    CUgraphNode node = nullptr;
    CU_CHECK(driver, cu.cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &node_params));
    CU_CHECK(driver, cu.cuGraphInstantiateWithFlags(&graph_exec, graph, 0));
  }

  CUlaunchConfig launch_config = {};
  launch_config.gridDimX = grid;
  launch_config.gridDimY = launch_config.gridDimZ = 1;
  launch_config.blockDimX = threads;
  launch_config.blockDimY = launch_config.blockDimZ = 1;
  launch_config.hStream = stream;

  std::function<CUresult()> launch;
  const char* launch_call = nullptr;
  if (options.launch == "kernel") {
    launch_call = "cuLaunchKernel";
    launch = [&] {
      return cu.cuLaunchKernel(kernel, grid, 1, 1, threads, 1, 1, 0, stream, params, nullptr);
    };
  } else if (options.launch == "kernel-ex") {
    launch_call = "cuLaunchKernelEx";
    launch = [&] { return cu.cuLaunchKernelEx(&launch_config, kernel, params, nullptr); };
  } else if (per_thread_stream) {
    launch_call = "cuLaunchKernel_ptsz";
    launch = [&] {
      return cu.cuLaunchKernel_ptsz(kernel, grid, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr);
    };
  } else if (cooperative) {
    launch_call = "cuLaunchCooperativeKernel";
    launch = [&] {
      return cu.cuLaunchCooperativeKernel(kernel, grid, 1, 1, threads, 1, 1, 0, stream, params);
    };
  } else {
    launch_call = "cuGraphLaunch";
    launch = [&] { return cu.cuGraphLaunch(graph_exec, stream); };
  }
  const auto record = [&](CUevent event) {
    const CUresult result =
        per_thread_stream ? cu.cuEventRecord_ptsz(event, nullptr) : cu.cuEventRecord(event, stream);
    driver.check(result, per_thread_stream ? "cuEventRecord_ptsz" : "cuEventRecord");
  };

  CUevent start = nullptr;
  CUevent stop = nullptr;
  CU_CHECK(driver, cu.cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU_CHECK(driver, cu.cuEventCreate(&stop, CU_EVENT_DEFAULT));
  BurnCalls calls;
  calls.launch = [&] { driver.check(launch(), launch_call); };
  calls.mark_start = [&] { record(start); };
  calls.mark_stop_and_wait = [&] {
    record(stop);
    CU_CHECK(driver, cu.cuEventSynchronize(stop));
  };
  calls.elapsed_ms = [&] {
    float milliseconds = 0;
    CU_CHECK(driver, cu.cuEventElapsedTime_v2(&milliseconds, start, stop));
    return milliseconds;
  };
  const BurnTimings timings = time_burn(options.burn, calls);

  CU_CHECK(driver, cu.cuEventDestroy_v2(start));
  CU_CHECK(driver, cu.cuEventDestroy_v2(stop));
  if (graph_exec != nullptr) CU_CHECK(driver, cu.cuGraphExecDestroy(graph_exec));
  if (graph != nullptr) CU_CHECK(driver, cu.cuGraphDestroy(graph));
  if (stream != nullptr) CU_CHECK(driver, cu.cuStreamDestroy_v2(stream));
  CU_CHECK(driver, cu.cuMemFree_v2(out));
  CU_CHECK(driver, cu.cuModuleUnload(module));

  Json report = report_header("compute-burn", driver, device);
  report["launch"] = options.launch;
  report["kernel"] = kernel_name;
  add_burn_report(report, options.burn, device.sm_count, plan, timings);
  print_report(report);
}

}  // namespace
}  // namespace tessera::samples

int main(int argc, char** argv) {
  using namespace tessera::samples;
  ComputeBurnOptions options;
  if (const std::optional<int> status = parse_compute_burn_command_line(argc, argv, options)) {
    return *status;
  }
  return run_sample("compute-burn", [&] { run(options); });
}
