#include "fill_plan.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace tessera::samples {

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
