// compute-burn: keeps the GPU busy with a throughput-bound kernel for a while, through one of the
// launch paths a compute quota must throttle, and reports kernels per second and the latency of
// single kernels. Two of these side by side show how the GPU's time is shared.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "burn_kernels_ptx.h"
#include "driver.h"
#include "options.h"
#include "report.h"

namespace tessera::samples {
namespace {

struct Options {
  CommonOptions common;
  double seconds = 5;
  std::string launch = "kernel";
  unsigned sync_every = 16;
  unsigned iterations = 4000;
  unsigned blocks_per_sm = 64;
  unsigned threads = 256;
};

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double percent) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(percent / 100.0 * static_cast<double>(sorted.size()));
  const size_t index = static_cast<size_t>(std::max(rank, 1.0)) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

void run(const Options& options) {
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
                       &resident_per_sm, kernel, static_cast<int>(options.threads), 0));
  if (resident_per_sm <= 0) throw std::runtime_error("the kernel cannot run with these threads");
  const uint64_t resident = static_cast<uint64_t>(device.sm_count) * resident_per_sm;

  // The work of one kernel, in blocks. A cooperative grid must be co-resident, so it launches one
  // wave and each block does `rounds` blocks of that work.
  const uint64_t work_blocks = static_cast<uint64_t>(device.sm_count) * options.blocks_per_sm;
  unsigned grid = static_cast<unsigned>(work_blocks);
  unsigned rounds = 1;
  if (cooperative) {
    int supported = 0;
    CU_CHECK(driver, cu.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH,
                                             device.device));
    if (supported == 0) throw std::runtime_error("the device does not support cooperative launch");
    grid = static_cast<unsigned>(resident);
    rounds = static_cast<unsigned>(ceil_div(work_blocks, grid));
  }
  const uint64_t waves = ceil_div(static_cast<uint64_t>(grid) * rounds, resident);

  CUdeviceptr out = 0;
  CU_CHECK(driver, cu.cuMemAlloc_v2(&out, static_cast<uint64_t>(grid) * rounds * options.threads *
                                              sizeof(float)));
  // The per-thread mode uses stream 0 through the _ptsz entry points, i.e. the thread's own
  // default stream, as code built with --default-stream per-thread does.
  CUstream stream = nullptr;
  if (!per_thread_stream) CU_CHECK(driver, cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  unsigned iterations = options.iterations;
  void* params[] = {&out, &iterations, &rounds};

  CUgraph graph = nullptr;
  CUgraphExec graph_exec = nullptr;
  if (options.launch == "graph") {
    CU_CHECK(driver, cu.cuGraphCreate(&graph, 0));
    CUDA_KERNEL_NODE_PARAMS node_params = {};
    node_params.func = kernel;
    node_params.gridDimX = grid;
    node_params.gridDimY = node_params.gridDimZ = 1;
    node_params.blockDimX = options.threads;
    node_params.blockDimY = node_params.blockDimZ = 1;
    node_params.kernelParams = params;
    CUgraphNode node = nullptr;
    CU_CHECK(driver, cu.cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &node_params));
    CU_CHECK(driver, cu.cuGraphInstantiateWithFlags(&graph_exec, graph, 0));
  }

  CUlaunchConfig launch_config = {};
  launch_config.gridDimX = grid;
  launch_config.gridDimY = launch_config.gridDimZ = 1;
  launch_config.blockDimX = options.threads;
  launch_config.blockDimY = launch_config.blockDimZ = 1;
  launch_config.hStream = stream;

  std::function<CUresult()> launch;
  const char* launch_call = nullptr;
  if (options.launch == "kernel") {
    launch_call = "cuLaunchKernel";
    launch = [&] {
      return cu.cuLaunchKernel(kernel, grid, 1, 1, options.threads, 1, 1, 0, stream, params,
                               nullptr);
    };
  } else if (options.launch == "kernel-ex") {
    launch_call = "cuLaunchKernelEx";
    launch = [&] { return cu.cuLaunchKernelEx(&launch_config, kernel, params, nullptr); };
  } else if (per_thread_stream) {
    launch_call = "cuLaunchKernel_ptsz";
    launch = [&] {
      return cu.cuLaunchKernel_ptsz(kernel, grid, 1, 1, options.threads, 1, 1, 0, nullptr, params,
                                    nullptr);
    };
  } else if (cooperative) {
    launch_call = "cuLaunchCooperativeKernel";
    launch = [&] {
      return cu.cuLaunchCooperativeKernel(kernel, grid, 1, 1, options.threads, 1, 1, 0, stream,
                                          params);
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

  // One kernel first, outside the measurement: a real driver JIT-compiles the PTX on first use.
  driver.check(launch(), launch_call);
  record(stop);
  CU_CHECK(driver, cu.cuEventSynchronize(stop));

  // Batches of `sync_every` launches; the last kernel of each batch is timed with events (it
  // starts when the batch before it is done, so the events bracket that kernel alone, waits for
  // other tenants included), and the batch is awaited before the next, keeping the queue short.
  std::vector<double> latencies_us;
  uint64_t kernels = 0;
  const auto began = std::chrono::steady_clock::now();
  double elapsed_s = 0;
  do {
    for (unsigned i = 1; i < options.sync_every; ++i) driver.check(launch(), launch_call);
    record(start);
    driver.check(launch(), launch_call);
    record(stop);
    CU_CHECK(driver, cu.cuEventSynchronize(stop));
    kernels += options.sync_every;
    float milliseconds = 0;
    CU_CHECK(driver, cu.cuEventElapsedTime_v2(&milliseconds, start, stop));
    latencies_us.push_back(std::round(milliseconds * 1e5) / 100);  // microseconds, 2 decimals
    elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  } while (elapsed_s < options.seconds);
  std::sort(latencies_us.begin(), latencies_us.end());

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
  report["sms"] = device.sm_count;
  report["blocks"] = grid;
  report["threads_per_block"] = options.threads;
  report["rounds_per_block"] = rounds;
  report["resident_blocks_per_sm"] = resident_per_sm;
  report["waves"] = waves;
  report["iterations"] = options.iterations;
  report["sync_every"] = options.sync_every;
  report["kernels"] = kernels;
  report["seconds"] = elapsed_s;
  report["kernels_per_s"] = static_cast<double>(kernels) / elapsed_s;
  report["latency_samples"] = latencies_us.size();
  report["latency_us_min"] = latencies_us.front();
  report["latency_us_p50"] = percentile(latencies_us, 50);
  report["latency_us_p99"] = percentile(latencies_us, 99);
  report["latency_us_max"] = latencies_us.back();
  print_report(report);
}

}  // namespace
}  // namespace tessera::samples

int main(int argc, char** argv) {
  using namespace tessera::samples;
  Options options;
  CLI::App app{
      "Runs a throughput-bound FMA kernel for a while; prints kernels/s and kernel latency as "
      "one JSON line"};
  add_common_options(app, options.common);
  app.add_option("--seconds", options.seconds, "How long to keep launching")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--launch", options.launch,
                 "kernel: cuLaunchKernel, kernel-ex: cuLaunchKernelEx, ptsz: cuLaunchKernel_ptsz "
                 "on the per-thread default stream, cooperative: cuLaunchCooperativeKernel (a "
                 "co-resident grid), graph: cuGraphLaunch of a one-kernel graph")
      ->capture_default_str()
      ->check(CLI::IsMember({"kernel", "kernel-ex", "ptsz", "cooperative", "graph"}));
  app.add_option("--sync-every", options.sync_every,
                 "Launches per batch: the batch's last kernel is timed, then the batch awaited")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--iters", options.iterations, "FMA iterations per chain")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  app.add_option("--blocks-per-sm", options.blocks_per_sm, "Blocks of work per SM per kernel")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 16));
  app.add_option("--threads", options.threads, "Threads per block")
      ->capture_default_str()
      ->check(CLI::Range(32u, 1024u));
  CLI11_PARSE(app, argc, argv);
  return run_sample("compute-burn", [&] { run(options); });
}
