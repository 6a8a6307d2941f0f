// What the GPU-time meter's pass costs on a MIG instance with the equal split (docs/compute.md,
// "Under the agent"): --shares share folders on one instance of a simulated H100 in MIG mode, each
// with a usage page (--processes slots) and a pending file whose records hold full rings of short
// spans in the window (the worst case: a launch that syncs every time leaves a span per launch).
// The same shares without pending files (the meter on the slots alone, as before the split) are
// timed in the same run, so the figure is a ratio on this machine, not an absolute bound.
//
// Printed, not judged (the verdicts must not depend on the machine's speed). Fails when the split
// did not run: no split window counted, or a share without its split_mask bit.
// Usage: agent_mig_split_bench [--shares 16] [--processes 2] [--passes 200]
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "clock/clock.h"
#include "sim_mig.h"
#include "tessera/pending_spans.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_region.h"
#include "usage/gpu_time_meter.h"

namespace {

namespace fs = std::filesystem;
using namespace tessera;

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

double cpu_us() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e6 + static_cast<double>(now.tv_nsec) / 1e3;
}

// A share on `uuid` with `processes` claimed slots.
void make_share(const std::string& dir, const std::string& uuid, int processes) {
  share_folder::DeviceLimit device;
  device.uuid = uuid;
  device.cores_request = 30;
  device.cores_limit = 30;
  if (const Status written = share_folder::write_limits(dir, {device}, {0, share::kMeasureAgent});
      !written.is_ok()) {
    std::fprintf(stderr, "limits: %s\n", written.message().c_str());
    std::exit(1);
  }
  share::UsagePage* page = nullptr;
  if (share::open_or_create_usage_page(dir.c_str(), page) != 0) {
    std::fprintf(stderr, "cannot create the usage page of %s\n", dir.c_str());
    std::exit(1);
  }
  for (int p = 0; p < processes; ++p) {
    page->slots[p].owner = share::make_owner(1000 + p, 4026531836, 77);
    page->slots[p].generation = 1;
  }
  page->slot_high_water = static_cast<uint32_t>(processes);
  share::unmap_usage_page(page);
}

// Full rings of 100 us spans every 150 us for each process, ending at `end_ns`.
void write_pending(const std::string& dir, const std::string& uuid, int processes, int64_t end_ns) {
  UniqueFd fd;
  if (share::open_or_create_pending_file(dir.c_str(), uuid.c_str(), fd) != 0) {
    std::fprintf(stderr, "cannot create the pending file of %s\n", dir.c_str());
    std::exit(1);
  }
  auto page = std::make_unique<share::PendingPage>();
  if (pread(fd.get(), page.get(), sizeof *page, 0) != static_cast<ssize_t>(sizeof *page))
    std::exit(1);
  for (int p = 0; p < processes; ++p) {
    share::PendingRecord& record = page->records[p];
    record.process = share::make_owner(1000 + p, 4026531836, 77);
    record.kept_until_ns = static_cast<uint64_t>(end_ns) + share::kPendingHold;
    const uint64_t first = record.written;
    for (int k = 0; k < share::kPendingSpans; ++k) {
      const uint64_t number = first + static_cast<uint64_t>(k);
      const int64_t start = end_ns - (share::kPendingSpans - k) * 150'000 + p * 10'000;
      record.spans[number % share::kPendingSpans] = {start, 100'000,
                                                     static_cast<uint32_t>(number + 1)};
    }
    record.written = first + share::kPendingSpans;
  }
  if (pwrite(fd.get(), page.get(), sizeof *page, 0) != static_cast<ssize_t>(sizeof *page))
    std::exit(1);
}

struct Figure {
  double cpu_us_per_pass = 0;
  uint64_t split_windows = 0;
};

// `passes` passes of the meter over the shares; before each, fresh spans in its window when
// `spans` (so each pass splits a full window).
Figure run(const std::string& shares_dir, const std::vector<std::string>& dirs,
           const std::string& uuid, int processes, int passes, bool spans) {
  agent::GpuTimeMeterOptions options;
  options.shares_dir = shares_dir;
  options.pid_refresh = std::chrono::hours(1);  // one rescan, at the first pass
  agent::SimulatedClock clock;
  agent::GpuTimeMeter meter(options, clock);
  if (const Status first = meter.sample_once(); !first.is_ok()) {
    std::fprintf(stderr, "first pass: %s\n", first.message().c_str());
    std::exit(1);
  }
  double cpu = 0;
  for (int i = 0; i < passes; ++i) {
    if (spans)
      for (const std::string& dir : dirs)
        write_pending(dir, uuid, processes, monotonic_ns() - share::kPendingLag);
    usleep(1000);  // the window moves on
    const double before = cpu_us();
    if (const Status pass = meter.sample_once(); !pass.is_ok()) {
      std::fprintf(stderr, "pass: %s\n", pass.message().c_str());
      std::exit(1);
    }
    cpu += cpu_us() - before;
  }
  return {cpu / passes, meter.stats().split_windows};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"agent_mig_split_bench"};
  int shares = 16, processes = 2, passes = 200;
  app.add_option("--shares", shares)->check(CLI::Range(1, 64));
  app.add_option("--processes", processes)->check(CLI::Range(1, share::kPendingRecords));
  app.add_option("--passes", passes)->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);

  const fs::path base = fs::temp_directory_path() / ("mig-split-bench-" + std::to_string(getpid()));
  fs::remove_all(base);
  fs::create_directories(base / "shares");
  const std::string state = (base / "simgpu.state").string();
  setenv("SIMGPU_STATE", state.c_str(), 1);
  setenv("SIMGPU_DEVICES", "name=NVIDIA H100 80GB HBM3,memory=81559Mi,sms=132,cc=9.0,mig=on", 1);
  const std::string uuid = simgpu::testing::create_mig_instance(SIMGPU_CTL, "3g.40gb");
  if (uuid.rfind("MIG-", 0) != 0) {
    std::fprintf(stderr, "no MIG instance: %s\n", uuid.c_str());
    return 1;
  }
  std::vector<std::string> dirs;
  for (int s = 0; s < shares; ++s) {
    dirs.push_back((base / "shares" / ("share-" + std::to_string(s))).string());
    make_share(dirs.back(), uuid, processes);
  }
  const Figure slots = run((base / "shares").string(), dirs, uuid, processes, passes, false);
  const Figure split = run((base / "shares").string(), dirs, uuid, processes, passes, true);
  // Every share was split (its bit set) in the second run.
  int without_bit = 0;
  for (const std::string& dir : dirs) {
    share::LimitsPage page{};
    const int fd = open((dir + "/limits").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || pread(fd, &page, sizeof page, 0) != static_cast<ssize_t>(sizeof page))
      ++without_bit;
    else if ((page.split_mask.load() & 1u) == 0)
      ++without_bit;
    if (fd >= 0) close(fd);
  }
  std::printf(
      "{\"shares\": %d, \"processes_per_share\": %d, \"spans_per_process\": %d, \"passes\": %d, "
      "\"slots_only_cpu_us_per_pass\": %.1f, \"split_cpu_us_per_pass\": %.1f, \"ratio\": %.2f, "
      "\"split_cpu_percent_of_a_core_at_20ms\": %.2f, \"split_windows\": %llu}\n",
      shares, processes, share::kPendingSpans, passes, slots.cpu_us_per_pass, split.cpu_us_per_pass,
      split.cpu_us_per_pass / slots.cpu_us_per_pass, split.cpu_us_per_pass / 200.0,
      static_cast<unsigned long long>(split.split_windows));
  fs::remove_all(base);
  if (split.split_windows == 0 || slots.split_windows != 0 || without_bit != 0) {
    std::fprintf(stderr, "FAIL: the split did not run (%llu windows, %d shares without the bit)\n",
                 static_cast<unsigned long long>(split.split_windows), without_bit);
    return 1;
  }
  return 0;
}
