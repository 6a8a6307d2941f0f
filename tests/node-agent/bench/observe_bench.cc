// What one pass of the agent's node readers costs on a simulated node: --shares share folders of
// --gpus GPUs, --processes processes with a slot each and a pod cgroup in a fake /proc, and the
// simulated NVML (simgpu's libnvidia-ml) for the sessions the readers open. One pass is what the
// agent does once per --check-interval: the out-of-band check, the context-cost measurement, one
// /metrics scrape, one local-API ListShares answer and the API loop's events diff, wired as
// node_agent.cc wires them (pass_readers below).
//
// Counted, not timed (the verdicts must not depend on the machine's speed): the NVML sessions the
// readers opened (each nvmlInit_v2 call: the harness hands NVML's entry points out through its own
// dlsym), the share-folder page reads of one steady pass (opens of a folder's usage and limits
// pages for reading: this binary's open/openat wrap libc's), and the walks of the fake /proc
// (opendir of its root). Timed: the check pass alone (CPU and wall), p50 and mean of the steady
// passes. The figures print as one JSON line; docs/node-agent.md keeps the before and after.
// Fails when a pass reads no folder (the counting seam is broken) or finds none of the lies.
//
// The simulated GPUs run none of the fake processes, so the per-process figures come from a fake
// (FakeGpus) while the readers' sessions are opened on the simulated NVML as on a node (the one
// observer's, since observe/: docs/node-agent.md "One observation per pass").
// Usage: agent_observe_bench [--shares 64] [--processes 512] [--gpus 8] [--passes 20]
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "api/node_snapshot.h"
#include "enforcement/checker.h"
#include "enforcement/fake_node.h"
#include "metrics/collector.h"
#include "observe/observation_board.h"
#include "observe/observer.h"
#include "tessera/node_events/snapshot_events.h"
#include "usage/context_overhead.h"

// ---- The counting seams
// --------------------------------------------------------------------------

namespace {

struct Counts {
  std::atomic<bool> on{false};
  std::atomic<uint64_t> nvml_inits{0};    // whole run
  std::atomic<uint64_t> usage_reads{0};   // while on
  std::atomic<uint64_t> limits_reads{0};  // while on
  std::atomic<uint64_t> proc_walks{0};    // while on
  std::string shares_dir, proc_root;      // set before `on`
};
Counts counts;

void count_open(const char* path, int flags) {
  if (!counts.on.load() || !path || (flags & O_ACCMODE) != O_RDONLY) return;
  const std::string_view text(path);
  if (!text.starts_with(counts.shares_dir)) return;
  if (text.ends_with("/usage")) ++counts.usage_reads;
  if (text.ends_with("/limits")) ++counts.limits_reads;
}

using NvmlInit = int (*)();
NvmlInit real_nvml_init = nullptr;
int counting_nvml_init() {
  ++counts.nvml_inits;
  return real_nvml_init();
}

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

// NVML is dlopened and its entry points looked up with dlsym (tessera/nvml.h): nvmlInit_v2 is
// handed out counted. glibc's own dlsym is found by version (it cannot be looked up with itself).
void* dlsym(void* handle, const char* name) noexcept {
  using Dlsym = void* (*)(void*, const char*);
  static const Dlsym real = [] {
    void* found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!found) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return reinterpret_cast<Dlsym>(found);
  }();
  void* symbol = real(handle, name);
  if (symbol && handle != RTLD_NEXT && std::string_view(name) == "nvmlInit_v2") {
    real_nvml_init = reinterpret_cast<NvmlInit>(symbol);
    return reinterpret_cast<void*>(&counting_nvml_init);
  }
  return symbol;
}

int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list args;
    va_start(args, flags);
    mode = static_cast<mode_t>(va_arg(args, int));
    va_end(args);
  }
  count_open(path, flags);
  static const auto real = next<int (*)(const char*, int, ...)>("open");
  return real(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list args;
    va_start(args, flags);
    mode = static_cast<mode_t>(va_arg(args, int));
    va_end(args);
  }
  count_open(path, flags);
  static const auto real = next<int (*)(const char*, int, ...)>("open64");
  return real(path, flags, mode);
}

int openat(int dir, const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list args;
    va_start(args, flags);
    mode = static_cast<mode_t>(va_arg(args, int));
    va_end(args);
  }
  count_open(path, flags);
  static const auto real = next<int (*)(int, const char*, int, ...)>("openat");
  return real(dir, path, flags, mode);
}

DIR* opendir(const char* path) {
  if (counts.on.load() && counts.proc_root == path) ++counts.proc_walks;
  static const auto real = next<DIR* (*)(const char*)>("opendir");
  return real(path);
}

}  // extern "C"

namespace {

using namespace tessera::agent;
namespace fs = std::filesystem;
namespace fake = tessera::agent::testing;
using Steady = std::chrono::steady_clock;

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

// The simulated node: share folders, fake /proc, the per-process figures, the checkpoint.
struct SimulatedNode {
  fs::path base;
  std::string shares_dir;
  std::unique_ptr<fake::FakeProc> proc;
  fake::FakeGpus figures;
  Checkpoint checkpoint;
  std::vector<NodeDevice> devices;
};

constexpr uint64_t kGiB = 1ull << 30;

SimulatedNode build_node(int shares_count, int processes, int gpus) {
  SimulatedNode node;
  node.base = fake::fresh_folder("observe-bench");
  node.shares_dir = (node.base / "shares").string();
  node.proc = std::make_unique<fake::FakeProc>(node.base / "proc");
  for (int g = 0; g < gpus; ++g) {
    char uuid[48];
    std::snprintf(uuid, sizeof uuid, "GPU-%08d-0000-0000-0000-000000000000", g);
    node.devices.push_back({"gpu-" + std::to_string(g), uuid, static_cast<unsigned>(g), 80 * kGiB});
  }
  std::vector<std::pair<std::string, PodRef>> folders;  // folder path, pod
  for (int s = 0; s < shares_count; ++s) {
    char pod_uid[40], claim_uid[40];
    std::snprintf(pod_uid, sizeof pod_uid, "%08x-0000-4000-8000-%012d", s, s);
    std::snprintf(claim_uid, sizeof claim_uid, "%08x-1111-4000-8000-%012d", s, s);
    ShareSpec spec;
    spec.claim_uid = claim_uid;
    spec.pool = "node-a";
    spec.device = node.devices[static_cast<size_t>(s % gpus)].name;
    spec.uuid = node.devices[static_cast<size_t>(s % gpus)].uuid;
    spec.memory_bytes = 8 * kGiB;
    spec.cores = 30;
    ClaimEntry entry;
    entry.namespace_name = "tenants";
    entry.name = "claim-" + std::to_string(s);
    entry.state = ClaimState::kPrepareCompleted;
    entry.pods = {{"pod-" + std::to_string(s), pod_uid}};
    entry.shares = {spec};
    node.checkpoint[claim_uid] = entry;
    const std::string folder = node.shares_dir + "/" + spec.folder_name();
    fake::make_share_folder(folder, spec.uuid, 8 * kGiB);
    folders.emplace_back(folder, entry.pods[0]);
  }
  for (int p = 0; p < processes; ++p) {
    const int pid = 10000 + p;
    const auto& [folder, pod] = folders[static_cast<size_t>(p % shares_count)];
    const std::string& uuid = node.devices[static_cast<size_t>((p % shares_count) % gpus)].uuid;
    node.proc->add(pid, 5000 + p, fake::pod_cgroup_file(pod.uid));
    const uint64_t bytes = 512ull << 20;
    fake::write_slot(folder, static_cast<uint32_t>(p / shares_count),
                     fake::FakeProc::owner(pid, 5000 + p), bytes);
    // Every 64th process holds 1 GiB more than its slot says (a lie to find).
    node.figures.processes[uuid].push_back({pid, bytes + (p % 64 == 0 ? kGiB : 0)});
    node.figures.utilization[uuid].push_back({pid, 3});
  }
  for (int p = 0; p < 64; ++p) node.proc->add(50000 + p, 100 + p);  // outside every pod
  return node;
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(p * static_cast<double>(values.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("NVML sessions, share-folder reads and /proc walks of one pass of the agent");
  int shares_count = 64, processes = 512, gpus = 8, passes = 20;
  std::string nvml_library = std::string(SIMGPU_LIB_DIR) + "/libnvidia-ml.so.1";
  app.add_option("--shares", shares_count);
  app.add_option("--processes", processes);
  app.add_option("--gpus", gpus);
  app.add_option("--passes", passes);
  app.add_option("--nvml", nvml_library, "the NVML the readers open (simgpu's)");
  CLI11_PARSE(app, argc, argv);
  if (shares_count <= 0 || processes < shares_count || gpus <= 0 || passes <= 0) {
    std::fprintf(stderr, "--shares, --gpus and --passes must be positive, --processes >= shares\n");
    return 2;
  }

  SimulatedNode node = build_node(shares_count, processes, gpus);
  fake::fresh_folder("observe-bench-sim");
  const std::string sim_state =
      (fs::temp_directory_path() / ("observe-bench-sim-" + std::to_string(getpid())) / "state")
          .string();
  setenv("SIMGPU_STATE", sim_state.c_str(), 1);
  counts.shares_dir = node.shares_dir;
  counts.proc_root = node.proc->root().string();

  // ---- pass_readers: the readers as node_agent.cc wires them ------------------------------------
  // The observer's NVML session (NodeAgent::start_observation's nvml_process_source), opened as on
  // a node; its figures are the fake's (see the header).
  tessera::Result<std::unique_ptr<GpuProcessSource>> observer_session =
      nvml_process_source(nvml_library);
  if (!observer_session.is_ok()) {
    std::fprintf(stderr, "the simulated NVML does not open: %s\n",
                 observer_session.status().message().c_str());
    return 1;
  }
  std::int64_t unix_ms = 1'700'000'000'000;
  ObserverOptions observing;
  observing.shares_dir = node.shares_dir;
  observing.proc_root = counts.proc_root;
  observing.checkpoint = [&node] { return node.checkpoint; };
  observing.devices = [&node] { return node.devices; };
  observing.unix_ms = [&unix_ms] { return unix_ms; };
  Observer observer(observing, &node.figures);
  // A pass a minute old is still the last one here (the agent: two check intervals).
  ObservationBoard board(observer, tessera::agent::real_clock(), std::chrono::minutes(1));
  ContextOverheadMeter context_costs(ContextOverheadOptions{});
  CountingHandler handler;
  CheckerOptions checking;
  checking.proc_root = counts.proc_root;
  checking.repair = false;  // the same lies every pass: each pass does the same work
  // NodeAgent::after_pass: the context cost of the pass's observation, then the board.
  checking.judged = [&](std::shared_ptr<const NodeObservation> observation,
                        std::shared_ptr<const Judgment> judgment) {
    (void)context_costs.measure(context_cost_inputs(*observation));
    board.publish(std::move(observation), std::move(judgment));
  };
  OutOfBandChecker checker(
      checking, [&observer] { return observer.observe(); }, handler);
  MetricsSources metrics;
  metrics.node_name = "node-a";
  metrics.observed = [&board] { return board.current(); };
  NodeSnapshotSources snapshot;
  snapshot.node_name = "node-a";
  tessera::node::v1::ListSharesResponse last_events_snapshot;
  size_t scrape_bytes = 0, listed = 0, events = 0;
  std::vector<double> cpu, wall;
  auto pass = [&](bool timed) {
    const double cpu_start = thread_cpu_ms();
    const Steady::time_point wall_start = Steady::now();
    checker.check_once();  // observes, judges, measures the context cost, publishes
    if (timed) {
      cpu.push_back(thread_cpu_ms() - cpu_start);
      wall.push_back(std::chrono::duration<double, std::milli>(Steady::now() - wall_start).count());
    }
    scrape_bytes = collect_metrics(metrics).size();
    listed = static_cast<size_t>(node_snapshot(board.current(), snapshot).shares_size());
    tessera::node::v1::ListSharesResponse now = node_snapshot(board.current(), snapshot);
    events = tessera::node_events::snapshot_events(last_events_snapshot, now).size();
    last_events_snapshot = std::move(now);
    unix_ms += 1000;
  };
  // ---- end of pass_readers --------------------------------------------------------------------

  pass(false);  // cold: every process read in full, sessions opened
  counts.on = true;
  pass(true);  // the counted steady pass
  counts.on = false;
  const uint64_t usage_reads = counts.usage_reads, limits_reads = counts.limits_reads,
                 walks = counts.proc_walks;
  for (int i = 1; i < passes; ++i) pass(true);

  const double folders = static_cast<double>(shares_count);
  const double mean_cpu =
      std::accumulate(cpu.begin(), cpu.end(), 0.0) / static_cast<double>(cpu.size());
  const double mean_wall =
      std::accumulate(wall.begin(), wall.end(), 0.0) / static_cast<double>(wall.size());
  std::printf(
      "{\"shares\": %d, \"processes\": %d, \"gpus\": %d, \"passes\": %d, \"nvml_sessions\": %llu, "
      "\"usage_page_reads_per_pass\": %llu, \"limits_page_reads_per_pass\": %llu, "
      "\"reads_per_share_folder_per_pass\": %.2f, \"proc_walks_per_pass\": %llu, "
      "\"check_pass_cpu_ms_p50\": %.3f, \"check_pass_cpu_ms_mean\": %.3f, "
      "\"check_pass_wall_ms_p50\": %.3f, \"check_pass_wall_ms_mean\": %.3f, \"findings\": %llu, "
      "\"scrape_bytes\": %zu, \"listed_shares\": %zu, \"events_last_pass\": %zu}\n",
      shares_count, processes, gpus, passes,
      static_cast<unsigned long long>(counts.nvml_inits.load()),
      static_cast<unsigned long long>(usage_reads), static_cast<unsigned long long>(limits_reads),
      static_cast<double>(usage_reads) / folders, static_cast<unsigned long long>(walks),
      percentile(cpu, 0.5), mean_cpu, percentile(wall, 0.5), mean_wall,
      static_cast<unsigned long long>(handler.count), scrape_bytes, listed, events);
  fs::remove_all(node.base);
  fs::remove_all(fs::path(sim_state).parent_path());
  if (usage_reads == 0) {
    std::fprintf(stderr, "no share-folder read was counted: the counting seam is broken\n");
    return 1;
  }
  if (handler.count == 0 || listed != static_cast<size_t>(shares_count)) {
    std::fprintf(stderr, "the pass found no lie (%llu findings) or listed %zu of %d shares\n",
                 static_cast<unsigned long long>(handler.count), listed, shares_count);
    return 1;
  }
  return 0;
}
