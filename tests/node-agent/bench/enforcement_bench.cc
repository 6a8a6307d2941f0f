// CPU cost of the out-of-band checks: one check pass (enforcement/checker.h) over --shares shares
// of --gpus GPUs with --processes processes spread over them, every process with a slot in its
// share's usage page, a pod cgroup in a fake /proc and a figure in a fake NVML (so the pass does
// all the work a node's does except the NVML calls themselves: /proc reads, usage-page preads,
// the mapping, the findings). Prints the CPU time of the first (cold: every process read in full)
// and of the steady passes (p50, p99, mean), and what that costs at a 1 s check interval. A few
// processes lie, so each pass also finds, repairs and reports. Fails when the lies are not found
// or when a steady pass reads a process in full again (the cache that makes it cheap: work counted,
// not timed, so the verdict does not depend on the machine's speed); --max-mean-ms adds a bound on
// the mean steady pass, for manual runs.
// Usage: agent_enforcement_bench [--shares 64] [--processes 512] [--gpus 8] [--passes 100]
//                                [--max-mean-ms X]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <CLI/CLI.hpp>

#include "enforcement/checker.h"
#include "enforcement/fake_node.h"

namespace {

using namespace tessera::agent;
namespace fs = std::filesystem;

double thread_cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

class CountingHandler final : public FindingHandler {
 public:
  void handle(const Finding&) override { ++count; }
  uint64_t count = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("CPU time of one out-of-band check pass");
  int shares_count = 64, processes = 512, gpus = 8, passes = 100;
  double max_mean_ms = 0;
  app.add_option("--shares", shares_count);
  app.add_option("--processes", processes);
  app.add_option("--gpus", gpus);
  app.add_option("--passes", passes);
  app.add_option("--max-mean-ms", max_mean_ms,
                 "fail when a steady pass takes longer on average (manual runs: an absolute bound "
                 "depends on the machine)");
  CLI11_PARSE(app, argc, argv);

  const fs::path base = tessera::agent::testing::fresh_folder("enforcement-bench");
  tessera::agent::testing::FakeProc proc(base / "proc");
  tessera::agent::testing::FakeGpus nvml;
  std::vector<CheckedShare> shares;
  constexpr uint64_t kGiB = 1ull << 30;
  for (int s = 0; s < shares_count; ++s) {
    CheckedShare share;
    char pod[40];
    std::snprintf(pod, sizeof pod, "%08x-0000-4000-8000-%012d", s, s);
    share.name = "share-" + std::to_string(s);
    share.folder = (base / "shares" / share.name).string();
    char uuid[48];
    std::snprintf(uuid, sizeof uuid, "GPU-%08d-0000-0000-0000-000000000000", s % gpus);
    share.uuid = uuid;
    share.memory_limit = 8 * kGiB;
    share.cores = 30;
    share.cores_limit = 50;
    share.claim_namespace = "tenants";
    share.claim_name = "claim-" + std::to_string(s);
    share.claim_uid = "uid-" + std::to_string(s);
    share.pods = {{"pod-" + std::to_string(s), pod}};
    tessera::agent::testing::make_share_folder(share.folder, share.uuid, 8 * kGiB);
    shares.push_back(share);
  }
  for (int p = 0; p < processes; ++p) {
    const int pid = 10000 + p;
    const CheckedShare& share = shares[static_cast<size_t>(p % shares_count)];
    const uint32_t slot = static_cast<uint32_t>(p / shares_count);
    proc.add(pid, 5000 + p, tessera::agent::testing::pod_cgroup_file(share.pods[0].uid));
    const uint64_t bytes = 512ull << 20;
    tessera::agent::testing::write_slot(
        share.folder, slot, tessera::agent::testing::FakeProc::owner(pid, 5000 + p), bytes);
    // Every 64th process holds 1 GiB more than its slot says (a lie to find and repair).
    nvml.processes[share.uuid].push_back({pid, bytes + (p % 64 == 0 ? kGiB : 0)});
    nvml.utilization[share.uuid].push_back({pid, 3});
  }
  // Host processes outside every pod beside them (the agent, system daemons).
  for (int p = 0; p < 64; ++p) proc.add(50000 + p, 100 + p);

  CountingHandler handler;
  CheckerOptions options;
  options.proc_root = proc.root().string();
  OutOfBandChecker checker(
      options, [&shares] { return shares; }, nvml, handler);
  std::vector<double> times;
  double cold = 0;
  uint64_t cold_reads = 0;  // processes read in full by the first pass
  for (int i = 0; i <= passes; ++i) {
    if (i > 0 && i % 10 == 0)  // the liars lie again (a repaired slot agrees until then)
      for (int p = 0; p < processes; p += 64) {
        const CheckedShare& share = shares[static_cast<size_t>(p % shares_count)];
        tessera::agent::testing::write_slot(
            share.folder, static_cast<uint32_t>(p / shares_count),
            tessera::agent::testing::FakeProc::owner(10000 + p, 5000 + p), 512ull << 20);
      }
    const double start = thread_cpu_ms();
    checker.check_once();
    const double spent = thread_cpu_ms() - start;
    if (i == 0) {
      cold = spent;
      cold_reads = checker.stats().process_reads;
    } else {
      times.push_back(spent);
    }
  }
  std::sort(times.begin(), times.end());
  const double mean =
      std::accumulate(times.begin(), times.end(), 0.0) / static_cast<double>(times.size());
  const CheckerStats stats = checker.stats();
  std::printf(
      "{\"shares\": %d, \"processes\": %d, \"gpus\": %d, \"passes\": %d, \"cold_pass_cpu_ms\": "
      "%.3f, \"pass_cpu_ms_p50\": %.3f, \"pass_cpu_ms_p99\": %.3f, \"pass_cpu_ms_mean\": %.3f, "
      "\"cpu_percent_at_1s\": %.3f, \"findings\": %llu, \"figures_set\": %llu, "
      "\"process_reads\": %llu}\n",
      shares_count, processes, gpus, passes, cold, times[times.size() / 2],
      times[std::min(times.size() - 1, times.size() * 99 / 100)], mean, mean / 10.0,
      static_cast<unsigned long long>(handler.count),
      static_cast<unsigned long long>(stats.figures_set),
      static_cast<unsigned long long>(stats.process_reads));
  fs::remove_all(base);
  if (handler.count == 0 || stats.figures_set == 0) {
    std::fprintf(stderr, "the lying processes were not found\n");
    return 1;
  }
  // Nobody started or exited: the steady passes read each pid's start time only.
  if (cold_reads == 0 || stats.process_reads != cold_reads) {
    std::fprintf(stderr, "%llu processes read in full by the first pass, %llu after %d more\n",
                 static_cast<unsigned long long>(cold_reads),
                 static_cast<unsigned long long>(stats.process_reads), passes);
    return 1;
  }
  if (max_mean_ms > 0 && mean > max_mean_ms) {
    std::fprintf(stderr, "mean pass %.3f ms is over %.3f ms\n", mean, max_mean_ms);
    return 1;
  }
  return 0;
}
