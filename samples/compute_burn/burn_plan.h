// What both compute-burn samples (driver API and runtime API) share: their options, how much work
// one kernel is and how it is laid out, the timed loop of launch batches, and the report's keys.
// Only the calls that launch and time a kernel differ between the two.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/report.h"

namespace tessera::samples {

// --seconds, --sync-every, --iters, --blocks-per-sm, --threads (parsed in burn_cli.cc).
struct BurnOptions {
  double seconds = 5;
  unsigned sync_every = 16;
  unsigned iterations = 4000;
  unsigned blocks_per_sm = 64;
  unsigned threads = 256;
};

// One kernel's grid: `blocks_per_sm` blocks of work per SM. A cooperative grid must be
// co-resident, so it launches one wave and each block does `rounds` blocks of that work.
struct BurnGrid {
  unsigned grid = 0;
  unsigned rounds = 1;
  uint64_t waves = 0;
  int resident_per_sm = 0;
};

// Throws when the kernel cannot be resident with these threads (resident_per_sm <= 0).
BurnGrid plan_burn_grid(const BurnOptions& options, int sm_count, int resident_per_sm,
                        bool cooperative);

// How a sample launches and times its kernel: `launch` queues one kernel, `mark_start` records
// the start event after the batch's other kernels, `mark_stop_and_wait` records the stop event
// and waits for it, `elapsed_ms` answers the time between the two. Each throws on a failed call.
struct BurnCalls {
  std::function<void()> launch;
  std::function<void()> mark_start;
  std::function<void()> mark_stop_and_wait;
  std::function<float()> elapsed_ms;
};

struct BurnTimings {
  std::vector<double> latencies_us;  // sorted, microseconds with 2 decimals
  uint64_t kernels = 0;
  double seconds = 0;
};

// One kernel first, outside the measurement (module loading, a real driver's JIT), then batches
// of `sync_every` launches for `seconds`: the last kernel of each batch is timed (it starts when
// the batch before it is done, so the events bracket that kernel alone, waits for other tenants
// included), and the batch is awaited before the next, keeping the queue short.
BurnTimings time_burn(const BurnOptions& options, const BurnCalls& calls);

// The keys after the sample's own: sms, blocks, threads_per_block, rounds_per_block,
// resident_blocks_per_sm, waves, iterations, sync_every, kernels, seconds, kernels_per_s and the
// latency figures (samples, min, p50, p99, max and the total of the timed kernels).
void add_burn_report(Json& report, const BurnOptions& options, int sm_count, const BurnGrid& grid,
                     const BurnTimings& timings);

}  // namespace tessera::samples
