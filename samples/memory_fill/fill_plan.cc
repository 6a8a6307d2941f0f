#include "fill_plan.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "options.h"

namespace tessera::samples {

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

void wait_for_start(const FillOptions& options) {
  if (!options.start_at) return;
  const std::chrono::system_clock::time_point start_time{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(*options.start_at))};
  std::this_thread::sleep_until(start_time);
}

void hold_memory(const FillOptions& options) {
  if (options.hold_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.hold_seconds));
  }
}

FillResult fill_chunks(const FillOptions& options, uint64_t chunk, std::optional<uint64_t> max,
                       uint64_t granularity, const AllocateChunk& allocate) {
  FillResult result;
  uint64_t size = chunk;
  while (true) {
    uint64_t request = size;
    if (max) {
      const uint64_t left = result.bytes < *max ? round_down(*max - result.bytes, granularity) : 0;
      if (left == 0) {
        result.stop_reason = "max_reached";
        break;
      }
      request = std::min(request, left);
    }
    const ChunkAnswer answer = allocate(request, result.bytes);
    if (answer.obtained) {
      ++result.chunks;
      continue;
    }
    result.stop_reason = answer.refusal;
    if (!options.fine || request <= granularity) break;
    size = std::max(granularity, round_down(request / 2, granularity));
  }
  return result;
}

void add_fill_report(Json& report, const FillOptions& options, const FillResult& filled,
                     const FillFigures& figures) {
  report["chunk_bytes"] = figures.chunk;
  report["max_bytes"] = figures.max ? Json(*figures.max) : Json(nullptr);
  report["fine"] = options.fine;
  report["granularity_bytes"] = figures.granularity;
  report["chunks"] = filled.chunks;
  report["bytes_obtained"] = filled.bytes;
  report["stop_reason"] = filled.stop_reason;
  report["mem_get_info_free"] = figures.free_after_fill;
  report["mem_get_info_total"] = figures.total;
  report["hold_seconds"] = options.hold_seconds;
  report["mem_get_info_free_after_release"] = figures.free_after_release;
}

}  // namespace tessera::samples
