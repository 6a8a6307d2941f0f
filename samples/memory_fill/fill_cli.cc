#include "fill_cli.h"

#include <vector>

#include "common/options.h"

namespace tessera::samples {
namespace {

// --chunk, --max (described by `max_help`), --hold-seconds, --start-at, --fine/--no-fine.
void add_fill_options(CLI::App& app, FillOptions& options, const std::string& max_help) {
  add_quantity_option(app, "--chunk", options.chunk, "First chunk size")->default_str("4Gi");
  add_quantity_option(app, "--max", options.max, max_help);
  app.add_option("--hold-seconds", options.hold_seconds, "Hold the memory this long before freeing")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--start-at", options.start_at,
                 "Create the context at once but start filling at this time (seconds since the "
                 "epoch), so several processes can fill together");
  app.add_flag("--fine,!--no-fine", options.fine,
               "After the first refusal retry with halving chunks down to 2 MiB (default on)");
}

}  // namespace

std::optional<int> parse_memory_fill_command_line(int argc, char** argv,
                                                  MemoryFillOptions& options) {
  CLI::App app{
      "Allocates device memory in chunks until the driver refuses, then frees it; prints one "
      "JSON line"};
  add_common_options(app, options.common);
  app.add_option("--api", options.api,
                 "alloc: cuMemAlloc_v2, pitch: cuMemAllocPitch_v2, managed: cuMemAllocManaged, "
                 "async: cuMemAllocAsync (default pool), pool: cuMemAllocFromPoolAsync, "
                 "vmm: cuMemCreate+cuMemMap, array: cuArray3DCreate_v2")
      ->capture_default_str()
      ->check(CLI::IsMember({"alloc", "pitch", "managed", "async", "pool", "vmm", "array"}));
  add_fill_options(app, options.fill,
                   "Stop after this much (managed: default the device's total memory)");
  return parse_command_line(app, argc, argv);
}

std::optional<int> parse_memory_fill_runtime_command_line(int argc, char** argv,
                                                          MemoryFillRuntimeOptions& options) {
  const std::vector<std::string> apis = {
      "cudaMalloc",      "cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaMallocManaged",
      "cudaMallocPitch", "cudaMalloc3D",    "cudaMalloc3DArray",       "cudaMallocHost"};
  CLI::App app{
      "Allocates memory in chunks through the CUDA runtime until it refuses, then frees it; "
      "prints one JSON line"};
  app.add_option("--device", options.device, "Device ordinal")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--api", options.api,
                 "The runtime call: cudaMalloc, cudaMallocAsync (default pool), "
                 "cudaMallocFromPoolAsync (a pool of cudaMemPoolCreate), cudaMallocManaged, "
                 "cudaMallocPitch, cudaMalloc3D, cudaMalloc3DArray, cudaMallocHost (pinned host "
                 "memory, which takes no device memory)")
      ->capture_default_str()
      ->check(CLI::IsMember(apis));
  add_fill_options(app, options.fill,
                   "Stop after this much (default for cudaMallocManaged: the device's total "
                   "memory; for cudaMallocHost: 1Gi)");
  return parse_command_line(app, argc, argv);
}

}  // namespace tessera::samples
