// GpuTimeMeter on the simulated GPU: compute-burn processes under libvgpu in share folders (as the
// CDI environment puts them: LD_PRELOAD + TESSERA_SHARE_DIR), measured by the agent from host NVML
// and attributed by owner word; the shim's compute quota enforced from the agent's figures alone.
#include "usage/gpu_time_meter.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clock/clock.h"
#include "limits_page_edit.h"
#include "tessera/gpu_info.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/share_region.h"

// Without the samples (TESSERA_BUILD_SAMPLES off) the tests that run compute-burn are skipped.
#ifndef COMPUTE_BURN
#define COMPUTE_BURN ""
#define LIBVGPU_SO ""
#define SIMGPU_LIB_DIR ""
#endif
#define REQUIRE_SAMPLES()                                                           \
  do {                                                                              \
    if (std::string(COMPUTE_BURN).empty()) GTEST_SKIP() << "built without samples"; \
  } while (0)

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr uint64_t kKernelUs = 50;  // SIMGPU_KERNEL_US for burn_fma: one wave at --blocks-per-sm 8
constexpr const char* kDevices = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";

// One simulated machine per test process (ctest runs each test in its own process).
const std::string& simgpu_state() {
  static const std::string state = [] {
    const std::string path =
        (fs::temp_directory_path() / ("gpu-time-meter-" + std::to_string(getpid()) + ".state"))
            .string();
    fs::remove(path);  // a file an earlier process of this pid left (another layout)
    setenv("SIMGPU_STATE", path.c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
    return path;
  }();
  return state;
}

std::string gpu_uuid() {
  simgpu_state();
  const Result<std::vector<GpuInfo>> gpus = list_gpus();
  if (!gpus.is_ok() || gpus->empty()) return "";
  return gpus->front().uuid;
}

class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / (name + "-" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_ / "shares");
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  std::string shares() const { return (path_ / "shares").string(); }

 private:
  fs::path path_;
};

void create_usage_page(const std::string& dir) {
  const std::string path = dir + "/usage";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(ftruncate(fd, sizeof(share::UsagePage)), 0);
  void* memory = mmap(nullptr, sizeof(share::UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(memory, MAP_FAILED);
  share::init_usage_page(*static_cast<share::UsagePage*>(memory));
  munmap(memory, sizeof(share::UsagePage));
  close(fd);
}

// A share folder as the agent prepares it: limits (cores, measure source) and an initialised usage
// page.
std::string make_share(const TempDir& base, const std::string& name, const std::string& uuid,
                       uint32_t cores, uint32_t source, uint32_t priority = share::kPriorityNormal,
                       uint32_t cores_limit = 0) {
  const std::string dir = base.shares() + "/" + name;
  share_folder::DeviceLimit device;
  device.uuid = uuid;
  device.cores_request = cores;
  device.cores_limit = cores_limit;
  EXPECT_EQ(share_folder::write_limits(dir, {device}, {priority, source}).message(), "");
  create_usage_page(dir);
  return dir;
}

struct Measured {
  uint64_t at = 0, share = 0, others = 0;
};

// The limits page's yield_mask as the shim reads it.
uint64_t yield_mask(const std::string& dir) {
  share::LimitsPage page;
  std::memset(static_cast<void*>(&page), 0, sizeof page);
  const int fd = open((dir + "/limits").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ~0ull;
  const ssize_t n = pread(fd, &page, sizeof page, 0);
  close(fd);
  return n == static_cast<ssize_t>(sizeof page) ? page.yield_mask.load() : ~0ull;
}

// The limits page's spare_percent for device 0, as the shim reads it.
uint32_t spare_percent(const std::string& dir) {
  share::LimitsPage page;
  std::memset(static_cast<void*>(&page), 0, sizeof page);
  const int fd = open((dir + "/limits").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 12345;
  const ssize_t n = pread(fd, &page, sizeof page, 0);
  close(fd);
  return n == static_cast<ssize_t>(sizeof page) ? page.requests[0].spare_percent.load() : 12345;
}

Measured measured(const std::string& dir, uint32_t device = 0) {
  share::LimitsPage page;
  std::memset(static_cast<void*>(&page), 0, sizeof page);
  const int fd = open((dir + "/limits").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t n = pread(fd, &page, sizeof page, 0);
  close(fd);
  if (n != static_cast<ssize_t>(sizeof page)) return {};
  const auto& m = page.measured[device];
  return {m.sampled_at_ns.load(), m.share_busy_ns.load(), m.others_busy_ns.load()};
}

// The time process `pid` of a share was held at its compute gate: its slot's throttled_ns, which
// stays after it exits (until another process takes the slot and starts it from 0).
uint64_t held_ns(const std::string& dir, pid_t pid) {
  const share_folder::UsagePageCopy usage = share_folder::read_usage_page(dir + "/usage");
  uint64_t held = 0;
  for (const share_folder::SlotCopy* slot : usage.counted_slots())
    if (slot->pid == static_cast<uint32_t>(pid)) held += slot->throttled_ns;
  return held;
}

// The wall time the share's gate on device 0 was closed by its meter's decisions (closed_ns).
uint64_t gate_closed_ns(const std::string& dir) {
  return share_folder::read_usage_page(dir + "/usage").compute[0].closed_ns;
}

// How compute-burn loads the GPU: its kernels' time and the launches between synchronisations.
struct BurnShape {
  uint64_t kernel_us = kKernelUs;
  unsigned sync_every = 64;
};

// One 5 ms kernel in flight at a time. compute-burn records its start event before each launch
// and waits for the stop event after it, so the report's latency_us_total is the time the tenant
// wanted the GPU: held at the compute gate (held_ns), its kernel waiting for another tenant's, or
// running. The rest of its wall time is its own CPU time (launching, or waiting for a CPU on a
// loaded machine), which the quota verdicts below leave out: they do not depend on how fast the
// machine lets the tenant launch. Kernels long enough that launching them is a small part.
constexpr BurnShape kOneInFlight{5000, 1};

// compute-burn in a share (nullptr: unconfined, no shim), stdout to a file.
class Burn {
 public:
  Burn(const TempDir& base, const char* share_dir, double seconds, BurnShape shape = {}) {
    static int counter = 0;
    out_ = base.str() + "/burn-" + std::to_string(++counter) + ".json";
    std::vector<std::string> env = {
        std::string("LD_LIBRARY_PATH=") + SIMGPU_LIB_DIR,
        "SIMGPU_STATE=" + simgpu_state(),
        std::string("SIMGPU_DEVICES=") + kDevices,
        "SIMGPU_KERNEL_US=burn_fma=" + std::to_string(shape.kernel_us),
        "TESSERA_DEVICE_DIR=" + base.str(),
        "ASAN_OPTIONS=verify_asan_link_order=0",
        "PATH=/usr/bin:/bin",
    };
    if (share_dir) {
      env.push_back(std::string("LD_PRELOAD=") + LIBVGPU_SO);
      env.push_back(std::string("TESSERA_SHARE_DIR=") + share_dir);
    }
    const std::vector<std::string> args = {
        COMPUTE_BURN, "--seconds",    std::to_string(seconds),          "--blocks-per-sm",
        "8",          "--sync-every", std::to_string(shape.sync_every), "--launch",
        "kernel"};
    // Built before fork: the child of a multi-threaded process (the meter's thread) must not
    // allocate.
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 1);
      execve(COMPUTE_BURN, argv.data(), envp.data());
      _exit(127);
    }
  }
  ~Burn() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool running() {
    if (done_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      done_ = true;
      status_ = status;
    }
    return !done_;
  }
  // The report; an empty object when the burn failed.
  nlohmann::json finish() {
    while (running()) std::this_thread::sleep_for(milliseconds(5));
    std::ifstream file(out_);
    std::string line;
    std::getline(file, line);
    if (!WIFEXITED(status_) || WEXITSTATUS(status_) != 0) return nlohmann::json::object();
    auto report = nlohmann::json::parse(line, nullptr, false);
    return report.is_object() ? report : nlohmann::json::object();
  }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = 0;
  std::string out_;
};

double gpu_seconds(const nlohmann::json& report, uint64_t kernel_us = kKernelUs) {
  return report.value("kernels", 0.0) * static_cast<double>(kernel_us) * 1e-6;
}

// What a kOneInFlight tenant got and wanted: GPU time (kernels x kernel time, the simulator's
// exact figure), the time it wanted the GPU (held, waiting or running), of which held at its gate,
// and its wall time, in seconds.
struct QuotaRun {
  double gpu = 0, wanted = 0, held = 0, wall = 0;
  // What a rate of `percent` owes it: that part of the time it wanted the GPU.
  double owed(double percent) const { return percent / 100 * wanted; }
};

QuotaRun quota_run(const nlohmann::json& report, uint64_t held) {
  QuotaRun run;
  run.gpu = gpu_seconds(report, kOneInFlight.kernel_us);
  run.wanted = report.value("latency_us_total", 0.0) * 1e-6;
  run.held = static_cast<double>(held) * 1e-9;
  run.wall = report.value("seconds", 0.0);
  return run;
}

// The quota verdicts for a share whose rate was `percent` throughout, within 4 points of its wall
// time (the bucket's error bound, docs/compute.md: (C + Q + P) / T with P the agent's period plus
// the shim's, 20 + 5 + 25 ms, 2.5 points over 2 s): it got no more than its rate of the wall time,
// and at least its rate of the time it wanted. A correct limiter meets both however slowly the
// machine runs the tenant: the bucket gives the share its rate of the wall time less what it
// leaves unused while its gate is open, and a tenant that could not ask is not owed.
constexpr double kPoints = 0.04;

void print_quota(const char* name, const QuotaRun& run) {
  std::printf(
      "FIGURE %s: GPU %.3f s, wanted %.3f s (held %.3f s), wall %.3f s: %.1f%% of the wall "
      "time, %.1f%% of the time it wanted\n",
      name, run.gpu, run.wanted, run.held, run.wall, 100 * run.gpu / run.wall,
      100 * run.gpu / run.wanted);
}

void expect_quota(const char* name, const QuotaRun& run, double percent) {
  print_quota(name, run);
  EXPECT_LE(run.gpu, percent / 100 * run.wall + kPoints * run.wall) << name << ": above its rate";
  EXPECT_GE(run.gpu, run.owed(percent) - kPoints * run.wall) << name << ": held below its rate";
}

// Calls sample_once() every `period` until every burn has exited, then `tail` more.
void sample_while(GpuTimeMeter& meter, std::vector<Burn*> burns,
                  milliseconds period = milliseconds(20), milliseconds tail = milliseconds(100)) {
  auto next = steady_clock::now();
  auto any_running = [&burns] {
    bool any = false;
    for (Burn* b : burns) any = b->running() || any;
    return any;
  };
  while (any_running()) {
    EXPECT_EQ(meter.sample_once().message(), "");
    next += period;
    std::this_thread::sleep_until(next);
  }
  const auto end = steady_clock::now() + tail;
  while (steady_clock::now() < end) {
    EXPECT_EQ(meter.sample_once().message(), "");
    std::this_thread::sleep_for(period);
  }
}

// ---- owner words -------------------------------------------------------------------------------

TEST(GpuTimeMeterOwners, OwnProcessAsTheShimPacksIt) {
  struct stat ns {};
  ASSERT_EQ(stat("/proc/self/ns/pid", &ns), 0);
  std::ifstream stat_file("/proc/self/stat");
  std::string stat_line;
  std::getline(stat_file, stat_line);
  std::istringstream fields(stat_line.substr(stat_line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i < 22; ++i) fields >> field;
  uint64_t start_time = 0;
  fields >> start_time;
  const uint64_t expected =
      share::make_owner(static_cast<uint32_t>(getpid()), ns.st_ino, start_time);
  EXPECT_EQ(process_owner("/proc", getpid()), expected);
  const auto owners = live_process_owners("/proc");
  const auto it = owners.find(expected);
  ASSERT_NE(it, owners.end());
  EXPECT_EQ(it->second, getpid());
  EXPECT_EQ(process_owner("/proc", 0), std::nullopt);
  EXPECT_EQ(process_owner("/nonexistent", getpid()), std::nullopt);
}

TEST(GpuTimeMeterOwners, ContainerProcessFromAFakeProc) {
  TempDir base("gpu-time-meter-proc");
  const fs::path proc = base.str() + "/proc";
  auto make = [&proc](int pid, const std::string& status, const std::string& stat) {
    fs::create_directories(proc / std::to_string(pid) / "ns");
    fs::create_symlink("pid:[4026532999]", proc / std::to_string(pid) / "ns" / "pid");
    std::ofstream(proc / std::to_string(pid) / "status") << status;
    std::ofstream(proc / std::to_string(pid) / "stat") << stat;
  };
  // Host pid 4242, pid 7 in its container; a command with ") (" in it; start time 987654.
  const std::string stat_tail = " S 1 7 7 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 ";
  make(4242, "Name:\tburn\nState:\tS (sleeping)\nNSpid:\t4242\t7\n", "4242 (a) (b c)" + stat_tail);
  make(4243, "Name:\tdead\nState:\tZ (zombie)\nNSpid:\t4243\t8\n", "4243 (dead)" + stat_tail);
  make(4244, "Name:\tnonspid\nState:\tR (running)\n", "4244 (x)" + stat_tail);
  make(4245, "Name:\tshort\nState:\tR (running)\nNSpid:\t4245\n", "4245 (x) S 1 2");
  EXPECT_EQ(process_owner(proc.string(), 4242), share::make_owner(7, 4026532999, 987654));
  EXPECT_EQ(process_owner(proc.string(), 4243), std::nullopt);  // zombie
  EXPECT_EQ(process_owner(proc.string(), 4244), std::nullopt);  // no NSpid
  EXPECT_EQ(process_owner(proc.string(), 4245), std::nullopt);  // truncated stat
  const auto owners = live_process_owners(proc.string());
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners.begin()->second, 4242);
}

// ---- write_limits: measure_source --------------------------------------------------------------

TEST(GpuTimeMeterLimits, WriteLimitsMeasureSource) {
  TempDir base("gpu-time-meter-limits");
  const std::string dir = base.shares() + "/s";
  share_folder::DeviceLimit device;
  device.uuid = "GPU-00000000-0000-0000-0000-000000000001";
  auto source = [&dir] {
    share::LimitsPage page;
    std::ifstream(dir + "/limits", std::ios::binary)
        .read(reinterpret_cast<char*>(&page), sizeof page);
    return page.measure_source.load();
  };
  ASSERT_EQ(share_folder::write_limits(dir, {device}).message(), "");
  EXPECT_EQ(source(), share::kMeasureNvml);
  ASSERT_EQ(share_folder::write_limits(dir, {device}, {share::kPriorityHigh, share::kMeasureAgent})
                .message(),
            "");
  EXPECT_EQ(source(), share::kMeasureAgent);
  // Without a source, an existing page keeps its own.
  device.cores_request = 40;
  ASSERT_EQ(share_folder::write_limits(dir, {device}, {share::kPriorityNormal}).message(), "");
  EXPECT_EQ(source(), share::kMeasureAgent);
  ASSERT_EQ(share_folder::write_limits(dir, {device}).message(), "");
  EXPECT_EQ(source(), share::kMeasureAgent);
  ASSERT_EQ(share_folder::write_limits(dir, {device}, {share::kPriorityNormal, share::kMeasureNvml})
                .message(),
            "");
  EXPECT_EQ(source(), share::kMeasureNvml);
  EXPECT_NE(share_folder::write_limits(dir, {device}, {share::kPriorityNormal, 7}).message(), "");
  EXPECT_EQ(source(), share::kMeasureNvml);
  // A new page written with the agent as source.
  fs::remove_all(dir);
  ASSERT_EQ(
      share_folder::write_limits(dir, {device}, {share::kPriorityNormal, share::kMeasureAgent})
          .message(),
      "");
  EXPECT_EQ(source(), share::kMeasureAgent);
}

// ---- lifecycle ---------------------------------------------------------------------------------

TEST(GpuTimeMeterLifecycle, BadNvmlIsAnErrorNotACrash) {
  TempDir base("gpu-time-meter-bad-nvml");
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  options.nvml_library = base.str() + "/libnvidia-ml-missing.so.1";
  GpuTimeMeter meter(options);
  const std::string error = meter.start().message();
  EXPECT_NE(error.find("libnvidia-ml-missing.so.1"), std::string::npos) << error;
  EXPECT_NE(meter.sample_once().message(), "");
  meter.stop();  // nothing started: returns
}

// The loop's passes on simulated time: a pass at start, one each period, stop at once.
TEST(GpuTimeMeterLifecycle, StopReturnsPromptly) {
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-stop");
  make_share(base, "a", uuid, 100, share::kMeasureAgent);
  SimulatedClock clock;
  for (const auto period : {milliseconds(20), milliseconds(60000)}) {
    GpuTimeMeterOptions options;
    options.shares_dir = base.shares();
    options.period = period;
    GpuTimeMeter meter(options, clock);
    ASSERT_EQ(meter.start().message(), "");
    EXPECT_NE(meter.start().message(), "");      // already running
    ASSERT_TRUE(meter.wait_for_loop_passes(1));  // the pass at start
    clock.advance(period);
    ASSERT_TRUE(meter.wait_for_loop_passes(2));  // stopped between passes, as the agent is
    // Simulated time stands still: only stop()'s wake can end the loop's wait for the next pass.
    // Bounded (liveness: it takes milliseconds), so that a stop that does not wake it fails here.
    auto stopping = std::async(std::launch::async, [&meter] { meter.stop(); });
    const bool stopped = stopping.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    EXPECT_TRUE(stopped) << "stop() waited for the next pass; period " << period.count() << " ms";
    if (!stopped) clock.advance(period);  // the pass it waits for, so that the test ends
    stopping.get();
    EXPECT_GE(meter.stats().passes, 1u);
    meter.stop();  // idempotent
  }
  // Restartable after stop, and the destructor stops a running meter.
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options, clock);
  ASSERT_EQ(meter.start().message(), "");
  meter.stop();
  ASSERT_EQ(meter.start().message(), "");
}

// The period and the rescan interval are the clock's: 19 ms after a pass there is no other one (the
// deadline is not reached, whatever the machine's speed), and a share made after a rescan is found
// by the first pass at or after pid_refresh.
TEST(GpuTimeMeterLifecycle, PassesAndRescansFollowTheClock) {
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-clock");
  make_share(base, "a", uuid, 100, share::kMeasureAgent);
  SimulatedClock clock;
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  options.period = milliseconds(20);
  options.pid_refresh = milliseconds(500);
  GpuTimeMeter meter(options, clock);
  ASSERT_EQ(meter.start().message(), "");
  ASSERT_TRUE(meter.wait_for_loop_passes(1));
  EXPECT_EQ(meter.stats().shares, 1u);
  make_share(base, "b", uuid, 100, share::kMeasureAgent);
  clock.advance(milliseconds(19));
  EXPECT_EQ(meter.loop_passes(), 1u);
  clock.advance(milliseconds(1));
  ASSERT_TRUE(meter.wait_for_loop_passes(2));
  for (uint64_t pass = 3; pass <= 25; ++pass) {  // passes at 40 ms ... 480 ms: no rescan yet
    clock.advance(options.period);
    ASSERT_TRUE(meter.wait_for_loop_passes(pass));
  }
  EXPECT_EQ(meter.stats().shares, 1u);
  clock.advance(options.period);  // 500 ms: the rescan is due
  ASSERT_TRUE(meter.wait_for_loop_passes(26));
  EXPECT_EQ(meter.stats().shares, 2u);
  EXPECT_EQ(meter.stats().agent_shares, 2u);
  meter.stop();
  EXPECT_EQ(meter.stats().passes, 26u);
}

// Counters continue from what the page holds (an agent restart never sends them backwards), and a
// window in which nobody ran is still published (fresh sampled_at, unchanged sums).
TEST(GpuTimeMeterLifecycle, ContinuesThePagesCounters) {
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-continue");
  const std::string dir = make_share(base, "a", uuid, 100, share::kMeasureAgent);
  ASSERT_NO_FATAL_FAILURE(testing::edit_limits_page(dir, [](share::LimitsPage& page) {
    page.measured[0].share_busy_ns = 5'000'000'000;
    page.measured[0].others_busy_ns = 7'000'000'000;
    page.measured[0].sampled_at_ns = 1;
  }));
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(meter.sample_once().message(), "");
    std::this_thread::sleep_for(milliseconds(20));
  }
  const Measured after = measured(dir);
  EXPECT_GT(after.at, 1u);
  EXPECT_EQ(after.share, 5'000'000'000u);
  EXPECT_EQ(after.others, 7'000'000'000u);
  EXPECT_EQ(meter.stats().agent_shares, 1u);
  EXPECT_EQ(meter.stats().gpus, 1u);
}

// ---- attribution -------------------------------------------------------------------------------

// Two shares, one busy process each (cores 100: the shim never throttles), measured by the agent
// for their whole lives. The figures come from the same NVML samples, so the identities between
// the two shares are exact; each share's total is checked against compute-burn's own kernel count
// (kernels x kernel time, independent of NVML).
TEST(GpuTimeMeterAttribution, TwoSharesByOwnerWord) {
  REQUIRE_SAMPLES();
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-two");
  const std::string a = make_share(base, "a", uuid, 100, share::kMeasureAgent);
  const std::string b = make_share(base, "b", uuid, 100, share::kMeasureAgent);
  const std::string c = make_share(base, "c", uuid, 100, share::kMeasureNvml);  // left alone
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options);
  ASSERT_EQ(meter.sample_once().message(), "");  // primes the GPU's window before anything runs
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(meter.sample_once().message(), "");
  const Measured a0 = measured(a), b0 = measured(b);
  const auto began = steady_clock::now();
  Burn burn_a(base, a.c_str(), 2.0);
  Burn burn_b(base, b.c_str(), 2.0);
  sample_while(meter, {&burn_a, &burn_b});
  const double wall_s = std::chrono::duration<double>(steady_clock::now() - began).count();
  const auto report_a = burn_a.finish(), report_b = burn_b.finish();
  ASSERT_FALSE(report_a.empty());
  ASSERT_FALSE(report_b.empty());
  const Measured a1 = measured(a), b1 = measured(b);
  const double a_share = static_cast<double>(a1.share - a0.share) * 1e-9;
  const double b_share = static_cast<double>(b1.share - b0.share) * 1e-9;
  std::printf(
      "FIGURE share A: agent %.4f s, kernels x time %.4f s; share B: agent %.4f s, kernels x "
      "time %.4f s; wall %.2f s; stats: %llu windows, %llu re-reads\n",
      a_share, gpu_seconds(report_a), b_share, gpu_seconds(report_b), wall_s,
      static_cast<unsigned long long>(meter.stats().windows),
      static_cast<unsigned long long>(meter.stats().usage_rereads));
  // The same samples: A's time is B's "others" and the other way round, to the nanosecond.
  EXPECT_EQ(a1.share - a0.share, b1.others - b0.others);
  EXPECT_EQ(b1.share - b0.share, a1.others - a0.others);
  // Against the independent figure: NVML's whole percents of 20 ms windows round by up to
  // +/-100 us per window (unbiased); the first and last window of a process may be lost or cut
  // (<= 20 ms each). 5% of ~1 s is 50 ms.
  EXPECT_NEAR(a_share, gpu_seconds(report_a), 0.05 * gpu_seconds(report_a));
  EXPECT_NEAR(b_share, gpu_seconds(report_b), 0.05 * gpu_seconds(report_b));
  // Two saturating processes time-slice the GPU: each near half. Loose (35..65%) because on a
  // shared 2-core machine one burn can be starved of CPU and keep its queue shorter.
  const double a_fraction = a_share / (a_share + b_share);
  EXPECT_GT(a_fraction, 0.35);
  EXPECT_LT(a_fraction, 0.65);
  // The GPU was busy most of the time (the burns overlapped for ~2 s of the wall time).
  EXPECT_GT(a_share + b_share, 1.5);
  // The NVML-measured share is not touched.
  const Measured c1 = measured(c);
  EXPECT_EQ(c1.at, 0u);
  EXPECT_EQ(c1.share, 0u);
  EXPECT_EQ(c1.others, 0u);
}

// Garbage from tenants and half-made folders: no crash, the good share still measured.
TEST(GpuTimeMeterAttribution, GarbageUsagePagesAndFoldersWithoutLimits) {
  REQUIRE_SAMPLES();
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-garbage");
  const std::string good = make_share(base, "good", uuid, 100, share::kMeasureAgent);
  std::mt19937_64 random(42);
  auto random_bytes = [&random](const std::string& path, size_t size) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  // Random bytes as the usage page.
  const std::string noise = make_share(base, "noise", uuid, 100, share::kMeasureAgent);
  random_bytes(noise + "/usage", sizeof(share::UsagePage));
  // A valid header, a huge high-water mark and random slots (owner words that match nobody).
  const std::string slots = make_share(base, "slots", uuid, 100, share::kMeasureAgent);
  {
    random_bytes(slots + "/usage", sizeof(share::UsagePage));
    const int fd = open((slots + "/usage").c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const uint32_t header[5] = {share::kUsageMagic, share::kUsageVersion, sizeof(share::UsagePage),
                                share::kMaxSlots, 0xffffffffu};
    ASSERT_EQ(pwrite(fd, header, sizeof header, 0), static_cast<ssize_t>(sizeof header));
    close(fd);
  }
  // A truncated usage page, a FIFO and a symlink as usage pages (must not block or follow).
  const std::string truncated = make_share(base, "truncated", uuid, 100, share::kMeasureAgent);
  ASSERT_EQ(truncate((truncated + "/usage").c_str(), 100), 0);
  const std::string fifo = make_share(base, "fifo", uuid, 100, share::kMeasureAgent);
  fs::remove(fifo + "/usage");
  ASSERT_EQ(mkfifo((fifo + "/usage").c_str(), 0666), 0);
  const std::string link = make_share(base, "link", uuid, 100, share::kMeasureAgent);
  fs::remove(link + "/usage");
  fs::create_symlink(good + "/usage", link + "/usage");
  // No limits page; a limits page of random bytes; a short one; a plain file among the folders.
  fs::create_directories(base.shares() + "/no-limits");
  create_usage_page(base.shares() + "/no-limits");
  fs::create_directories(base.shares() + "/bad-limits");
  random_bytes(base.shares() + "/bad-limits/limits", sizeof(share::LimitsPage));
  fs::create_directories(base.shares() + "/short-limits");
  random_bytes(base.shares() + "/short-limits/limits", 10);
  random_bytes(base.shares() + "/stray-file", 100);

  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options);
  meter.sample_once().ignore();  // primes; reports the bad limits page (a problem, not a failure)
  std::this_thread::sleep_for(milliseconds(20));
  const std::string problems = meter.sample_once().message();
  EXPECT_NE(problems.find("bad-limits"), std::string::npos) << problems;
  Burn burn(base, good.c_str(), 1.0);
  auto next = steady_clock::now();
  while (burn.running()) {
    meter.sample_once().ignore();
    next += milliseconds(20);
    std::this_thread::sleep_until(next);
  }
  for (int i = 0; i < 5; ++i) {
    meter.sample_once().ignore();
    std::this_thread::sleep_for(milliseconds(20));
  }
  const auto report = burn.finish();
  ASSERT_FALSE(report.empty());
  const Measured g = measured(good);
  std::printf("FIGURE good share: agent %.4f s, kernels x time %.4f s\n",
              static_cast<double>(g.share) * 1e-9, gpu_seconds(report));
  EXPECT_NEAR(static_cast<double>(g.share) * 1e-9, gpu_seconds(report), 0.05 * gpu_seconds(report));
  // The garbage shares were published too, with the good share's process as "others".
  for (const std::string& dir : {noise, slots, truncated, fifo, link}) {
    const Measured m = measured(dir);
    EXPECT_EQ(m.share, 0u) << dir;
    EXPECT_EQ(m.others, g.share) << dir;
  }
  EXPECT_EQ(meter.stats().agent_shares, 6u);
}

// ---- the quota, end to end ---------------------------------------------------------------------

// cores 30 with measure_source = agent, the meter running on its thread: the share gets 30 % of
// the wall time and no less of the time it wanted (expect_quota); without the meter the shim has
// no measurement and never holds the share (so this test can fail).
TEST(GpuTimeMeterQuota, CoresThirtyHoldsWithTheAgentsMeasurements) {
  REQUIRE_SAMPLES();
#ifdef GPU_TIME_METER_SANITIZED
  GTEST_SKIP() << "timing test: not in a sanitizer build (as libvgpu.compute.*)";
#endif
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-quota");
  constexpr double kSeconds = 2.0;
  const std::string limited = make_share(base, "limited", uuid, 30, share::kMeasureAgent);
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options);
  ASSERT_EQ(meter.start().message(), "");
  Burn burn(base, limited.c_str(), kSeconds, kOneInFlight);
  const auto report = burn.finish();
  meter.stop();
  ASSERT_FALSE(report.empty());
  const Measured m = measured(limited);
  const QuotaRun run = quota_run(report, held_ns(limited, burn.pid()));
  std::printf("FIGURE cores 30 with the agent's meter: agent measured %.3f s of GPU time\n",
              static_cast<double>(m.share) * 1e-9);
  expect_quota("cores 30 with the agent's meter", run, 30);

  // Control: the same share with nobody publishing its measurements is never held.
  const std::string unmetered = make_share(base, "unmetered", uuid, 30, share::kMeasureAgent);
  Burn control(base, unmetered.c_str(), kSeconds, kOneInFlight);
  const auto control_report = control.finish();
  ASSERT_FALSE(control_report.empty());
  const QuotaRun control_run = quota_run(control_report, held_ns(unmetered, control.pid()));
  print_quota("cores 30, measure_source agent, no meter", control_run);
  EXPECT_EQ(control_run.held, 0.0);
}

// ---- priority -----------------------------------------------------------------------------------

// The agent owns priority: while a high share is busy, the normal and low shares on its GPU get
// their yield bit (and the normal share makes the low one yield); the bits stay for the hold after
// the last busy window, by the injected clock, and then clear. The high share never yields, and an
// NVML-measured share's page is never written.
TEST(GpuTimeMeterPriority, HigherPriorityBusySetsTheOthersYieldBitForTheHold) {
  REQUIRE_SAMPLES();
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-yield");
  const std::string high =
      make_share(base, "high", uuid, 100, share::kMeasureAgent, share::kPriorityHigh);
  const std::string normal = make_share(base, "normal", uuid, 100, share::kMeasureAgent);
  const std::string low =
      make_share(base, "low", uuid, 100, share::kMeasureAgent, share::kPriorityLow);
  const std::string other =
      make_share(base, "other", uuid, 100, share::kMeasureNvml, share::kPriorityLow);
  SimulatedClock clock;
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  options.priority_hold = milliseconds(100);
  GpuTimeMeter meter(options, clock);
  ASSERT_EQ(meter.sample_once().message(), "");  // primes
  EXPECT_EQ(yield_mask(low), 0u);
  EXPECT_EQ(yield_mask(normal), 0u);

  // The agent's clock stands still while the high share runs: every busy window is then seen at
  // the same time, so the hold is timed from a known instant.
  bool high_seen_busy = false;
  {
    Burn burn(base, high.c_str(), 0.5);
    while (burn.running()) {
      std::this_thread::sleep_for(milliseconds(20));
      ASSERT_EQ(meter.sample_once().message(), "");
      if (measured(high).share > 0) {
        high_seen_busy = true;
        EXPECT_EQ(yield_mask(low), 1u);
        EXPECT_EQ(yield_mask(normal), 1u);
        EXPECT_EQ(yield_mask(high), 0u);
      }
    }
    ASSERT_FALSE(burn.finish().empty());
  }
  ASSERT_TRUE(high_seen_busy);
  for (int i = 0; i < 3; ++i) {  // the high share's last windows, after it exited
    std::this_thread::sleep_for(milliseconds(20));
    ASSERT_EQ(meter.sample_once().message(), "");
  }
  EXPECT_EQ(yield_mask(low), 1u);  // within the hold
  clock.advance(milliseconds(99));
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(yield_mask(low), 1u);
  EXPECT_EQ(yield_mask(normal), 1u);
  clock.advance(milliseconds(1));
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(yield_mask(low), 0u);
  EXPECT_EQ(yield_mask(normal), 0u);
  EXPECT_GE(meter.stats().yield_changes, 4u);
  EXPECT_EQ(yield_mask(other), 0u);
  EXPECT_EQ(measured(other).at, 0u);
}

// End to end in agent mode: a low share yields to a busy high one through the agent's yield_mask
// alone, and neither shim creates, opens or maps a priority board (TESSERA_DEVICE_DIR is `base`:
// no per-user board folder appears there). The high share (kOneInFlight) runs as if alone: its
// kernels hardly ever wait for the low share's, which keeps 3.2 ms of work queued and would hold
// the device for a time slice (2 ms) at a time if it did not yield. Judged by the high share's own
// kernels, not by how much either got in a time a loaded machine stretches.
TEST(GpuTimeMeterPriority, LowShareYieldsThroughTheLimitsPageWithoutABoard) {
  REQUIRE_SAMPLES();
#ifdef GPU_TIME_METER_SANITIZED
  GTEST_SKIP() << "timing test: not in a sanitizer build (as libvgpu.compute.*)";
#endif
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-priority");
  const std::string high =
      make_share(base, "high", uuid, 100, share::kMeasureAgent, share::kPriorityHigh);
  const std::string low =
      make_share(base, "low", uuid, 100, share::kMeasureAgent, share::kPriorityLow);
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options);
  ASSERT_EQ(meter.start().message(), "");
  Burn burn_low(base, low.c_str(), 2.5);
  Burn burn_high(base, high.c_str(), 2.0, kOneInFlight);
  const auto report_high = burn_high.finish();
  const auto report_low = burn_low.finish();
  meter.stop();
  ASSERT_FALSE(report_high.empty());
  ASSERT_FALSE(report_low.empty());
  const double high_gpu = gpu_seconds(report_high, kOneInFlight.kernel_us);
  const double high_waited = report_high.value("latency_us_total", 0.0) * 1e-6 - high_gpu;
  std::printf(
      "FIGURE agent-owned priority: high %.3f s of GPU time, its kernels waited %.3f s for "
      "others; low %.3f s of GPU time\n",
      high_gpu, high_waited, gpu_seconds(report_low));
  // Before the agent's first window of the high share reaches the low share's shim (an agent
  // period and a shim period), and after a pause of the high share longer than the hold, the low
  // share runs and the high one waits; otherwise the low share's gate is closed.
  EXPECT_GT(high_gpu, 0.0);
  EXPECT_LE(high_waited, 0.1 * high_gpu + 0.1);
  for (const auto& entry : fs::directory_iterator(base.str())) {
    const std::string name = entry.path().filename().string();
    EXPECT_NE(name.rfind("tessera-", 0), 0u) << "a priority board appeared: " << entry.path();
  }
}

// ---- classes ------------------------------------------------------------------------------------

// The rule (the same as the shim's compute::spare_part, tests/libvgpu/compute_controller_test.cc).
TEST(GpuTimeMeterClasses, SparePartSplitsWhatTheRequestsLeave) {
  const CoresClaim best_effort{0, 100}, guaranteed60{60, 60}, burstable{30, 60};
  EXPECT_EQ(spare_part(best_effort, {}), 100u);
  EXPECT_EQ(spare_part(burstable, {}), 30u);
  EXPECT_EQ(spare_part(guaranteed60, {}), 0u);
  EXPECT_EQ(spare_part(best_effort, {guaranteed60}), 40u);
  EXPECT_EQ(spare_part(guaranteed60, {best_effort}), 0u);
  EXPECT_EQ(spare_part(best_effort, {burstable}), 40u);
  EXPECT_EQ(spare_part(burstable, {best_effort}), 30u);
  EXPECT_EQ(spare_part(best_effort, {guaranteed60, best_effort}), 20u);
  EXPECT_EQ(spare_part(best_effort, {{70, 70}, {40, 100}}), 0u);
  EXPECT_EQ(spare_part(burstable, {{70, 70}, {40, 100}}), 0u);
  EXPECT_EQ(spare_part({50, 10}, {}), 0u);
  EXPECT_EQ(spare_part({0, 250}, {}), 100u);
  EXPECT_EQ(spare_part(best_effort, {{5, 10}, {5, 25}}), 65u);
  EXPECT_EQ(spare_part({5, 25}, {{5, 10}, best_effort}), 20u);
  EXPECT_EQ(spare_part(best_effort, {best_effort, best_effort}), 33u);
}

// What the agent publishes: each share's part of the spare among the active shares of its
// priority, unknown until the first pass; a busy guaranteed 60 leaves 40 to the best-effort share
// and 10 to a burstable 30/60 (which is idle: the best-effort share does not count it), and all of
// it again exactly at the hold, by the injected clock. An NVML-measured share is never written.
TEST(GpuTimeMeterClasses, PublishesEachSharesPartOfTheSpare) {
  REQUIRE_SAMPLES();
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-spare");
  const std::string guaranteed =
      make_share(base, "guaranteed", uuid, 60, share::kMeasureAgent, share::kPriorityNormal, 60);
  const std::string best_effort =
      make_share(base, "best-effort", uuid, 0, share::kMeasureAgent, share::kPriorityNormal, 100);
  const std::string burstable =
      make_share(base, "burstable", uuid, 30, share::kMeasureAgent, share::kPriorityNormal, 60);
  const std::string low =
      make_share(base, "low", uuid, 0, share::kMeasureAgent, share::kPriorityLow, 100);
  const std::string other =
      make_share(base, "other", uuid, 0, share::kMeasureNvml, share::kPriorityNormal, 100);
  EXPECT_EQ(spare_percent(best_effort), share::kSpareUnknown);
  SimulatedClock clock;
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  options.priority_hold = milliseconds(100);
  GpuTimeMeter meter(options, clock);
  ASSERT_EQ(meter.sample_once().message(), "");  // primes; nobody active yet
  EXPECT_EQ(spare_percent(best_effort), 100u);
  EXPECT_EQ(spare_percent(burstable), 30u);
  EXPECT_EQ(spare_percent(guaranteed), 0u);
  EXPECT_EQ(spare_percent(low), 100u);

  bool seen_busy = false;
  {
    Burn burn(base, guaranteed.c_str(), 0.5);
    while (burn.running()) {
      std::this_thread::sleep_for(milliseconds(20));
      ASSERT_EQ(meter.sample_once().message(), "");
      if (measured(guaranteed).share > 0) {
        seen_busy = true;
        EXPECT_EQ(spare_percent(best_effort), 40u);
        EXPECT_EQ(spare_percent(burstable), 10u);
        EXPECT_EQ(spare_percent(guaranteed), 0u);
        EXPECT_EQ(spare_percent(low), 100u);  // of another priority: it yields instead
        EXPECT_EQ(yield_mask(low), 1u);
      }
    }
    ASSERT_FALSE(burn.finish().empty());
  }
  ASSERT_TRUE(seen_busy);
  for (int i = 0; i < 3; ++i) {  // the last windows, after it exited
    std::this_thread::sleep_for(milliseconds(20));
    ASSERT_EQ(meter.sample_once().message(), "");
  }
  EXPECT_EQ(spare_percent(best_effort), 40u);  // within the hold
  clock.advance(milliseconds(99));
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(spare_percent(best_effort), 40u);
  clock.advance(milliseconds(1));
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(spare_percent(best_effort), 100u);
  EXPECT_EQ(spare_percent(burstable), 30u);
  EXPECT_GE(meter.stats().spare_changes, 6u);
  EXPECT_EQ(spare_percent(other), share::kSpareUnknown);
}

// End to end under the agent's meter (on its thread) and the shim's AgentSource/LimitsYield alone:
// a guaranteed 60 beside a best-effort share, both burning: 60 and the rest; the best-effort share
// alone: not held; request 30 limit 60 alone: 60. Judged by expect_quota (kOneInFlight tenants),
// so the verdicts hold however slowly the machine runs the tenants.
TEST(GpuTimeMeterClasses, ClassesHoldWithTheAgentsSpare) {
  REQUIRE_SAMPLES();
#ifdef GPU_TIME_METER_SANITIZED
  GTEST_SKIP() << "timing test: not in a sanitizer build (as libvgpu.compute.*)";
#endif
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  TempDir base("gpu-time-meter-classes");
  constexpr double kSeconds = 2.0;
  const std::string guaranteed =
      make_share(base, "guaranteed", uuid, 60, share::kMeasureAgent, share::kPriorityNormal, 60);
  const std::string best_effort =
      make_share(base, "best-effort", uuid, 0, share::kMeasureAgent, share::kPriorityNormal, 100);
  const std::string burstable =
      make_share(base, "burstable", uuid, 30, share::kMeasureAgent, share::kPriorityNormal, 60);
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options);
  ASSERT_EQ(meter.start().message(), "");
  // Each phase starts once the agent has published what the shares alone are owed (the spare of
  // the phase before has expired after the hold): what is judged is the phase's own rate.
  auto wait_for_spare = [](const std::string& dir, uint32_t percent) {
    const auto deadline = steady_clock::now() + std::chrono::seconds(10);
    while (spare_percent(dir) != percent && steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(5));
    return spare_percent(dir) == percent;
  };
  ASSERT_TRUE(wait_for_spare(best_effort, 100));
  ASSERT_TRUE(wait_for_spare(guaranteed, 0));
  QuotaRun g_run, be_run;
  {
    Burn burn_best_effort(base, best_effort.c_str(), kSeconds, kOneInFlight);
    Burn burn_guaranteed(base, guaranteed.c_str(), kSeconds, kOneInFlight);
    const auto g_report = burn_guaranteed.finish();
    const auto be_report = burn_best_effort.finish();
    ASSERT_FALSE(g_report.empty());
    ASSERT_FALSE(be_report.empty());
    g_run = quota_run(g_report, held_ns(guaranteed, burn_guaranteed.pid()));
    be_run = quota_run(be_report, held_ns(best_effort, burn_best_effort.pid()));
  }

  ASSERT_TRUE(wait_for_spare(best_effort, 100));
  const uint64_t alone_closed = gate_closed_ns(best_effort);
  Burn alone(base, best_effort.c_str(), kSeconds, kOneInFlight);
  const auto alone_report = alone.finish();
  ASSERT_FALSE(alone_report.empty());
  const QuotaRun alone_run = quota_run(alone_report, held_ns(best_effort, alone.pid()));
  const uint64_t alone_closed_ns = gate_closed_ns(best_effort) - alone_closed;

  ASSERT_TRUE(wait_for_spare(burstable, 30));
  Burn burst(base, burstable.c_str(), kSeconds, kOneInFlight);
  const auto burst_report = burst.finish();
  meter.stop();
  ASSERT_FALSE(burst_report.empty());
  const QuotaRun burst_run = quota_run(burst_report, held_ns(burstable, burst.pid()));

  // The guaranteed share gets its 60 of the wall time and no less of the time it wanted: a
  // best-effort share that took more than the rest would keep its kernels waiting.
  expect_quota("guaranteed 60 beside best-effort", g_run, 60);
  // The best-effort share: at least the rest (40) of the time it wanted. Its cap is 40 only while
  // the guaranteed share is active (the hold around its run), so it is judged from below.
  print_quota("best-effort beside guaranteed 60", be_run);
  EXPECT_GE(be_run.gpu, be_run.owed(40) - kPoints * be_run.wall);
  // Alone, all of it: once its meter has measured (a gate the phase before left closed stays so
  // until the new process's meter has primed on the agent's figures: the held time printed), its
  // gate never closes.
  print_quota("best-effort alone", alone_run);
  EXPECT_EQ(alone_closed_ns, 0u);
  // Request 30, limit 60, alone: the spare takes it to its limit.
  expect_quota("request 30 limit 60 alone", burst_run, 60);
}

}  // namespace
}  // namespace tessera::agent
