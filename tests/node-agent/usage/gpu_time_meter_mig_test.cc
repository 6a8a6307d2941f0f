// GpuTimeMeter on MIG instances of the simulated GPU (an H100 in MIG mode, instances made with
// simgpu-ctl): NVML answers NOT_SUPPORTED for per-process utilisation on a MIG device, so the
// meter reads the GPU time the shares' shims timed into their slots (ProcessSlot::gpu_busy_ns),
// and each instance is a device of its own for spare_percent and yield_mask. The slots are the
// tenants' file: forged figures are written here as a hostile tenant would.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clock/clock.h"
#include "sim_mig.h"
#include "tessera/pending_spans.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_region.h"
#include "usage/gpu_time_meter.h"

#ifndef COMPUTE_BURN
#define COMPUTE_BURN ""
#define LIBVGPU_SO ""
#endif

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr const char* kDevices = "name=NVIDIA H100 80GB HBM3,memory=81559Mi,sms=132,cc=9.0,mig=on";
constexpr uint64_t kMs = 1'000'000;
constexpr int64_t kSpanMs = 1'000'000;  // CLOCK_MONOTONIC arithmetic of spans

// A simulated machine of its own for each test (its instances are the test's), made fresh.
std::string& simgpu_state() {
  static std::string state;
  return state;
}

class GpuTimeMeterMig : public ::testing::Test {
 protected:
  void SetUp() override {
    simgpu_state() = (fs::temp_directory_path() /
                      ("gpu-time-meter-mig-" + std::to_string(getpid()) + "-" +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".state"))
                         .string();
    fs::remove(simgpu_state());
    setenv("SIMGPU_STATE", simgpu_state().c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
  }
  void TearDown() override { fs::remove(simgpu_state()); }
};

std::string create_instance(const std::string& profile) {
  return simgpu::testing::create_mig_instance(SIMGPU_CTL, profile);
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

// A share's usage page, mapped as its processes map it (the test plays them).
class UsagePage {
 public:
  explicit UsagePage(const std::string& dir) {
    const std::string path = dir + "/usage";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(ftruncate(fd, sizeof(share::UsagePage)), 0);
    void* memory =
        mmap(nullptr, sizeof(share::UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(memory, MAP_FAILED);
    page_ = static_cast<share::UsagePage*>(memory);
    share::init_usage_page(*page_);
  }
  ~UsagePage() { munmap(page_, sizeof(share::UsagePage)); }
  // Slot `index` claimed by a process (generation bumped, figure from 0), as the shim claims one.
  void claim(uint32_t index, uint32_t pid) {
    share::ProcessSlot& slot = page_->slots[index];
    slot.owner = share::make_owner(pid, 4026531836, 1000 + pid);
    slot.generation.fetch_add(1);
    slot.gpu_busy_ns = 0;
    slot.contexts = share::pack_contexts(0, 1, 500 * share::kContextChargeUnit);
    if (page_->slot_high_water < index + 1) page_->slot_high_water = index + 1;
  }
  void set_busy(uint32_t index, uint64_t ns) { page_->slots[index].gpu_busy_ns = ns; }
  void add_busy(uint32_t index, uint64_t ns) { page_->slots[index].gpu_busy_ns += ns; }

 private:
  share::UsagePage* page_ = nullptr;
};

std::string make_share(const TempDir& base, const std::string& name, const std::string& uuid,
                       uint32_t request, uint32_t limit,
                       uint32_t priority = share::kPriorityNormal) {
  const std::string dir = base.shares() + "/" + name;
  share_folder::DeviceLimit device;
  device.uuid = uuid;
  device.cores_request = request;
  device.cores_limit = limit;
  EXPECT_EQ(share_folder::write_limits(dir, {device}, {priority, share::kMeasureAgent}).message(),
            "");
  return dir;
}

// A figure of the share's limits page as the shim reads it (a copy, read whole).
template <typename Figure>
auto limits_figure(const std::string& dir, Figure figure) {
  auto page = std::make_unique<share::LimitsPage>();
  std::memset(static_cast<void*>(page.get()), 0, sizeof(share::LimitsPage));
  std::ifstream(dir + "/limits", std::ios::binary)
      .read(reinterpret_cast<char*>(page.get()), sizeof(share::LimitsPage));
  return figure(*page);
}
uint64_t share_busy(const std::string& dir) {
  return limits_figure(
      dir, [](const share::LimitsPage& p) { return p.measured[0].share_busy_ns.load(); });
}
uint64_t others_busy(const std::string& dir) {
  return limits_figure(
      dir, [](const share::LimitsPage& p) { return p.measured[0].others_busy_ns.load(); });
}
uint64_t sampled_at(const std::string& dir) {
  return limits_figure(
      dir, [](const share::LimitsPage& p) { return p.measured[0].sampled_at_ns.load(); });
}
uint32_t spare(const std::string& dir) {
  return limits_figure(
      dir, [](const share::LimitsPage& p) { return p.requests[0].spare_percent.load(); });
}
uint64_t yield(const std::string& dir) {
  return limits_figure(dir, [](const share::LimitsPage& p) { return p.yield_mask.load(); });
}
uint64_t split(const std::string& dir) {
  return limits_figure(dir, [](const share::LimitsPage& p) { return p.split_mask.load(); });
}
uint64_t time_launches(const std::string& dir) {
  return limits_figure(dir, [](const share::LimitsPage& p) { return p.time_launches_mask.load(); });
}
uint64_t generation(const std::string& dir) {
  return limits_figure(dir, [](const share::LimitsPage& p) { return p.generation.load(); });
}

int64_t monotonic_now_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// A share's pending file of one device, written as the shim's processes write it
// (libvgpu/src/compute/pending_board.cc): record `record` is process `process`'s, its spans
// appended to its ring, the count last.
class PendingFile {
 public:
  PendingFile(const std::string& dir, const std::string& uuid) {
    EXPECT_EQ(share::open_or_create_pending_file(dir.c_str(), uuid.c_str(), fd_), 0) << dir;
  }
  void add_span(int record, uint64_t process, int64_t start_ns, int64_t end_ns) {
    share::PendingRecord head{};
    const off_t at = static_cast<off_t>(offsetof(share::PendingPage, records) +
                                        sizeof(share::PendingRecord) * record);
    ASSERT_EQ(pread(fd_.get(), &head, offsetof(share::PendingRecord, spans), at),
              static_cast<ssize_t>(offsetof(share::PendingRecord, spans)));
    const uint64_t number = head.written;
    const share::PendingStored stored{start_ns, static_cast<uint32_t>(end_ns - start_ns),
                                      static_cast<uint32_t>(number + 1)};
    ASSERT_EQ(pwrite(fd_.get(), &stored, sizeof stored,
                     at + static_cast<off_t>(offsetof(share::PendingRecord, spans) +
                                             sizeof stored * (number % share::kPendingSpans))),
              static_cast<ssize_t>(sizeof stored));
    head.process = process;
    head.share = 1;
    head.kept_until_ns = static_cast<uint64_t>(end_ns + share::kPendingHold);
    head.written = number + 1;
    ASSERT_EQ(pwrite(fd_.get(), &head, offsetof(share::PendingRecord, spans), at),
              static_cast<ssize_t>(offsetof(share::PendingRecord, spans)));
  }
  void set_overflowed() {
    const uint64_t one = 1;
    ASSERT_EQ(pwrite(fd_.get(), &one, sizeof one, offsetof(share::PendingPage, overflowed)), 8);
  }

 private:
  UniqueFd fd_;
};

// Two instances of one GPU, shares in each, slot figures written as the shims (and a hostile
// tenant) would: the figures per share come from its own slots only, bounded, never backwards;
// a busy guaranteed share on instance A changes the spare parts and yield bits of A's shares only.
TEST_F(GpuTimeMeterMig, EachInstanceIsADeviceMeasuredFromItsSharesSlots) {
  const std::string a = create_instance("3g.40gb");
  const std::string b = create_instance("3g.40gb");
  ASSERT_EQ(a.rfind("MIG-", 0), 0u) << a;
  ASSERT_EQ(b.rfind("MIG-", 0), 0u) << b;
  ASSERT_NE(a, b);
  TempDir base("gpu-time-meter-mig");
  const std::string guaranteed = make_share(base, "guaranteed", a, 60, 60);
  const std::string best_effort = make_share(base, "best-effort", a, 0, 100);
  const std::string low = make_share(base, "low", a, 0, 100, share::kPriorityLow);
  const std::string elsewhere = make_share(base, "elsewhere", b, 0, 100);
  UsagePage guaranteed_page(guaranteed), best_effort_page(best_effort);
  UsagePage low_page(low), elsewhere_page(elsewhere);
  guaranteed_page.claim(0, 41);
  best_effort_page.claim(0, 42);

  SimulatedClock clock;
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  options.priority_hold = milliseconds(100);
  GpuTimeMeter meter(options, clock);
  ASSERT_EQ(meter.sample_once().message(), "");  // resolves both instances, primes the slots
  EXPECT_EQ(meter.stats().gpus, 2u);
  EXPECT_EQ(meter.stats().timed_gpus, 2u);
  EXPECT_EQ(meter.stats().nvml_errors, 0u);  // NOT_SUPPORTED is no error here
  EXPECT_EQ(spare(best_effort), 100u);
  EXPECT_EQ(spare(guaranteed), 0u);

  // The guaranteed share's process ran 5 ms on A.
  std::this_thread::sleep_for(milliseconds(20));
  guaranteed_page.add_busy(0, 5 * kMs);
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(share_busy(guaranteed), 5 * kMs);
  EXPECT_EQ(others_busy(guaranteed), 0u);
  EXPECT_EQ(share_busy(best_effort), 0u);
  EXPECT_EQ(others_busy(best_effort), 5 * kMs);
  EXPECT_EQ(split(guaranteed), 0u);    // no pending file (an older shim): the shim's own spans
  EXPECT_EQ(spare(best_effort), 40u);  // what the busy 60 leaves
  EXPECT_EQ(yield(low), 1u);           // a share of higher priority is busy on its instance
  EXPECT_EQ(yield(guaranteed), 0u);
  // Instance B is another device: nothing of A shows there.
  EXPECT_EQ(others_busy(elsewhere), 0u);
  EXPECT_EQ(spare(elsewhere), 100u);
  EXPECT_EQ(yield(elsewhere), 0u);
  EXPECT_GE(sampled_at(elsewhere), 1u);  // published all the same

  // A figure that goes down is not counted, and the slot counts on from its highest (no negative
  // time, no second count of the same time).
  std::this_thread::sleep_for(milliseconds(20));
  guaranteed_page.set_busy(0, 1 * kMs);
  ASSERT_EQ(meter.sample_once().message(), "");
  std::this_thread::sleep_for(milliseconds(20));
  guaranteed_page.set_busy(0, 4 * kMs);
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(share_busy(guaranteed), 5 * kMs);
  EXPECT_GE(meter.stats().slot_figures_refused, 2u);
  std::this_thread::sleep_for(milliseconds(20));
  guaranteed_page.set_busy(0, 7 * kMs);
  // The next window begins within this pass (at its read of the slots): timed from before it.
  const auto window_began = steady_clock::now();
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(share_busy(guaranteed), 7 * kMs);

  // A huge figure is cut to the window's wall time; a tenant's forgery in its own page moves only
  // its own figure (and the others' "others"), never another share's.
  const uint64_t before_best_effort = share_busy(best_effort);
  const uint64_t before_guaranteed = share_busy(guaranteed);
  std::this_thread::sleep_for(milliseconds(20));
  best_effort_page.set_busy(0, 1'000'000'000'000'000ull);
  ASSERT_EQ(meter.sample_once().message(), "");
  const uint64_t window_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady_clock::now() - window_began)
          .count());
  const uint64_t forged = share_busy(best_effort) - before_best_effort;
  EXPECT_GT(forged, 0u);
  EXPECT_LE(forged, window_ns);
  EXPECT_EQ(share_busy(guaranteed), before_guaranteed);
  // A slot claimed again (a new generation) counts from 0, bounded the same way.
  std::this_thread::sleep_for(milliseconds(20));
  low_page.claim(3, 43);
  low_page.set_busy(3, 2 * kMs);
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(share_busy(low), 2 * kMs);

  // Nobody runs on A any more: after the hold, by the agent's clock, everything is open again.
  clock.advance(milliseconds(99));
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(spare(best_effort), 40u);
  EXPECT_EQ(yield(low), 1u);
  clock.advance(milliseconds(1));
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(spare(best_effort), 100u);
  EXPECT_EQ(yield(low), 0u);
  EXPECT_GE(meter.stats().timed_windows, 2u * 8);
  EXPECT_EQ(meter.stats().windows, 0u);  // NVML measured nothing here
}

// A usage page a tenant cut or scribbled counts nothing for its share and stops no other share's
// measurement; once the page is whole again, its share is primed afresh (no jump).
TEST_F(GpuTimeMeterMig, ABadUsagePageCountsNothing) {
  const std::string a = create_instance("3g.40gb");
  ASSERT_EQ(a.rfind("MIG-", 0), 0u) << a;
  TempDir base("gpu-time-meter-mig-bad");
  const std::string good = make_share(base, "good", a, 50, 50);
  const std::string bad = make_share(base, "bad", a, 50, 50);
  UsagePage good_page(good);
  good_page.claim(0, 51);
  {
    UsagePage bad_page(bad);
    bad_page.claim(0, 52);
  }
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  SimulatedClock clock;
  GpuTimeMeter meter(options, clock);
  ASSERT_EQ(meter.sample_once().message(), "");
  ASSERT_EQ(truncate((bad + "/usage").c_str(), 100), 0);
  std::this_thread::sleep_for(milliseconds(20));
  good_page.add_busy(0, 3 * kMs);
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(share_busy(good), 3 * kMs);
  EXPECT_EQ(share_busy(bad), 0u);
  EXPECT_EQ(others_busy(bad), 3 * kMs);
  // Whole again with a large figure already in it: primed, not counted.
  {
    UsagePage bad_page(bad);
    bad_page.claim(0, 52);
    bad_page.set_busy(0, 900 * kMs);
  }
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(share_busy(bad), 0u);
}

// Two shares pending at once in instance A, as their shims publish it in their own folders: each is
// charged its equal part (time-slicing gave each half of the overlap), not what its launches
// spanned; a share on instance B is in no split of A's; a span published after its window is
// charged whole to its share.
TEST_F(GpuTimeMeterMig, SharesPendingTogetherInAnInstanceAreChargedTheirEqualParts) {
  const std::string a = create_instance("3g.40gb");
  const std::string b = create_instance("3g.40gb");
  TempDir base("gpu-time-meter-mig-split");
  const std::string thirty = make_share(base, "thirty", a, 30, 30);
  const std::string seventy = make_share(base, "seventy", a, 70, 70);
  const std::string elsewhere = make_share(base, "elsewhere", b, 50, 50);
  UsagePage thirty_page(thirty), seventy_page(seventy), elsewhere_page(elsewhere);
  thirty_page.claim(0, 61);
  seventy_page.claim(0, 62);
  elsewhere_page.claim(0, 63);
  PendingFile thirty_file(thirty, a), seventy_file(seventy, a), elsewhere_file(elsewhere, b);
  SimulatedClock clock;
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options, clock);
  ASSERT_EQ(meter.sample_once().message(), "");  // the split's first window starts lag before now
  const int64_t t0 = monotonic_now_ns();         // so every span below is in the next window
  EXPECT_EQ(split(thirty), 1u);
  EXPECT_EQ(split(seventy), 1u);
  EXPECT_EQ(split(elsewhere), 1u);

  // 30 pending t0-20..t0-10; 70 (two processes) t0-15..t0-5 and t0-12..t0-8; B's share all along.
  const uint64_t p30 = share::make_owner(61, 4026531836, 1061);
  const uint64_t p70 = share::make_owner(62, 4026531836, 1062);
  const uint64_t p70_second = share::make_owner(64, 4026531836, 1064);
  thirty_file.add_span(0, p30, t0 - 20 * kSpanMs, t0 - 10 * kSpanMs);
  seventy_file.add_span(0, p70, t0 - 15 * kSpanMs, t0 - 5 * kSpanMs);
  seventy_file.add_span(1, p70_second, t0 - 12 * kSpanMs, t0 - 8 * kSpanMs);
  elsewhere_file.add_span(0, share::make_owner(63, 4026531836, 1063), t0 - 20 * kSpanMs, t0);
  // What the launches spanned (the slots): all of each span, the others' turns included.
  thirty_page.add_busy(0, 10 * kMs);
  seventy_page.add_busy(0, 10 * kMs);
  while (monotonic_now_ns() - share::kPendingLag <= t0 + 1 * kSpanMs)
    std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(meter.sample_once().message(), "");
  // Edge by edge (ms before t0), who is pending and what each is charged:
  //   20..15  30 alone               30: 5
  //   15..12  30, 70's first         30: 1.5   70: 1.5
  //   12..10  30, both of 70's       30: 2/3   70: 2 x 2/3
  //   10..8   both of 70's                     70: 2
  //    8..5   70's first alone                 70: 3
  const uint64_t third = 2 * kMs / 3;
  EXPECT_EQ(share_busy(thirty), 5 * kMs + 3 * kMs / 2 + third);
  EXPECT_EQ(share_busy(seventy), 3 * kMs / 2 + 2 * third + 2 * kMs + 3 * kMs);
  EXPECT_EQ(others_busy(thirty), share_busy(seventy));
  EXPECT_EQ(others_busy(seventy), share_busy(thirty));
  // Together the time anyone was pending (15 ms), give or take the integer division.
  EXPECT_NEAR(static_cast<double>(share_busy(thirty) + share_busy(seventy)), 15.0 * kMs, 2);
  EXPECT_EQ(share_busy(elsewhere), 20 * kMs);  // alone in B (its window's part of 20 ms)
  EXPECT_EQ(others_busy(elsewhere), 0u);
  EXPECT_GE(meter.stats().split_windows, 2u);

  // Published only after its window was charged: the share pays all of it.
  const uint64_t before = share_busy(thirty);
  thirty_file.add_span(0, p30, t0 - 30 * kSpanMs, t0 - 28 * kSpanMs);
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(share_busy(thirty), before + 2 * kMs);
  EXPECT_EQ(meter.stats().pending_refused, 0u);

  // A tenant's forgery: a ring of spans of 4 s each, all from long ago, "published late". Its own
  // share is charged at most share::kPendingLateCap for them (the shim forgives debt beyond 2 s
  // anyway), nothing wraps, and the other share's figure does not move.
  const uint64_t thirty_before = share_busy(thirty), seventy_before = share_busy(seventy);
  for (int i = 0; i < share::kPendingSpans; ++i)
    thirty_file.add_span(2, share::make_owner(65, 4026531836, 1065), 1000 + i,
                         1000 + i + 4'000'000'000);
  ASSERT_EQ(meter.sample_once().message(), "");  // the record is seen: its spans are not late
  for (int i = 0; i < share::kPendingSpans; ++i)
    thirty_file.add_span(2, share::make_owner(65, 4026531836, 1065), 2000 + i,
                         2000 + i + 4'000'000'000);
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(share_busy(thirty) - thirty_before, static_cast<uint64_t>(share::kPendingLateCap));
  EXPECT_EQ(share_busy(seventy), seventy_before);
}

// A pending file a tenant replaced (a symlink, a FIFO, a cut file) or one its processes overflowed
// is not taken: that share is charged what its launches spanned (more, never less), the problem is
// reported naming the file, and the other shares of the instance are still split among themselves.
TEST_F(GpuTimeMeterMig, APendingFileThatCannotBeTakenLeavesItsShareOnWhatItsLaunchesSpanned) {
  const std::string a = create_instance("3g.40gb");
  TempDir base("gpu-time-meter-mig-split-bad");
  const std::string good = make_share(base, "good", a, 30, 30);
  const std::string linked = make_share(base, "linked", a, 30, 30);
  const std::string cut = make_share(base, "cut", a, 20, 20);
  const std::string full = make_share(base, "full", a, 20, 20);
  UsagePage good_page(good), linked_page(linked), cut_page(cut), full_page(full);
  good_page.claim(0, 71);
  linked_page.claim(0, 72);
  cut_page.claim(0, 73);
  full_page.claim(0, 74);
  PendingFile good_file(good, a);
  fs::create_symlink("/etc/passwd", linked + "/pending-" + a);
  { PendingFile cut_file(cut, a); }
  ASSERT_EQ(truncate((cut + "/pending-" + a).c_str(), 100), 0);
  PendingFile full_file(full, a);
  full_file.set_overflowed();
  SimulatedClock clock;
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options, clock);
  const Status first = meter.sample_once();
  EXPECT_NE(first.message().find("pending file is a symlink: " + linked + "/pending-" + a),
            std::string::npos)
      << first.message();
  EXPECT_NE(first.message().find("pending file is truncated"), std::string::npos);
  EXPECT_NE(first.message().find("full (more processes than records)"), std::string::npos);
  EXPECT_EQ(split(good), 1u);
  EXPECT_EQ(split(linked), 0u);
  EXPECT_EQ(split(cut), 0u);
  EXPECT_EQ(split(full), 0u);
  EXPECT_EQ(meter.stats().pending_refused, 3u);

  const int64_t t0 = monotonic_now_ns();
  good_file.add_span(0, share::make_owner(71, 4026531836, 1071), t0 - 10 * kSpanMs, t0);
  good_page.add_busy(0, 10 * kMs);
  linked_page.add_busy(0, 10 * kMs);
  full_page.add_busy(0, 10 * kMs);
  while (monotonic_now_ns() - share::kPendingLag <= t0 + 1 * kSpanMs)
    std::this_thread::sleep_for(milliseconds(5));
  EXPECT_NE(meter.sample_once().message(), "");  // the three files, again
  EXPECT_EQ(share_busy(good), 10 * kMs);         // alone among the shares whose spans are known
  EXPECT_EQ(share_busy(linked), 10 * kMs);       // all its launches spanned
  EXPECT_EQ(share_busy(full), 10 * kMs);
  EXPECT_EQ(share_busy(cut), 0u);
}

// compute-burn under libvgpu in share `share`, on `instance` of the test's simulated machine: its
// process, and its one-line JSON report once it exited.
struct Burn {
  pid_t pid = -1;
  std::string out;
  nlohmann::json report() const {
    std::ifstream file(out);
    std::string line;
    std::getline(file, line);
    return nlohmann::json::parse(line, nullptr, false);
  }
};

Burn start_burn(const TempDir& base, const std::string& share, const std::string& instance,
                uint64_t kernel_us, const std::string& seconds, const std::string& sync_every) {
  Burn burn;
  burn.out = share + "/burn.json";
  const std::vector<std::string> env = {
      std::string("LD_LIBRARY_PATH=") + SIMGPU_LIB_DIR,
      "SIMGPU_STATE=" + simgpu_state(),
      std::string("SIMGPU_DEVICES=") + kDevices,
      "SIMGPU_KERNEL_US=burn_fma=" + std::to_string(kernel_us),
      "CUDA_VISIBLE_DEVICES=" + instance,
      "TESSERA_DEVICE_DIR=" + base.str(),
      std::string("LD_PRELOAD=") + LIBVGPU_SO,
      "TESSERA_SHARE_DIR=" + share,
      "ASAN_OPTIONS=verify_asan_link_order=0",
      "PATH=/usr/bin:/bin",
  };
  const std::vector<std::string> args = {COMPUTE_BURN,      "--seconds", seconds,
                                         "--blocks-per-sm", "8",         "--sync-every",
                                         sync_every,        "--launch",  "kernel"};
  std::vector<char*> argv, envp;
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  burn.pid = fork();
  if (burn.pid == 0) {
    const int fd = open(burn.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1);
    execve(COMPUTE_BURN, argv.data(), envp.data());
    _exit(127);
  }
  return burn;
}

// Waits for the burn; its GPU time as a percent of its wall time (kernels x kernel time), or -1
// when it failed.
double finish_burn(const Burn& burn, uint64_t kernel_us, double* kernels_s = nullptr) {
  int status = 0;
  if (burn.pid <= 0 || waitpid(burn.pid, &status, 0) != burn.pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    return -1;
  const nlohmann::json report = burn.report();
  if (!report.is_object() || report.value("seconds", 0.0) <= 0) return -1;
  // With its warm-up kernel (outside the report's timed loop).
  if (kernels_s)
    *kernels_s = (report.value("kernels", 0.0) + 1) * static_cast<double>(kernel_us) * 1e-6;
  return 100.0 * report.value("kernels", 0.0) * static_cast<double>(kernel_us) * 1e-6 /
         report.value("seconds", 0.0);
}

// Two limited shares contending in one instance under the agent (each in its own folder, as two
// containers), an unlimited burn in another instance meanwhile: each is held to its quota as on a
// whole GPU, not charged the other's turns, and not slowed by the burn. Judged
// as compute_accuracy.py's `shares` verdict: each share within 3 points above its quota, and no
// more than 3 below what it is owed (its quota, or where the quotas add up to more than a timed
// share reaches here alone, what is left of that beyond the other's use).
TEST_F(GpuTimeMeterMig, TwoLimitedSharesInOneInstanceAreHeldToTheirQuotasUnderTheAgent) {
  if (std::string(COMPUTE_BURN).empty()) GTEST_SKIP() << "built without samples";
#ifdef GPU_TIME_METER_SANITIZED
  GTEST_SKIP() << "timing test: not in a sanitizer build (as libvgpu.compute.*)";
#endif
  const std::string a = create_instance("3g.40gb");
  const std::string b = create_instance("3g.40gb");
  TempDir base("gpu-time-meter-mig-quotas");
  const std::string alone = make_share(base, "alone", a, 99, 99);
  const std::string other = make_share(base, "other", b, 100, 100);  // unlimited
  const std::string thirty = make_share(base, "thirty", a, 30, 30);
  const std::string seventy = make_share(base, "seventy", a, 70, 70);
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options);
  ASSERT_EQ(meter.start().message(), "");
  constexpr uint64_t kKernelUs = 50;  // one wave of burn_fma, as the whole-GPU verdicts use
  const double reachable = finish_burn(start_burn(base, alone, a, kKernelUs, "2", "64"), kKernelUs);
  // An unlimited burn on instance B all along: another device, it takes nothing from A's shares.
  const Burn burn_other = start_burn(base, other, b, kKernelUs, "3.5", "64");
  const Burn burn30 = start_burn(base, thirty, a, kKernelUs, "3", "64");
  const Burn burn70 = start_burn(base, seventy, a, kKernelUs, "3", "64");
  double kernels30_s = 0, kernels70_s = 0;
  const double used30 = finish_burn(burn30, kKernelUs, &kernels30_s);
  const double used70 = finish_burn(burn70, kKernelUs, &kernels70_s);
  const double used_other = finish_burn(burn_other, kKernelUs);
  // The windows that lag behind the last spans (share::kPendingLag), charged by the loop.
  const uint64_t passes = meter.loop_passes();
  ASSERT_TRUE(meter.wait_for_loop_passes(passes + 4));
  meter.stop();
  std::printf("FIGURE agent_timed_cores99_gpu_percent = %.2f\n", reachable);
  std::printf("FIGURE agent_other_instance_unlimited_gpu_percent = %.2f\n", used_other);
  EXPECT_GT(used_other, 50) << "the burn on instance B is not saturating it";
  ASSERT_GT(reachable, 0);
  ASSERT_GE(used30, 0);
  ASSERT_GE(used70, 0);
  EXPECT_EQ(split(thirty), 1u);  // charged from the split, not from their own spans
  EXPECT_EQ(split(seventy), 1u);
  EXPECT_GT(meter.stats().split_windows, 0u);
  const struct {
    const char* name;
    double quota, used, other, kernels_s;
    std::string dir;
  } shares[] = {{"agent_instance_share30", 30, used30, used70, kernels30_s, thirty},
                {"agent_instance_share70", 70, used70, used30, kernels70_s, seventy}};
  for (const auto& share : shares) {
    // What the agent charged the share against what its kernels ran: its part of the instance's
    // time, not its launches' spans (which hold the other share's turns too).
    const double charged =
        100.0 * static_cast<double>(share_busy(share.dir)) * 1e-9 / share.kernels_s;
    std::printf("FIGURE %s_charged_vs_kernels_percent = %.2f\n", share.name, charged);
    // Without the split: 180.7 / 119.3 (each paid for the other's turns).
    EXPECT_GE(charged, 90) << share.name;
    EXPECT_LE(charged, 110) << share.name;
    const double owed = std::min(share.quota, std::max(0.0, reachable - share.other));
    std::printf("FIGURE %s_gpu_percent = %.2f (expected %.2f to %.0f)\n", share.name, share.used,
                owed - 3, share.quota + 3);
    EXPECT_GE(share.used, owed - 3) << share.name;
    EXPECT_LE(share.used, share.quota + 3) << share.name;
  }
}

// A share with no compute setting on an instance is asked to time its launches there while a
// limited share is beside it (its turns must be in the split), and only then; each change bumps
// its limits page's generation, so that its shim looks again.
TEST_F(GpuTimeMeterMig, AnUnlimitedShareBesideALimitedOneIsAskedToTimeItsLaunches) {
  const std::string a = create_instance("3g.40gb");
  const std::string b = create_instance("3g.40gb");
  TempDir base("gpu-time-meter-mig-ask");
  const std::string unlimited = make_share(base, "unlimited", a, 100, 100);
  const std::string unlimited_b = make_share(base, "unlimited-b", b, 100, 100);
  SimulatedClock clock;
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  options.pid_refresh = milliseconds(10);
  GpuTimeMeter meter(options, clock);
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(time_launches(unlimited), 0u);  // alone: nothing to split
  const uint64_t before = generation(unlimited);

  const std::string limited = make_share(base, "limited", a, 30, 30);
  clock.advance(milliseconds(10));  // the rescan finds the new share
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(time_launches(unlimited), 1u);
  EXPECT_EQ(time_launches(limited), 0u);      // it times its launches anyway
  EXPECT_EQ(time_launches(unlimited_b), 0u);  // another instance
  EXPECT_EQ(generation(unlimited), before + 1);
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(generation(unlimited), before + 1);  // no change, no bump

  // The limited share is given the whole device: nobody beside the unlimited share is limited.
  share_folder::DeviceLimit whole;
  whole.uuid = a;
  whole.cores_request = 100;
  whole.cores_limit = 100;
  ASSERT_EQ(
      share_folder::write_limits(limited, {whole}, {share::kPriorityNormal, share::kMeasureAgent})
          .message(),
      "");
  ASSERT_EQ(meter.sample_once().message(), "");
  EXPECT_EQ(time_launches(unlimited), 0u);
  EXPECT_EQ(meter.stats().time_launches_changes, 2u);
}

// A limited share arrives beside an unlimited one already running in an instance under the agent:
// the unlimited share's running process is asked to time its launches, so the split charges the
// limited share only its part of the time it was pending, and it gets its quota (not half of it).
TEST_F(GpuTimeMeterMig, ALimitedShareBesideAnUnlimitedOneInOneInstanceGetsItsQuota) {
  if (std::string(COMPUTE_BURN).empty()) GTEST_SKIP() << "built without samples";
#ifdef GPU_TIME_METER_SANITIZED
  GTEST_SKIP() << "timing test: not in a sanitizer build (as libvgpu.compute.*)";
#endif
  const std::string a = create_instance("3g.40gb");
  TempDir base("gpu-time-meter-mig-beside");
  const std::string unlimited = make_share(base, "unlimited", a, 100, 100);
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  options.pid_refresh = milliseconds(50);
  GpuTimeMeter meter(options);
  ASSERT_EQ(meter.start().message(), "");
  constexpr uint64_t kKernelUs = 50;
  // The unlimited share runs first, alone: nothing asks it to time its launches yet.
  const Burn burn_unlimited = start_burn(base, unlimited, a, kKernelUs, "3.6", "64");
  ASSERT_TRUE(meter.wait_for_loop_passes(meter.loop_passes() + 10));
  EXPECT_EQ(time_launches(unlimited), 0u);
  // A limited share arrives (a pod scheduled beside it): the running process is asked, and its
  // meter thread notices within a period.
  const std::string thirty = make_share(base, "thirty", a, 30, 30);
  for (int i = 0; i < 100 && time_launches(unlimited) == 0; ++i)
    ASSERT_TRUE(meter.wait_for_loop_passes(meter.loop_passes() + 1));
  EXPECT_EQ(time_launches(unlimited), 1u);
  const Burn burn30 = start_burn(base, thirty, a, kKernelUs, "3", "64");
  double kernels30_s = 0;
  const double used30 = finish_burn(burn30, kKernelUs, &kernels30_s);
  const double used_unlimited = finish_burn(burn_unlimited, kKernelUs);
  const uint64_t passes = meter.loop_passes();
  ASSERT_TRUE(meter.wait_for_loop_passes(passes + 4));
  meter.stop();
  ASSERT_GE(used30, 0);
  ASSERT_GE(used_unlimited, 0);
  const double charged = 100.0 * static_cast<double>(share_busy(thirty)) * 1e-9 / kernels30_s;
  std::printf("FIGURE agent_beside_unlimited_share30_gpu_percent = %.2f (expected 27 to 33)\n",
              used30);
  std::printf("FIGURE agent_beside_unlimited_unlimited_gpu_percent = %.2f\n", used_unlimited);
  std::printf("FIGURE agent_beside_unlimited_share30_charged_vs_kernels_percent = %.2f\n", charged);
  EXPECT_EQ(split(thirty), 1u);
  EXPECT_EQ(split(unlimited), 1u);
  // The unlimited share takes what the 30 share leaves: the 30 share is owed all of its quota.
  EXPECT_GE(used30, 27);
  EXPECT_LE(used30, 33);
  EXPECT_GE(charged, 90);
  EXPECT_LE(charged, 110);
}

// End to end: compute-burn under libvgpu in a high-priority share of instance A (its shim times its
// launches: NVML cannot measure a MIG device), beside a low share of A and a low share of B. The
// agent's figure for the share follows the kernels it ran, the low share of A gets its yield bit
// while the high one runs, and the low share of B never does.
TEST_F(GpuTimeMeterMig, AShimsTimedLaunchesDriveTheAgentsFiguresPerInstance) {
  if (std::string(COMPUTE_BURN).empty()) GTEST_SKIP() << "built without samples";
  const std::string a = create_instance("3g.40gb");
  const std::string b = create_instance("3g.40gb");
  ASSERT_EQ(a.rfind("MIG-", 0), 0u) << a;
  ASSERT_EQ(b.rfind("MIG-", 0), 0u) << b;
  TempDir base("gpu-time-meter-mig-burn");
  const std::string high = make_share(base, "high", a, 100, 100, share::kPriorityHigh);
  const std::string low_a = make_share(base, "low-a", a, 0, 100, share::kPriorityLow);
  const std::string low_b = make_share(base, "low-b", b, 0, 100, share::kPriorityLow);
  GpuTimeMeterOptions options;
  options.shares_dir = base.shares();
  GpuTimeMeter meter(options);
  ASSERT_EQ(meter.sample_once().message(), "");

  constexpr uint64_t kKernelUs = 2000;
  const Burn burn = start_burn(base, high, a, kKernelUs, "1", "1");
  const pid_t pid = burn.pid;
  ASSERT_GT(pid, 0);
  bool low_a_yielded = false, low_b_yielded = false;
  int status = 0;
  auto next = steady_clock::now();
  while (waitpid(pid, &status, WNOHANG) == 0) {
    EXPECT_EQ(meter.sample_once().message(), "");
    low_a_yielded = low_a_yielded || yield(low_a) == 1u;
    low_b_yielded = low_b_yielded || yield(low_b) != 0u;
    next += milliseconds(20);
    std::this_thread::sleep_until(next);
  }
  for (int i = 0; i < 5; ++i) {  // the last launches' time, collected at exit
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(meter.sample_once().message(), "");
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const nlohmann::json report = burn.report();
  ASSERT_TRUE(report.is_object());
  const double kernels_s = report.value("kernels", 0.0) * kKernelUs * 1e-6;
  const double measured_s = static_cast<double>(share_busy(high)) * 1e-9;
  std::printf(
      "FIGURE agent on a MIG instance: %.3f s measured (the equal split of the share's pending "
      "spans), kernels x kernel time %.3f s\n",
      measured_s, kernels_s);
  EXPECT_GT(kernels_s, 0.0);
  // The shim charges the time between its events; the last launches may be charged only at exit.
  EXPECT_GE(measured_s, 0.9 * kernels_s);
  EXPECT_LE(measured_s, 1.1 * kernels_s + 0.05);
  EXPECT_EQ(others_busy(high), 0u);  // nobody else ran on A
  EXPECT_TRUE(low_a_yielded);
  EXPECT_FALSE(low_b_yielded);
  EXPECT_EQ(share_busy(low_b), 0u);
  EXPECT_EQ(others_busy(low_b), 0u);
}

}  // namespace
}  // namespace tessera::agent
