// The measured context cost (usage/context_overhead.h): the estimator on its own, including slots
// that lie, and end to end on the simulated GPU with SIMGPU_CONTEXT_OVERHEAD=520Mi (the shim's
// default is 500Mi): memory-fill processes under libvgpu in a 4 GiB share fill it to what the shim
// allows, and the share's total as NVML sees it stays within 4 GiB once the agent has published
// the measured cost (and exceeds it without).
#include "usage/context_overhead.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "limits_page_edit.h"
#include "observe/observer.h"
#include "tessera/gpu_info.h"
#include "tessera/nvml.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_region.h"
#include "usage/share_processes.h"

// Without the samples (TESSERA_BUILD_SAMPLES off) the end-to-end tests are skipped.
#ifndef MEMORY_FILL
#define MEMORY_FILL ""
#define LIBVGPU_SO ""
#define SIMGPU_LIB_DIR ""
#endif

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr uint64_t kMi = 1ull << 20;
constexpr uint64_t kGi = 1ull << 30;
constexpr const char* kDevices = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";

// ---- the estimator -------------------------------------------------------------------------

ContextSample sample(uint64_t nvml, uint64_t slot, uint32_t count, uint64_t charge,
                     uint32_t device = 0) {
  ContextSample s;
  s.nvml_used_bytes = nvml;
  s.slot_bytes = slot;
  s.contexts_word = share::pack_contexts(device, count, charge);
  s.device = device;
  return s;
}

TEST(ContextCost, NvmlFigureMinusTheAllocationsTheSlotImplies) {
  // One context charged 500Mi, 1 GiB allocated; NVML sees the context at 520Mi.
  EXPECT_EQ(context_cost_of(sample(520 * kMi + kGi, 500 * kMi + kGi, 1, 500 * kMi)), 520 * kMi);
  // Two contexts: the difference is shared between them.
  EXPECT_EQ(context_cost_of(sample(1040 * kMi + kGi, 1000 * kMi + kGi, 2, 500 * kMi)), 520 * kMi);
  // The shim already charges 520Mi: the same answer, whatever the charge in the slot.
  EXPECT_EQ(context_cost_of(sample(520 * kMi + kGi, 520 * kMi + kGi, 1, 520 * kMi)), 520 * kMi);
  // Rounded up to whole MiB (what the shim can be told).
  EXPECT_EQ(context_cost_of(sample(520 * kMi + 1, 500 * kMi, 1, 500 * kMi)), 521 * kMi);
  // Another device of the share.
  EXPECT_EQ(context_cost_of(sample(600 * kMi, 500 * kMi, 1, 500 * kMi, 3)), 600 * kMi);
}

TEST(ContextCost, ALyingSlotGivesNothingOrAClampedFigure) {
  // No contexts, or "cannot be measured": nothing.
  EXPECT_EQ(context_cost_of(sample(kGi, 0, 0, 500 * kMi)), std::nullopt);
  ContextSample unmeasurable = sample(kGi, 500 * kMi, 1, 500 * kMi);
  unmeasurable.contexts_word = share::kContextsUnmeasurable << 4;
  EXPECT_EQ(context_cost_of(unmeasurable), std::nullopt);
  // A word about another device than the sample's.
  ContextSample elsewhere = sample(kGi, 500 * kMi, 1, 500 * kMi, 2);
  elsewhere.device = 0;
  EXPECT_EQ(context_cost_of(elsewhere), std::nullopt);
  // Fewer bytes than its own context charge: does not add up.
  EXPECT_EQ(context_cost_of(sample(kGi, 100 * kMi, 1, 500 * kMi)), std::nullopt);
  // More allocations than NVML sees (a slot inflated to drive the figure down): nothing.
  EXPECT_EQ(context_cost_of(sample(kGi, 100 * kGi, 1, 500 * kMi)), std::nullopt);
  // Inflated just below NVML's figure: the floor.
  EXPECT_EQ(context_cost_of(sample(kGi + 10 * kMi, kGi + 500 * kMi, 1, 500 * kMi)),
            kMinContextCost);
  // A slot claiming nothing allocated while NVML sees 40 GiB: the ceiling.
  EXPECT_EQ(context_cost_of(sample(40 * kGi, 500 * kMi, 1, 500 * kMi)), kMaxContextCost);
  // A huge stated charge cannot wrap the arithmetic.
  ContextSample huge = sample(kGi, ~0ull, 1, 0);
  huge.contexts_word = 0xffffff00u | 14u << 4;
  EXPECT_EQ(context_cost_of(huge), std::nullopt);
}

TEST(ContextCostWindow, RisesAtOnceFallsOnlyWhenEveryRecentPassOfTheProcessAgrees) {
  const uint64_t cap = context_cost_cap(kDefaultMemoryMargin);
  ContextCostWindow window;
  EXPECT_EQ(window.published(cap), 0u);
  window.add_pass({}, {});
  EXPECT_EQ(window.published(cap), 0u) << "nothing measured: nothing published";
  window.add_pass({{1, 520 * kMi}, {2, 510 * kMi}}, {});
  EXPECT_EQ(window.published(cap), 520 * kMi) << "the largest of the share's processes";
  window.add_pass({{1, 700 * kMi}, {2, 510 * kMi}}, {});
  EXPECT_EQ(window.published(cap), 700 * kMi) << "a rise is published at once";
  for (size_t i = 0; i + 1 < kContextCostPasses; ++i) {
    window.add_pass({{1, 520 * kMi}}, {2});
    EXPECT_EQ(window.published(cap), 700 * kMi) << "a fall waits, pass " << i;
  }
  window.add_pass({{1, 520 * kMi}}, {2});
  EXPECT_EQ(window.published(cap), 520 * kMi) << "once every recent pass agrees";
  window.add_pass({}, {1, 2});
  EXPECT_EQ(window.published(cap), 520 * kMi) << "present but not measured: kept";
}

TEST(ContextCostWindow, NoFigureOutlivesItsProcessOrExceedsTheCap) {
  const uint64_t cap = context_cost_cap(kDefaultMemoryMargin);
  EXPECT_EQ(cap, 756 * kMi) << "the shim's default plus the checker's margin";
  EXPECT_EQ(context_cost_cap(0), kShimDefaultContextCharge);
  EXPECT_EQ(context_cost_cap(~0ull), kMaxContextCost);
  ContextCostWindow window;
  window.add_pass({{1, kMaxContextCost}, {2, 520 * kMi}}, {});
  EXPECT_EQ(window.published(cap), cap) << "clamped to what an honest context can show";
  window.forget(1);  // found lying
  EXPECT_EQ(window.published(cap), 520 * kMi) << "what it gave is gone at once";
  window.add_pass({{3, 530 * kMi}}, {});
  EXPECT_EQ(window.published(cap), 530 * kMi) << "process 2 left: its samples with it";
  window.add_pass({}, {});
  EXPECT_EQ(window.published(cap), 0u) << "no process left: the shim's default";
  EXPECT_TRUE(window.empty());
}

TEST(ContextCost, ASlotAgreesWithNvmlWithinTheMarginEitherWay) {
  EXPECT_TRUE(slot_agrees(kGi, kGi + 256 * kMi, 256 * kMi));
  EXPECT_TRUE(slot_agrees(kGi + 256 * kMi, kGi, 256 * kMi));
  EXPECT_FALSE(slot_agrees(kGi, kGi + 257 * kMi, 256 * kMi));
  EXPECT_FALSE(slot_agrees(0, 8 * kGi, 256 * kMi));
  EXPECT_FALSE(slot_agrees(~0ull, 0, 256 * kMi));
}

// ---- end to end on the simulated GPU --------------------------------------------------------

// One simulated machine per test process (ctest runs each test in its own process), with
// contexts that cost 520Mi, not the shim's default 500Mi.
const std::string& simgpu_state() {
  static const std::string state = [] {
    const std::string path =
        (fs::temp_directory_path() / ("context-overhead-" + std::to_string(getpid()) + ".state"))
            .string();
    fs::remove(path);  // a file an earlier process of this pid left (another layout)
    setenv("SIMGPU_STATE", path.c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
    setenv("SIMGPU_CONTEXT_OVERHEAD", "520Mi", 1);
    return path;
  }();
  return state;
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

// The meter as the agent drives it: one observation of the share folders under `shares`, all on
// GPU `uuid` (the Observer, with the agent's one NVML session and the host's /proc), then one
// measurement of it.
class ObservedMeter {
 public:
  ObservedMeter(const std::string& shares, const std::string& uuid) {
    Result<std::unique_ptr<GpuProcessSource>> nvml = nvml_process_source();
    EXPECT_EQ(nvml.status().message(), "");
    if (nvml.is_ok()) nvml_ = std::move(nvml).value();
    ObserverOptions observing;
    observing.shares = [shares, uuid] {
      std::vector<CheckedShare> found;
      for (const auto& entry : fs::directory_iterator(shares)) {
        CheckedShare share;
        share.name = entry.path().filename().string();
        share.folder = entry.path().string();
        share.uuid = uuid;
        found.push_back(share);
      }
      return found;
    };
    observer_ = std::make_unique<Observer>(observing, nvml_.get());
  }
  Problems measure() { return meter_.measure(context_cost_inputs(*observer_->observe())); }
  bool distrusts(uint64_t owner) const { return meter_.distrusts(owner); }
  uint64_t published(const std::string& dir, uint32_t device) const {
    return meter_.published(dir, device);
  }
  ContextOverheadStats stats() const { return meter_.stats(); }

 private:
  std::unique_ptr<GpuProcessSource> nvml_;
  std::unique_ptr<Observer> observer_;
  ContextOverheadMeter meter_{ContextOverheadOptions{}};
};

// NVML of the simulator, for the figures the test checks (the driver's view, not the shim's).
struct TestNvml {
  std::optional<nvml::Session> session;
  nvmlDevice_t device = nullptr;

  bool load(const std::string& uuid) {
    Result<nvml::Session> opened = nvml::Session::open();
    if (!opened.is_ok()) return false;
    session = std::move(opened).value();
    Result<nvmlDevice_t> found = session->device_by_uuid(uuid);
    if (!found.is_ok()) return false;
    device = *found;
    return true;
  }
  // What NVML sees the processes `pids` hold on the GPU.
  uint64_t used_by(const std::vector<pid_t>& pids) const {
    Result<std::vector<nvmlProcessInfo_t>> infos = session->compute_processes(device);
    if (!infos.is_ok()) return 0;
    uint64_t sum = 0;
    for (const nvmlProcessInfo_t& info : *infos) {
      for (pid_t pid : pids) {
        if (static_cast<pid_t>(info.pid) == pid) sum += info.usedGpuMemory;
      }
    }
    return sum;
  }
};

// memory-fill under the shim in a share: creates its context at once, fills from `start_at` (in
// 64 MiB chunks, then halving down to 2 MiB, until the shim refuses), holds, frees, reports.
class Fill {
 public:
  Fill(const TempDir& base, const std::string& share_dir, double start_at, double hold_seconds) {
    static int counter = 0;
    out_ = base.str() + "/fill-" + std::to_string(++counter) + ".json";
    std::vector<std::string> env = {
        std::string("LD_LIBRARY_PATH=") + SIMGPU_LIB_DIR, "SIMGPU_STATE=" + simgpu_state(),
        std::string("SIMGPU_DEVICES=") + kDevices,        "SIMGPU_CONTEXT_OVERHEAD=520Mi",
        std::string("LD_PRELOAD=") + LIBVGPU_SO,          "TESSERA_SHARE_DIR=" + share_dir,
        "ASAN_OPTIONS=verify_asan_link_order=0",          "PATH=/usr/bin:/bin",
    };
    char start[64];
    std::snprintf(start, sizeof start, "%.3f", start_at);
    const std::vector<std::string> args = {MEMORY_FILL,
                                           "--chunk",
                                           "64Mi",
                                           "--start-at",
                                           start,
                                           "--hold-seconds",
                                           std::to_string(hold_seconds)};
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 1);
      // The shim's lines (none when all is well) beside the report.
      const int err = open((out_ + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, 2);
      execve(MEMORY_FILL, argv.data(), envp.data());
      _exit(127);
    }
  }
  ~Fill() {
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

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The share's usage page: how many of its slots say they hold a context.
int slots_with_contexts(const std::string& dir) {
  share::UsagePage page;
  std::memset(static_cast<void*>(&page), 0, sizeof page);
  const int fd = open((dir + "/usage").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = pread(fd, &page, sizeof page, 0);
  close(fd);
  if (n != static_cast<ssize_t>(sizeof page)) return 0;
  int count = 0;
  for (uint32_t i = 0; i < share::kMaxSlots; ++i) {
    if (page.slots[i].owner.load() != 0 && share::contexts_count(page.slots[i].contexts.load()) > 0)
      ++count;
  }
  return count;
}

uint64_t published_in_page(const std::string& dir, uint32_t device = 0) {
  share::LimitsPage page;
  std::memset(static_cast<void*>(&page), 0, sizeof page);
  std::ifstream(dir + "/limits", std::ios::binary)
      .read(reinterpret_cast<char*>(&page), sizeof page);
  return page.measured[device].context_overhead.load();
}

struct FillOutcome {
  uint64_t nvml_peak = 0;       // the most NVML saw the share's processes hold at once
  uint64_t published = 0;       // the limits page's figure when the fill started
  uint64_t bytes_obtained = 0;  // what the fills got, together
  int refused = 0;              // fills that stopped at CUDA_ERROR_OUT_OF_MEMORY
};

// Three processes in a 4 GiB share create their contexts, then (after `measure` ran the agent's
// meter, or not) fill the share to what the shim allows and hold it.
FillOutcome fill_share(bool measure) {
  FillOutcome outcome;
  simgpu_state();
  const Result<std::vector<GpuInfo>> gpus = list_gpus();
  EXPECT_TRUE(gpus.is_ok() && !gpus->empty());
  if (!gpus.is_ok() || gpus->empty()) return outcome;
  const std::string uuid = gpus->front().uuid;
  TestNvml nvml;
  EXPECT_TRUE(nvml.load(uuid));
  TempDir base(measure ? "context-overhead-measured" : "context-overhead-default");
  const std::string dir = base.shares() + "/a";
  share_folder::DeviceLimit device;
  device.uuid = uuid;
  device.memory_limit = 4 * kGi;
  EXPECT_EQ(share_folder::write_limits(dir, {device}).message(), "");

  ObservedMeter meter(base.shares(), uuid);
  // The fills start together at a fixed time; before it, the three contexts must exist and the
  // agent's figure be published (about a second: its measurement runs once a second), with over
  // ten times that to spare on a loaded machine. The loops below end as soon as both are done.
  const double start_at = epoch_seconds() + 10.0;
  std::vector<std::unique_ptr<Fill>> fills;
  for (int i = 0; i < 3; ++i) fills.push_back(std::make_unique<Fill>(base, dir, start_at, 2.0));
  std::vector<pid_t> pids;
  for (const auto& fill : fills) pids.push_back(fill->pid());

  // Before the fill: every context exists; the agent's pass (the check pass, which measures the
  // context cost of its observation after each check) publishes what they cost.
  while (epoch_seconds() < start_at - 0.5 && slots_with_contexts(dir) < 3) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(slots_with_contexts(dir), 3) << "the contexts were not created in time";
  if (measure) {
    while (epoch_seconds() < start_at - 0.2 && published_in_page(dir) != 520 * kMi) {
      EXPECT_EQ(join_problems(meter.measure()), "");
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  outcome.published = published_in_page(dir);
  bool any = true;
  while (any) {
    outcome.nvml_peak = std::max(outcome.nvml_peak, nvml.used_by(pids));
    any = false;
    for (const auto& fill : fills) any = fill->running() || any;
    std::this_thread::sleep_for(milliseconds(10));
  }
  for (const auto& fill : fills) {
    const nlohmann::json report = fill->finish();
    EXPECT_FALSE(report.empty());
    outcome.bytes_obtained += report.value("bytes_obtained", uint64_t{0});
    outcome.refused += report.value("stop_reason", std::string()) == "CUDA_ERROR_OUT_OF_MEMORY";
  }
  std::printf(
      "FIGURE %s: published %llu MiB per context, NVML peak %llu MiB (limit 4096 MiB), "
      "allocated %llu MiB\n",
      measure ? "measured" : "default", static_cast<unsigned long long>(outcome.published / kMi),
      static_cast<unsigned long long>(outcome.nvml_peak / kMi),
      static_cast<unsigned long long>(outcome.bytes_obtained / kMi));
  return outcome;
}

#define REQUIRE_SAMPLES()                                                          \
  do {                                                                             \
    if (std::string(MEMORY_FILL).empty()) GTEST_SKIP() << "built without samples"; \
  } while (0)

TEST(ContextOverheadOnSimulatedGpu, WithTheMeasuredCostTheShareStaysWithinItsLimit) {
  REQUIRE_SAMPLES();
  const FillOutcome outcome = fill_share(true);
  EXPECT_EQ(outcome.published, 520 * kMi);
  EXPECT_EQ(outcome.refused, 3) << "each fill went to what the shim allows";
  EXPECT_LE(outcome.nvml_peak, 4 * kGi);
  // And not by holding back: the share is full as NVML sees it (three fills racing for the last
  // pages may each stop a page or so early).
  EXPECT_GE(outcome.nvml_peak, 4 * kGi - 16 * kMi);
}

TEST(ContextOverheadOnSimulatedGpu, WithTheDefaultCostTheShareExceedsItsLimit) {
  REQUIRE_SAMPLES();
  const FillOutcome outcome = fill_share(false);
  EXPECT_EQ(outcome.published, 0u);
  EXPECT_EQ(outcome.refused, 3);
  // 3 contexts at 520Mi charged 500Mi each: up to 60Mi beyond the limit (so the test above can
  // fail).
  EXPECT_GT(outcome.nvml_peak, 4 * kGi);
  EXPECT_LE(outcome.nvml_peak, 4 * kGi + 3 * 20 * kMi);
}

// A liar moves only its own share: share B's process forges its slot (all its bytes claimed as
// allocations, so the figure would drop; then nothing allocated, so it would soar) while share A's
// process is honest. A's figure stays the true cost; B's stays within the clamp.
TEST(ContextOverheadOnSimulatedGpu, ALyingSlotMovesOnlyItsOwnShare) {
  REQUIRE_SAMPLES();
  simgpu_state();
  const Result<std::vector<GpuInfo>> gpus = list_gpus();
  ASSERT_TRUE(gpus.is_ok() && !gpus->empty());
  const std::string uuid = gpus->front().uuid;
  TempDir base("context-overhead-liar");
  share_folder::DeviceLimit device;
  device.uuid = uuid;
  device.memory_limit = 4 * kGi;
  const std::string honest = base.shares() + "/a";
  const std::string liar = base.shares() + "/b";
  ASSERT_EQ(share_folder::write_limits(honest, {device}).message(), "");
  ASSERT_EQ(share_folder::write_limits(liar, {device}).message(), "");
  const double start_at = epoch_seconds() + 60;  // never fills: holds its context only
  Fill a(base, honest, start_at, 0);
  Fill b(base, liar, start_at, 0);
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (steady_clock::now() < deadline &&
         (slots_with_contexts(honest) < 1 || slots_with_contexts(liar) < 1)) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_EQ(slots_with_contexts(liar), 1);
  ASSERT_EQ(slots_with_contexts(honest), 1);

  // The liar's slot, written as a tenant can (the usage page is the share's own, read-write).
  const int fd = open((liar + "/usage").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* memory = mmap(nullptr, sizeof(share::UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(memory, MAP_FAILED);
  auto* page = static_cast<share::UsagePage*>(memory);
  share::ProcessSlot* slot = nullptr;
  for (auto& candidate : page->slots) {
    if (candidate.owner.load() != 0) slot = &candidate;
  }
  ASSERT_NE(slot, nullptr);

  ObservedMeter meter(base.shares(), uuid);
  // A forged "everything is allocations": B's figure would fall to the floor, A's is untouched.
  slot->bytes[0].store(520 * kMi + 400 * kMi);
  slot->contexts.store(share::pack_contexts(0, 1, 400 * kMi));
  // A slot that says 400 MiB more than NVML sees is no evidence (nor, alone, a lie: a reservation
  // runs ahead of the driver).
  EXPECT_EQ(join_problems(meter.measure()), "");
  EXPECT_EQ(published_in_page(honest), 520 * kMi);
  EXPECT_EQ(published_in_page(liar), 0u);
  const std::optional<uint64_t> owner_b = process_owner("/proc", b.pid());
  ASSERT_TRUE(owner_b.has_value());
  EXPECT_FALSE(meter.distrusts(*owner_b));
  // A forged "no bytes at all" with a claim of a tiny charge: NVML sees more than the slot says
  // plus the margin, so B's process is not heard while it lives, even once its slot agrees again;
  // A's stays the same.
  slot->bytes[0].store(0);
  slot->contexts.store(share::pack_contexts(0, 1, 0));
  EXPECT_EQ(join_problems(meter.measure()), "");
  EXPECT_EQ(published_in_page(honest), 520 * kMi);
  EXPECT_EQ(published_in_page(liar), 0u);
  EXPECT_TRUE(meter.distrusts(*owner_b));
  EXPECT_EQ(meter.stats().disagreed, 1u);
  slot->bytes[0].store(520 * kMi);
  slot->contexts.store(share::pack_contexts(0, 1, 100 * kMi));  // would say 520 MiB allocated
  EXPECT_EQ(join_problems(meter.measure()), "");
  EXPECT_EQ(published_in_page(liar), 0u);
  // B copies A's process's owner word into a slot of its own page: that process is then in two
  // shares' pages on this GPU and measured for neither; A's figure stays where it was.
  const std::optional<uint64_t> owner_a = process_owner("/proc", a.pid());
  ASSERT_TRUE(owner_a.has_value());
  share::ProcessSlot& forged = page->slots[share::kMaxSlots - 1];
  forged.bytes[0].store(100 * kGi);
  forged.contexts.store(share::pack_contexts(0, 1, 500 * kMi));
  forged.owner.store(*owner_a);
  page->slot_high_water.store(share::kMaxSlots);
  EXPECT_EQ(join_problems(meter.measure()), "");
  EXPECT_EQ(published_in_page(honest), 520 * kMi);
  forged.owner.store(0);
  munmap(memory, sizeof(share::UsagePage));
}

// The share's limits page, written as the agent's earlier run left it.
void set_in_page(const std::string& dir, uint64_t bytes, uint32_t device = 0) {
  testing::edit_limits_page(
      dir, [&](share::LimitsPage& page) { page.measured[device].context_overhead.store(bytes); });
}

// A figure lives as long as the processes that gave it: a 4 GiB figure an earlier run left in the
// page is replaced by what the share's live process shows, and once that process is gone the page
// says 0 (the shim's default) again; a fresh meter (an agent restart) finds no process and clears
// a figure left behind.
TEST(ContextOverheadOnSimulatedGpu, AFigureDoesNotOutliveItsProcessNorARestart) {
  REQUIRE_SAMPLES();
  simgpu_state();
  const Result<std::vector<GpuInfo>> gpus = list_gpus();
  ASSERT_TRUE(gpus.is_ok() && !gpus->empty());
  TempDir base("context-overhead-outlive");
  share_folder::DeviceLimit device;
  device.uuid = gpus->front().uuid;
  device.memory_limit = 4 * kGi;
  const std::string dir = base.shares() + "/a";
  ASSERT_EQ(share_folder::write_limits(dir, {device}).message(), "");
  {
    Fill fill(base, dir, epoch_seconds() + 60, 0);  // holds its context only
    const auto deadline = steady_clock::now() + std::chrono::seconds(10);
    while (steady_clock::now() < deadline && slots_with_contexts(dir) < 1)
      std::this_thread::sleep_for(milliseconds(20));
    ASSERT_EQ(slots_with_contexts(dir), 1);
    // The shim states the context before the driver makes it: wait for NVML to show it too.
    TestNvml nvml;
    ASSERT_TRUE(nvml.load(device.uuid));
    while (steady_clock::now() < deadline && nvml.used_by({fill.pid()}) < 520 * kMi)
      std::this_thread::sleep_for(milliseconds(20));
    ASSERT_EQ(nvml.used_by({fill.pid()}), 520 * kMi);
    // Left by an earlier run after the process was charged (a figure there before would have been
    // its charge).
    ASSERT_NO_FATAL_FAILURE(set_in_page(dir, kMaxContextCost));
    ObservedMeter meter(base.shares(), device.uuid);
    EXPECT_EQ(join_problems(meter.measure()), "");
    EXPECT_EQ(published_in_page(dir), 520 * kMi) << "the live process's figure, not the old one";
    kill(fill.pid(), SIGKILL);
    while (fill.running()) std::this_thread::sleep_for(milliseconds(5));
    EXPECT_EQ(join_problems(meter.measure()), "");
    EXPECT_EQ(published_in_page(dir), 0u) << "its process is gone";
    EXPECT_EQ(meter.published(dir, 0), 0u);
  }
  ASSERT_NO_FATAL_FAILURE(set_in_page(dir, kMaxContextCost));
  ObservedMeter restarted(base.shares(), device.uuid);
  EXPECT_EQ(join_problems(restarted.measure()), "");
  EXPECT_EQ(published_in_page(dir), 0u) << "no process of this run gave it";
}

}  // namespace
}  // namespace tessera::agent
