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
#include <string>
#include <vector>

#include "burn_runtime.h"
#include "options.h"
#include "report.h"
#include "runtime.h"

namespace tessera::samples {
namespace {

struct Options {
  int device = 0;
  double seconds = 5;
  std::string launch = "chevron";
  std::string stream = "created";
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
  const RuntimeDevice device = open_runtime_device(options.device);
  const bool cooperative = options.launch == "cooperative";
  const char* kernel_name = cooperative ? "burn_fma_coop" : "burn_fma";
  const void* kernel = cooperative ? burn_fma_coop_function() : burn_fma_function();

  int resident_per_sm = 0;
  CUDART_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident_per_sm, kernel,
                                                             static_cast<int>(options.threads), 0));
  if (resident_per_sm <= 0) throw std::runtime_error("the kernel cannot run with these threads");
  const uint64_t resident = static_cast<uint64_t>(device.sm_count) * resident_per_sm;

  // The work of one kernel, in blocks. A cooperative grid must be co-resident, so it launches one
  // wave and each block does `rounds` blocks of that work.
  const uint64_t work_blocks = static_cast<uint64_t>(device.sm_count) * options.blocks_per_sm;
  BurnLaunch burn;
  burn.grid = static_cast<unsigned>(work_blocks);
  burn.threads = options.threads;
  burn.iterations = options.iterations;
  if (cooperative) {
    int supported = 0;
    CUDART_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, device.ordinal));
    if (supported == 0) throw std::runtime_error("the device does not support cooperative launch");
    burn.grid = static_cast<unsigned>(resident);
    burn.rounds = static_cast<unsigned>(ceil_div(work_blocks, burn.grid));
  }
  const uint64_t waves = ceil_div(static_cast<uint64_t>(burn.grid) * burn.rounds, resident);

  void* out = nullptr;
  CUDART_CHECK(cudaMalloc(
      &out, static_cast<uint64_t>(burn.grid) * burn.rounds * options.threads * sizeof(float)));
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

  // One kernel first, outside the measurement (module loading, a real driver's JIT).
  runtime_check(launch(), launch_call);
  CUDART_CHECK(cudaEventRecord(stop, stream));
  CUDART_CHECK(cudaEventSynchronize(stop));

  // Batches of `sync_every` launches; the last kernel of each batch is timed with events (it
  // starts when the batch before it is done, so the events bracket that kernel alone), and the
  // batch is awaited before the next, keeping the queue short.
  std::vector<double> latencies_us;
  uint64_t kernels = 0;
  const auto began = std::chrono::steady_clock::now();
  double elapsed_s = 0;
  do {
    for (unsigned i = 1; i < options.sync_every; ++i) runtime_check(launch(), launch_call);
    CUDART_CHECK(cudaEventRecord(start, stream));
    runtime_check(launch(), launch_call);
    CUDART_CHECK(cudaEventRecord(stop, stream));
    CUDART_CHECK(cudaEventSynchronize(stop));
    kernels += options.sync_every;
    float milliseconds = 0;
    CUDART_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
    latencies_us.push_back(std::round(milliseconds * 1e5) / 100);  // microseconds, 2 decimals
    elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  } while (elapsed_s < options.seconds);
  std::sort(latencies_us.begin(), latencies_us.end());

  CUDART_CHECK(cudaEventDestroy(start));
  CUDART_CHECK(cudaEventDestroy(stop));
  if (graph_exec != nullptr) CUDART_CHECK(cudaGraphExecDestroy(graph_exec));
  if (graph != nullptr) CUDART_CHECK(cudaGraphDestroy(graph));
  if (stream != nullptr) CUDART_CHECK(cudaStreamDestroy(stream));
  CUDART_CHECK(cudaFree(out));

  Json report = runtime_report_header("compute-burn-runtime", device);
  report["launch"] = options.launch;
  report["stream"] = options.stream;
  report["kernel"] = kernel_name;
  report["sms"] = device.sm_count;
  report["blocks"] = burn.grid;
  report["threads_per_block"] = options.threads;
  report["rounds_per_block"] = burn.rounds;
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
      "Runs a throughput-bound FMA kernel through the CUDA runtime for a while; prints kernels/s "
      "and kernel latency as one JSON line"};
  app.add_option("--device", options.device, "Device ordinal")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seconds", options.seconds, "How long to keep launching")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--launch", options.launch,
                 "chevron: burn_fma<<<>>>, kernel-ex: cudaLaunchKernelEx, cooperative: "
                 "cudaLaunchCooperativeKernel (a co-resident grid), graph: cudaGraphLaunch of a "
                 "graph captured from a stream (cudaStreamBeginCapture)")
      ->capture_default_str()
      ->check(CLI::IsMember({"chevron", "kernel-ex", "cooperative", "graph"}));
  app.add_option("--stream", options.stream,
                 "created: a non-blocking stream of cudaStreamCreateWithFlags; default: stream 0, "
                 "legacy or per-thread as the binary was built")
      ->capture_default_str()
      ->check(CLI::IsMember({"created", "default"}));
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
  return run_sample("compute-burn-runtime", [&] { run(options); });
}
