// What both memory-fill samples (driver API and runtime API) share: their fill options, the fill
// loop (chunks until a refusal, then halving chunks), the start and hold waits, and the report's
// keys. Only the calls that obtain and release memory differ between the two.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/report.h"

namespace tessera::samples {

inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;
// The finest chunk the fill retries with after the first refusal (the usual large-page size).
inline constexpr uint64_t kMinChunk = 2 * kMiB;

inline uint64_t round_down(uint64_t value, uint64_t multiple) {
  return value / multiple * multiple;
}

// --chunk, --max, --hold-seconds, --start-at, --fine/--no-fine (parsed in fill_cli.cc).
struct FillOptions {
  uint64_t chunk = 4 * kGiB;
  std::optional<uint64_t> max;
  double hold_seconds = 0;
  std::optional<double> start_at;  // seconds since the epoch
  bool fine = true;
};

// Sleeps until --start-at, once the context exists (its memory is taken), so tenants started
// together also fill together, rather than the first one taking the memory the others need for
// their contexts.
void wait_for_start(const FillOptions& options);
// Sleeps --hold-seconds with the memory held.
void hold_memory(const FillOptions& options);

// One chunk asked of the API: obtained (its bytes added to `obtained`), or refused for want of
// memory with the error's name. Any other error throws.
struct ChunkAnswer {
  bool obtained = false;
  std::string refusal;
};
using AllocateChunk = std::function<ChunkAnswer(uint64_t bytes, uint64_t& obtained)>;

struct FillResult {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  std::string stop_reason;  // "max_reached" or the refusal's error name
};

// Allocates `chunk`-sized pieces until a refusal. With --fine, each refusal is retried at half
// the size, down to `granularity`, so the total is exact to within that.
FillResult fill_chunks(const FillOptions& options, uint64_t chunk, std::optional<uint64_t> max,
                       uint64_t granularity, const AllocateChunk& allocate);

// The keys after the sample's own: chunk_bytes, max_bytes, fine, granularity_bytes, chunks,
// bytes_obtained, stop_reason, mem_get_info_free, mem_get_info_total, hold_seconds,
// mem_get_info_free_after_release.
struct FillFigures {
  uint64_t chunk = 0;
  std::optional<uint64_t> max;
  uint64_t granularity = 0;
  uint64_t free_after_fill = 0;
  uint64_t total = 0;
  uint64_t free_after_release = 0;
};
void add_fill_report(Json& report, const FillOptions& options, const FillResult& filled,
                     const FillFigures& figures);

}  // namespace tessera::samples
