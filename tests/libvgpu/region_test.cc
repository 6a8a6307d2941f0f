// The share region as the shim uses it: reservations against the limit, slots, reclaiming dead
// processes, creating the usage page once. Multi-process scenarios fork; each child opens the
// region as a separate process would.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "region.h"
#include "share_dir.h"

namespace {

using tessera::vgpu::CudaOrdinal;
using tessera::vgpu::LimitsIndex;
using tessera::vgpu::Options;
using tessera::vgpu::Region;
using tessera::vgpu::testing::ShareDir;
namespace share = tessera::share;

constexpr uint64_t kMi = 1ull << 20;
constexpr char kUuid[] = "GPU-5e1a0000-7e55-4e2a-9000-000000000000";

int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(Region, ReserveStopsAtTheLimitExactly) {
  ShareDir dir({{kUuid, 100 * kMi}});
  Region region;
  ASSERT_TRUE(region.open_share_dir(dir.path().c_str()));
  ASSERT_EQ(region.find_device(kUuid), LimitsIndex{0});
  EXPECT_EQ(region.find_device("GPU-other"), tessera::vgpu::kNotInShare);
  EXPECT_TRUE(region.reserve(LimitsIndex{0}, 60 * kMi));
  EXPECT_TRUE(region.reserve(LimitsIndex{0}, 40 * kMi));
  EXPECT_FALSE(region.reserve(LimitsIndex{0}, 1));
  EXPECT_EQ(region.usage(LimitsIndex{0}), 100 * kMi);
  region.release(LimitsIndex{0}, 40 * kMi);
  EXPECT_TRUE(region.reserve(LimitsIndex{0}, 40 * kMi));
  region.release(LimitsIndex{0}, 1000 * kMi);  // more than held: saturates at zero, never wraps
  EXPECT_EQ(region.usage(LimitsIndex{0}), 0u);
  EXPECT_FALSE(region.reserve(LimitsIndex{-1}, 1));
  EXPECT_FALSE(region.reserve(LimitsIndex{static_cast<int>(share::kMaxDevices)}, 1));
  region.release_slot();
  EXPECT_EQ(dir.used(), 0u);
}

TEST(Region, ThreadsRacingNeverCommitMoreThanTheLimit) {
  // Rounds: 8 threads each try to reserve 12Mi at once against a 64Mi limit (demand 96Mi), the
  // successful ones hold until every thread has tried, then all release. At most 5 fit.
  const uint64_t limit = 64 * kMi;
  const uint64_t request = 12 * kMi;
  ShareDir dir({{kUuid, limit}});
  Region region;
  ASSERT_TRUE(region.open_share_dir(dir.path().c_str()));
  constexpr int kThreads = 8;
  constexpr int kRounds = 300;
  std::atomic<int> held{0};
  std::atomic<int> most{0};
  std::atomic<int> fewest{kThreads};
  std::barrier tried(kThreads, [&]() noexcept {
    const int now = held.load();
    if (now > most.load()) most.store(now);
    if (now < fewest.load()) fewest.store(now);
  });
  std::barrier released(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < kRounds; ++round) {
        const bool ok = region.reserve(LimitsIndex{0}, request);
        if (ok) held.fetch_add(1);
        tried.arrive_and_wait();
        if (ok) {
          held.fetch_sub(1);
          region.release(LimitsIndex{0}, request);
        }
        released.arrive_and_wait();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_LE(most.load(), 5) << "more than the limit was committed";
  EXPECT_EQ(most.load(), 5) << "the limit was never filled";
  EXPECT_GE(fewest.load(), 1) << "a round where every racer backed off";
  EXPECT_EQ(region.usage(LimitsIndex{0}), 0u);
}

TEST(Region, InvalidLimitsPageIsRefused) {
  char path[] = "/tmp/tessera-share-bad-XXXXXX";
  ASSERT_NE(mkdtemp(path), nullptr);
  const std::string limits = std::string(path) + "/limits";
  const int fd = open(limits.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, sizeof(share::LimitsPage)), 0);  // all zero: bad magic
  close(fd);
  Region region;
  EXPECT_FALSE(region.open_share_dir(path));
  unlink(limits.c_str());
  rmdir(path);
}

TEST(Region, ConcurrentOpenersShareOneUsagePageAndDistinctSlots) {
  ShareDir dir({{kUuid, 1000 * kMi}});
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      Region region;
      if (!region.open_share_dir(dir.path().c_str())) _exit(1);
      if (!region.reserve(LimitsIndex{0}, 10 * kMi)) _exit(2);
      pause();  // hold until killed
      _exit(0);
    }
    children.push_back(pid);
  }
  for (int attempt = 0; attempt < 5000 && dir.used() != 80 * kMi; ++attempt) usleep(1000);
  EXPECT_EQ(dir.used(), 80 * kMi);
  for (pid_t pid : children) kill(pid, SIGKILL);
  for (pid_t pid : children) EXPECT_EQ(wait_child(pid), 128 + SIGKILL);
  // The dead processes' bytes are still in their slots until someone reclaims them.
  Region region;
  ASSERT_TRUE(region.open_share_dir(dir.path().c_str()));
  EXPECT_EQ(region.usage(LimitsIndex{0}), 80 * kMi);
  EXPECT_EQ(region.reclaim_dead(), 8);
  EXPECT_EQ(region.usage(LimitsIndex{0}), 0u);
  EXPECT_EQ(region.reclaim_dead(), 0);
}

TEST(Region, ReserveReclaimsDeadProcessesWhenItWouldFail) {
  ShareDir dir({{kUuid, 100 * kMi}});
  const pid_t pid = fork();
  if (pid == 0) {
    Region region;
    if (!region.open_share_dir(dir.path().c_str()) || !region.reserve(LimitsIndex{0}, 100 * kMi))
      _exit(1);
    raise(SIGKILL);
  }
  EXPECT_EQ(wait_child(pid), 128 + SIGKILL);
  Region region;
  ASSERT_TRUE(region.open_share_dir(dir.path().c_str()));
  EXPECT_EQ(region.usage(LimitsIndex{0}), 100 * kMi);
  EXPECT_TRUE(
      region.reserve(LimitsIndex{0}, 100 * kMi));  // only possible after reclaiming the dead slot
  EXPECT_EQ(region.usage(LimitsIndex{0}), 100 * kMi);
}

TEST(Region, LiveAndForeignNamespaceSlotsAreNeverReclaimed) {
  ShareDir dir({{kUuid, 100 * kMi}});
  Region region;
  ASSERT_TRUE(region.open_share_dir(dir.path().c_str()));
  ASSERT_TRUE(region.reserve(LimitsIndex{0}, 10 * kMi));
  share::UsagePage* page = dir.usage();
  ASSERT_NE(page, nullptr);
  // A slot of a process in another pid namespace (pid 1 there): it cannot be checked from here.
  share::ProcessSlot& foreign = page->slots[5];
  const uint64_t other_namespace = tessera::vgpu::read_pid_namespace() + 12345;
  foreign.owner.store(share::make_owner(1, other_namespace, 7));
  foreign.bytes[0].store(20 * kMi);
  page->slot_high_water.store(6);
  EXPECT_EQ(region.reclaim_dead(), 0);
  EXPECT_EQ(region.usage(LimitsIndex{0}), 30 * kMi);
  EXPECT_FALSE(region.reserve(LimitsIndex{0}, 71 * kMi));
  EXPECT_TRUE(region.reserve(LimitsIndex{0}, 70 * kMi));
}

TEST(Region, ProcessStartTimeIdentifiesAProcess) {
  uint64_t first = 0;
  uint64_t again = 0;
  ASSERT_TRUE(tessera::vgpu::read_process_start_time(getpid(), &first));
  ASSERT_TRUE(tessera::vgpu::read_process_start_time(getpid(), &again));
  EXPECT_EQ(first, again);
  EXPECT_FALSE(tessera::vgpu::read_process_start_time(0x3ffffe, &again));
  EXPECT_NE(tessera::vgpu::read_pid_namespace(), 0u);
}

TEST(Region, StandaloneRegionTakesLimitsFromOptions) {
  Options options;
  options.tessera_set = true;
  ASSERT_TRUE(tessera::vgpu::parse_memory_limit("0=64Mi", false, &options.tessera));
  tessera::vgpu::DeviceId devices[2] = {{CudaOrdinal{0}, {}}, {CudaOrdinal{1}, {}}};
  std::strcpy(devices[0].uuid, kUuid);
  std::strcpy(devices[1].uuid, "GPU-5e1a0000-7e55-4e2a-9000-000000000001");
  Region region;
  ASSERT_TRUE(region.open_standalone(options, devices, 2));
  EXPECT_EQ(region.limit(LimitsIndex{0}), 64 * kMi);
  EXPECT_EQ(region.limit(LimitsIndex{1}), share::kUnlimited);
  EXPECT_TRUE(region.reserve(LimitsIndex{0}, 64 * kMi));
  EXPECT_FALSE(region.reserve(LimitsIndex{0}, 512));
  EXPECT_TRUE(region.reserve(LimitsIndex{1}, 1ull << 40));
  // A forked child shares the region but takes its own slot.
  const pid_t pid = fork();
  if (pid == 0) {
    region.forget_slot_after_fork();
    _exit(region.reserve(LimitsIndex{0}, 512) ? 1 : region.own_usage(LimitsIndex{0}) == 0 ? 0 : 2);
  }
  EXPECT_EQ(wait_child(pid), 0);
}

}  // namespace
