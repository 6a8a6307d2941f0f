// compute-burn-runtime: the compute-burn sample through the CUDA runtime API: the same
// throughput-bound kernel launched by <<<>>>, cudaLaunchKernelEx, cudaLaunchCooperativeKernel or
// as a CUDA graph captured from a stream, reporting kernels per second and the latency of single
// kernels (timed with events on the device's timeline).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "burn_cli.h"
#include "burn_plan.h"
#include "burn_runtime.h"
#include "common/report.h"
#include "common/runtime.h"

namespace tessera::samples {
namespace {

void run(const ComputeBurnRuntimeOptions& options) {
  const RuntimeDevice device = open_runtime_device(options.device);
  const bool cooperative = options.launch == "cooperative";
  const char* kernel_name = cooperative ? "burn_fma_coop" : "burn_fma";
  const void* kernel = cooperative ? burn_fma_coop_function() : burn_fma_function();

  int resident_per_sm = 0;
  CUDART_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &resident_per_sm, kernel, static_cast<int>(options.burn.threads), 0));
  if (cooperative) {
    int supported = 0;
    CUDART_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, device.ordinal));
    if (supported == 0) throw std::runtime_error("the device does not support cooperative launch");
  }
  const BurnGrid plan = plan_burn_grid(options.burn, device.sm_count, resident_per_sm, cooperative);
  BurnLaunch burn;
  burn.grid = plan.grid;
  burn.rounds = plan.rounds;
  burn.threads = options.burn.threads;
  burn.iterations = options.burn.iterations;

  void* out = nullptr;
  CUDART_CHECK(cudaMalloc(
      &out, static_cast<uint64_t>(burn.grid) * burn.rounds * burn.threads * sizeof(float)));
  burn.out = static_cast<float*>(out);
  // "default" launches on stream 0: the legacy default stream, or the thread's own with
  // --default-stream per-thread (the binary's build decides, as for any program).
  cudaStream_t stream = nullptr;
  if (options.stream == "created") {
    CUDART_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  burn.stream = stream;

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  if (options.launch == "graph") {
    // Captured on a stream of its own (the legacy default stream cannot be captured), launched
    // on the chosen one.
    cudaStream_t capture = nullptr;
    CUDART_CHECK(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking));
    BurnLaunch captured = burn;
    captured.stream = capture;
    CUDART_CHECK(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal));
    const cudaError_t launched = launch_burn_chevron(captured);
    const cudaError_t ended = cudaStreamEndCapture(capture, &graph);
    runtime_check(launched, "burn_fma<<<>>> under stream capture");
    runtime_check(ended, "cudaStreamEndCapture");
    CUDART_CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
    CUDART_CHECK(cudaStreamDestroy(capture));
  }

  std::function<cudaError_t()> launch;
  const char* launch_call = nullptr;
  if (options.launch == "chevron") {
    launch_call = "burn_fma<<<>>>";
    launch = [&] { return launch_burn_chevron(burn); };
  } else if (options.launch == "kernel-ex") {
    launch_call = "cudaLaunchKernelEx";
    launch = [&] { return launch_burn_ex(burn); };
  } else if (cooperative) {
    launch_call = "cudaLaunchCooperativeKernel";
    launch = [&] { return launch_burn_cooperative(burn); };
  } else {
    launch_call = "cudaGraphLaunch";
    launch = [&] { return cudaGraphLaunch(graph_exec, stream); };
  }

  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CUDART_CHECK(cudaEventCreate(&start));
  CUDART_CHECK(cudaEventCreate(&stop));
  BurnCalls calls;
  calls.launch = [&] { runtime_check(launch(), launch_call); };
  calls.mark_start = [&] { CUDART_CHECK(cudaEventRecord(start, stream)); };
  calls.mark_stop_and_wait = [&] {
    CUDART_CHECK(cudaEventRecord(stop, stream));
    CUDART_CHECK(cudaEventSynchronize(stop));
  };
  calls.elapsed_ms = [&] {
    float milliseconds = 0;
    CUDART_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
    return milliseconds;
  };
  const BurnTimings timings = time_burn(options.burn, calls);

  CUDART_CHECK(cudaEventDestroy(start));
  CUDART_CHECK(cudaEventDestroy(stop));
  if (graph_exec != nullptr) CUDART_CHECK(cudaGraphExecDestroy(graph_exec));
  if (graph != nullptr) CUDART_CHECK(cudaGraphDestroy(graph));
  if (stream != nullptr) CUDART_CHECK(cudaStreamDestroy(stream));
  CUDART_CHECK(cudaFree(out));

  Json report = runtime_report_header("compute-burn-runtime", device, kBuiltDefaultStream);
  report["launch"] = options.launch;
  report["stream"] = options.stream;
  report["kernel"] = kernel_name;
  add_burn_report(report, options.burn, device.sm_count, plan, timings);
  print_report(report);
}

}  // namespace
}  // namespace tessera::samples

int main(int argc, char** argv) {
  using namespace tessera::samples;
  ComputeBurnRuntimeOptions options;
  if (const std::optional<int> status =
          parse_compute_burn_runtime_command_line(argc, argv, options)) {
    return *status;
  }
  return run_sample("compute-burn-runtime", [&] { run(options); });
}
