#include "burn_cli.h"

#include "common/options.h"

namespace tessera::samples {
namespace {

// --seconds, --sync-every, --iters, --blocks-per-sm, --threads.
void add_burn_options(CLI::App& app, BurnOptions& options) {
  app.add_option("--seconds", options.seconds, "How long to keep launching")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
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
}

}  // namespace

std::optional<int> parse_compute_burn_command_line(int argc, char** argv,
                                                   ComputeBurnOptions& options) {
  CLI::App app{
      "Runs a throughput-bound FMA kernel for a while; prints kernels/s and kernel latency as "
      "one JSON line"};
  add_common_options(app, options.common);
  add_burn_options(app, options.burn);
  app.add_option("--launch", options.launch,
                 "kernel: cuLaunchKernel, kernel-ex: cuLaunchKernelEx, ptsz: cuLaunchKernel_ptsz "
                 "on the per-thread default stream, cooperative: cuLaunchCooperativeKernel (a "
                 "co-resident grid), graph: cuGraphLaunch of a one-kernel graph")
      ->capture_default_str()
      ->check(CLI::IsMember({"kernel", "kernel-ex", "ptsz", "cooperative", "graph"}));
  return parse_command_line(app, argc, argv);
}

std::optional<int> parse_compute_burn_runtime_command_line(int argc, char** argv,
                                                           ComputeBurnRuntimeOptions& options) {
  CLI::App app{
      "Runs a throughput-bound FMA kernel through the CUDA runtime for a while; prints kernels/s "
      "and kernel latency as one JSON line"};
  app.add_option("--device", options.device, "Device ordinal")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_burn_options(app, options.burn);
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
  return parse_command_line(app, argc, argv);
}

}  // namespace tessera::samples
