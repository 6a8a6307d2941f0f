#include "burn_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace tessera::samples {
namespace {

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

}  // namespace

BurnGrid plan_burn_grid(const BurnOptions& options, int sm_count, int resident_per_sm,
                        bool cooperative) {
  if (resident_per_sm <= 0) throw std::runtime_error("the kernel cannot run with these threads");
  const uint64_t resident = static_cast<uint64_t>(sm_count) * resident_per_sm;
  const uint64_t work_blocks = static_cast<uint64_t>(sm_count) * options.blocks_per_sm;
  BurnGrid plan;
  plan.resident_per_sm = resident_per_sm;
  plan.grid = static_cast<unsigned>(work_blocks);
  if (cooperative) {
    plan.grid = static_cast<unsigned>(resident);
    plan.rounds = static_cast<unsigned>(ceil_div(work_blocks, plan.grid));
  }
  plan.waves = ceil_div(static_cast<uint64_t>(plan.grid) * plan.rounds, resident);
  return plan;
}

BurnTimings time_burn(const BurnOptions& options, const BurnCalls& calls) {
  calls.launch();
  calls.mark_stop_and_wait();
  BurnTimings timings;
  const auto began = std::chrono::steady_clock::now();
  do {
    for (unsigned i = 1; i < options.sync_every; ++i) calls.launch();
    calls.mark_start();
    calls.launch();
    calls.mark_stop_and_wait();
    const float milliseconds = calls.elapsed_ms();
    timings.kernels += options.sync_every;
    timings.latencies_us.push_back(std::round(milliseconds * 1e5) / 100);
    timings.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  } while (timings.seconds < options.seconds);
  std::sort(timings.latencies_us.begin(), timings.latencies_us.end());
  return timings;
}

void add_burn_report(Json& report, const BurnOptions& options, int sm_count, const BurnGrid& grid,
                     const BurnTimings& timings) {
  const std::vector<double>& latencies = timings.latencies_us;
  report["sms"] = sm_count;
  report["blocks"] = grid.grid;
  report["threads_per_block"] = options.threads;
  report["rounds_per_block"] = grid.rounds;
  report["resident_blocks_per_sm"] = grid.resident_per_sm;
  report["waves"] = grid.waves;
  report["iterations"] = options.iterations;
  report["sync_every"] = options.sync_every;
  report["kernels"] = timings.kernels;
  report["seconds"] = timings.seconds;
  report["kernels_per_s"] = static_cast<double>(timings.kernels) / timings.seconds;
  report["latency_samples"] = latencies.size();
  report["latency_us_min"] = latencies.front();
  report["latency_us_p50"] = percentile(latencies, 50);
  report["latency_us_p99"] = percentile(latencies, 99);
  report["latency_us_max"] = latencies.back();
  // With --sync-every 1 every kernel is timed, from just before its launch to its end: the total
  // is the time the tenant wanted the GPU (its launch held by a quota's gate, its kernel waiting
  // for other tenants' or running), what a quota test counts as owed a share of.
  report["latency_us_total"] = std::accumulate(latencies.begin(), latencies.end(), 0.0);
}

}  // namespace tessera::samples
