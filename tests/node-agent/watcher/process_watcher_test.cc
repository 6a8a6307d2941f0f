// The process watcher's user-space logic, without BPF: events built here as the kernel side
// fills them, against real usage pages and real child processes.
#include "watcher/process_watcher.h"
#include "watcher/share_folder_resolver.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "clock/clock.h"
#include "tessera/log.h"
#include "tessera/share_folder/snapshot.h"
#include "usage/share_processes.h"
#include "watch_fixture.h"

namespace tessera::agent {
namespace {

using testing::Child;
using testing::RecordingFindings;
using testing::WatchTempDir;

class RecordingFilter final : public KernelFilter {
 public:
  Status set_watched_cgroups(const std::set<uint64_t>& cgroup_ids) override {
    cgroups = cgroup_ids;
    return Status::ok();
  }
  Status set_report_all_exits(bool report_all) override {
    report_all_exits = report_all;
    return Status::ok();
  }
  std::set<uint64_t> cgroups;
  bool report_all_exits = false;
};

// The event the kernel side sends for process `pid` of this pid namespace (read from /proc here,
// as the BPF program reads it from the task).
tessera_watch_event event_for(uint32_t kind, pid_t pid) {
  tessera_watch_event event{};
  event.kind = kind;
  event.host_pid = event.host_tgid = static_cast<uint32_t>(pid);
  share::ProcessIdentity identity;
  EXPECT_EQ(share::read_process_identity("/proc", pid, identity), 0);
  event.namespace_tgid = identity.pid;
  event.pid_namespace = identity.pid_namespace;
  event.start_boottime_ns =
      identity.start_time * (1'000'000'000ull / static_cast<uint64_t>(sysconf(_SC_CLK_TCK)));
  return event;
}

WatchedShare share_at(const std::string& dir, std::vector<uint64_t> cgroups) {
  WatchedShare share;
  share.id = "share-a";
  share.usage_path = dir + "/usage";
  share.claim_namespace = "team";
  share.claim_name = "gpu";
  share.claim_uid = "uid-1";
  share.cgroup_ids = std::move(cgroups);
  return share;
}

TEST(NvidiaDeviceMajors, ParsesCharacterDevicesOf195AndNvidiaDrivers) {
  const std::string devices =
      "Character devices:\n  1 mem\n195 nvidia-frontend\n236 nvidia-uvm\n237 nvidia-caps\n"
      "240 ttyX\n\nBlock devices:\n  7 loop\n250 nvidia-fake-block\n";
  EXPECT_EQ(nvidia_device_majors(devices), (std::vector<uint32_t>{195, 236, 237}));
  EXPECT_EQ(nvidia_device_majors(""), (std::vector<uint32_t>{195}));
}

TEST(MapsShowShim, MatchesTheShimsFileNameOnly) {
  EXPECT_TRUE(
      maps_show_shim("7f00-7f01 r-xp 00000000 08:01 12 /usr/local/lib/tessera/libvgpu.so\n"));
  EXPECT_TRUE(maps_show_shim("7f00-7f01 r--p 00000000 08:01 12 /opt/libvgpu.so.1\n"));
  EXPECT_FALSE(
      maps_show_shim("7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/libcuda.so.1\n"
                     "7f00-7f01 r-xp 00000000 08:01 12 /tmp/libvgpu.so.d/libc.so\n"));
  EXPECT_FALSE(maps_show_shim(""));
}

TEST(EventOwner, EqualsTheOwnerWordTheShimPacksFromProc) {
  share::ProcessIdentity self;
  ASSERT_EQ(share::read_process_identity("/proc", getpid(), self), 0);
  EXPECT_EQ(event_owner(event_for(TESSERA_WATCH_EXIT, getpid())), self.owner());
}

TEST(ProcessWatcher, RefreshPutsTheSharesCgroupsIntoTheKernelFilter) {
  StaticShareResolver resolver({share_at("/nonexistent", {11, 12})});
  RecordingFindings findings;
  SimulatedClock clock;
  RecordingFilter filter;
  ProcessWatcher watcher(resolver, findings, clock, &filter);
  ASSERT_TRUE(watcher.refresh_shares().is_ok());
  EXPECT_EQ(filter.cgroups, (std::set<uint64_t>{11, 12}));
  EXPECT_FALSE(filter.report_all_exits);
  // A share with a process in no known cgroup (cgroup v1 only): every exit is reported.
  WatchedShare unlocated = share_at("/elsewhere", {});
  unlocated.report_all_exits = true;
  resolver.set_shares({share_at("/nonexistent", {11}), unlocated});
  ASSERT_TRUE(watcher.refresh_shares().is_ok());
  EXPECT_EQ(filter.cgroups, (std::set<uint64_t>{11}));
  EXPECT_TRUE(filter.report_all_exits);
}

TEST(ProcessWatcher, AnExitClearsTheSlotOfThatProcessOnly) {
  WatchTempDir dir;
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::open_or_create_usage_page(dir.path().c_str(), page), 0);
  const Child dying = testing::spawn_child("", dir.path(), "");
  const Child staying = testing::spawn_child("", dir.path(), "");
  ASSERT_TRUE(dying.ok && staying.ok);
  ASSERT_EQ(share_folder::read_usage_page(dir.path() + "/usage").live_owners().size(), 2u);
  const tessera_watch_event exit = event_for(TESSERA_WATCH_EXIT, dying.pid);

  StaticShareResolver resolver({share_at(dir.path(), {})});
  RecordingFindings findings;
  SimulatedClock clock;
  ProcessWatcher watcher(resolver, findings, clock, nullptr);
  ASSERT_TRUE(watcher.refresh_shares().is_ok());
  testing::reap(dying.pid);
  tessera_watch_event seen = exit;
  seen.timestamp_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                (clock.now() - std::chrono::milliseconds(3)).time_since_epoch())
                                .count());
  watcher.handle(seen);

  EXPECT_EQ(share_folder::read_usage_page(dir.path() + "/usage").live_owners(),
            std::vector<uint64_t>{staying.owner});
  EXPECT_EQ(share::share_usage(*page, 0), 1u << 20);  // the staying process's reservation
  const ProcessWatcherCounters counters = watcher.counters();
  EXPECT_EQ(counters.exits, 1u);
  EXPECT_EQ(counters.slots_reclaimed, 1u);
  ASSERT_TRUE(counters.last_reclaim_latency.has_value());
  EXPECT_EQ(*counters.last_reclaim_latency, std::chrono::milliseconds(3));
  // The same exit again, and an exit of a process without a slot: nothing more is cleared.
  watcher.handle(seen);
  watcher.handle(event_for(TESSERA_WATCH_EXIT, getpid()));
  EXPECT_EQ(watcher.counters().slots_reclaimed, 1u);
  EXPECT_EQ(share_folder::read_usage_page(dir.path() + "/usage").live_owners(),
            std::vector<uint64_t>{staying.owner});
  testing::reap(staying.pid);
  share::unmap_usage_page(page);
}

TEST(ProcessWatcher, ATruncatedUsagePageIsAnErrorNotACrash) {
  WatchTempDir dir;
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::open_or_create_usage_page(dir.path().c_str(), page), 0);
  share::unmap_usage_page(page);
  const Child dying = testing::spawn_child("", dir.path(), "");
  ASSERT_TRUE(dying.ok);
  const tessera_watch_event exit = event_for(TESSERA_WATCH_EXIT, dying.pid);
  testing::reap(dying.pid);

  StaticShareResolver resolver({share_at(dir.path(), {})});
  RecordingFindings findings;
  SimulatedClock clock;
  ProcessWatcher watcher(resolver, findings, clock, nullptr);
  ASSERT_TRUE(watcher.refresh_shares().is_ok());
  watcher.handle(event_for(TESSERA_WATCH_EXIT, getpid()));     // maps the page
  ASSERT_EQ(truncate((dir.path() + "/usage").c_str(), 0), 0);  // what a tenant may do
  watcher.handle(exit);
  EXPECT_EQ(watcher.counters().exits, 2u);
  EXPECT_EQ(watcher.counters().slots_reclaimed, 0u);
}

TEST(ProcessWatcher, AnUnshimmedDeviceOpenInAShareIsOneFindingWithItsPid) {
  WatchTempDir dir;
  const Child opener = testing::spawn_child("", "", "");
  ASSERT_TRUE(opener.ok);
  StaticShareResolver resolver({share_at(dir.path(), {77})});
  RecordingFindings findings;
  SimulatedClock clock;
  ProcessWatcher watcher(resolver, findings, clock, nullptr);
  ASSERT_TRUE(watcher.refresh_shares().is_ok());

  tessera_watch_event open = event_for(TESSERA_WATCH_DEVICE_OPEN, opener.pid);
  open.watched_cgroup_id = 77;
  open.device_major = 195;
  open.device_minor = 0;
  watcher.handle(open);
  open.device_minor = 255;  // nvidiactl after nvidia0: the same process, not a second finding
  watcher.handle(open);

  const std::vector<Finding> seen = findings.findings();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, FindingKind::kUnshimmedProcess);
  EXPECT_EQ(seen[0].host_pid, opener.pid);
  EXPECT_EQ(seen[0].share, "share-a");
  EXPECT_EQ(seen[0].claim_uid, "uid-1");
  EXPECT_NE(seen[0].detail.find("195:0"), std::string::npos) << seen[0].detail;
  EXPECT_EQ(watcher.counters().device_opens, 2u);
  testing::reap(opener.pid);
}

TEST(ProcessWatcher, NoFindingOutsideAShareOrWithTheShimMapped) {
  WatchTempDir dir;
  std::ofstream(dir.path() + "/libvgpu.so") << std::string(4096, '\0');
  const Child outside = testing::spawn_child("", "", "");
  const Child shimmed = testing::spawn_child("", "", "", dir.path() + "/libvgpu.so");
  ASSERT_TRUE(outside.ok && shimmed.ok);
  StaticShareResolver resolver({share_at(dir.path(), {77})});
  RecordingFindings findings;
  SimulatedClock clock;
  ProcessWatcher watcher(resolver, findings, clock, nullptr);
  ASSERT_TRUE(watcher.refresh_shares().is_ok());

  tessera_watch_event open = event_for(TESSERA_WATCH_DEVICE_OPEN, outside.pid);
  open.watched_cgroup_id = 0;  // in no watched cgroup
  open.cgroup_id = 5;
  open.device_major = 195;
  watcher.handle(open);
  open = event_for(TESSERA_WATCH_DEVICE_OPEN, shimmed.pid);
  open.watched_cgroup_id = 77;
  open.device_major = 195;
  watcher.handle(open);
  EXPECT_TRUE(findings.findings().empty());
  EXPECT_EQ(watcher.counters().device_opens, 2u);
  testing::reap(outside.pid);
  testing::reap(shimmed.pid);
}

TEST(ShareFolderResolver, ReadsAProcessesV2CgroupFromProcAndTheUnifiedHierarchy) {
  WatchTempDir dir;
  const std::string proc = dir.path() + "/proc", unified = dir.path() + "/unified";
  std::filesystem::create_directories(proc + "/123");
  std::filesystem::create_directories(proc + "/124");
  std::filesystem::create_directories(proc + "/125");
  std::filesystem::create_directories(unified + "/kubepods/pod1/ctr");
  std::ofstream(unified + "/cgroup.controllers") << "cpu memory\n";
  std::ofstream(proc + "/123/cgroup") << "4:memory:/kubepods/pod1/ctr\n0::/kubepods/pod1/ctr\n";
  std::ofstream(proc + "/124/cgroup") << "4:memory:/kubepods/pod1/ctr\n";  // v1 only
  std::ofstream(proc + "/125/cgroup") << "0::/\n";                         // the root
  struct stat info {};
  ASSERT_EQ(stat((unified + "/kubepods/pod1/ctr").c_str(), &info), 0);
  EXPECT_EQ(process_cgroup_v2_id(proc, 123, {unified}), info.st_ino);
  EXPECT_EQ(process_cgroup_v2_id(proc, 124, {unified}), 0u);
  EXPECT_EQ(process_cgroup_v2_id(proc, 125, {unified}), 0u);
  EXPECT_EQ(process_cgroup_v2_id(proc, 126, {unified}), 0u);     // gone
  EXPECT_EQ(process_cgroup_v2_id(proc, 123, {dir.path()}), 0u);  // no v2 mount there
}

TEST(ShareFolderResolver, TellsACgroupV1OnlyHostFromUnifiedAndHybridOnes) {
  WatchTempDir dir;
  std::vector<std::string> lines;
  log::Options capture;
  capture.sink = [&lines](std::string_view line) { lines.emplace_back(line); };
  log::configure(std::move(capture));
  auto roots_of = [&](const std::string& host) {
    const std::string cgroup = dir.path() + "/" + host + "/sys/fs/cgroup";
    return std::vector<std::string>{cgroup + "/unified", cgroup};
  };
  // cgroup v2: the unified hierarchy at /sys/fs/cgroup itself.
  std::filesystem::create_directories(dir.path() + "/v2/sys/fs/cgroup/kubepods.slice");
  std::ofstream(dir.path() + "/v2/sys/fs/cgroup/cgroup.controllers") << "cpu memory pids\n";
  // Hybrid: v1 controllers, the unified hierarchy at /sys/fs/cgroup/unified.
  for (const char* controller : {"memory", "cpu,cpuacct", "systemd", "unified"})
    std::filesystem::create_directories(dir.path() + "/hybrid/sys/fs/cgroup/" + controller);
  std::ofstream(dir.path() + "/hybrid/sys/fs/cgroup/unified/cgroup.controllers") << "\n";
  // cgroup v1 only: controllers' folders (a tmpfs at /sys/fs/cgroup), no unified hierarchy; a
  // folder named cgroup.controllers is no such file.
  for (const char* controller : {"memory", "cpu,cpuacct", "systemd", "cgroup.controllers"})
    std::filesystem::create_directories(dir.path() + "/v1/sys/fs/cgroup/" + controller);

  EXPECT_TRUE(has_unified_cgroup_hierarchy(roots_of("v2")));
  EXPECT_TRUE(has_unified_cgroup_hierarchy(roots_of("hybrid")));
  EXPECT_FALSE(has_unified_cgroup_hierarchy(roots_of("v1")));
  EXPECT_FALSE(has_unified_cgroup_hierarchy(roots_of("no-such-host")));

  EXPECT_FALSE(warn_if_cgroup_v1_only(roots_of("v2")));
  EXPECT_FALSE(warn_if_cgroup_v1_only(roots_of("hybrid")));
  EXPECT_TRUE(lines.empty());
  EXPECT_TRUE(warn_if_cgroup_v1_only(roots_of("v1")));
  log::configure(log::Options{});
  ASSERT_EQ(lines.size(), 1u);  // one line, saying what does not work and what covers it
  EXPECT_NE(lines[0].find(" warn "), std::string::npos) << lines[0];
  EXPECT_NE(
      lines[0].find("cgroup v1 host: the process watcher's device-open check needs cgroup v2"),
      std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("the periodic out-of-band check finds unshimmed GPU processes instead"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find(roots_of("v1")[1]), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("failCgroupV1"), std::string::npos) << lines[0];
}

TEST(ShareFolderResolver, ListsTheShareFoldersAndWhetherTheirProcessesAreLocated) {
  WatchTempDir dir;
  const std::string with_process = dir.path() + "/share-p", idle = dir.path() + "/share-i";
  std::filesystem::create_directories(with_process);
  std::filesystem::create_directories(idle);
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::open_or_create_usage_page(idle.c_str(), page), 0);
  share::unmap_usage_page(page);
  const Child child = testing::spawn_child("", with_process, "");
  ASSERT_TRUE(child.ok);
  // This test's processes are in no v2 cgroup below /sys/fs/cgroup's roots of a fake layout.
  ShareFolderResolver resolver({dir.path(), "/proc", {dir.path() + "/no-cgroup-mount"}});
  resolver.refresh();
  std::vector<WatchedShare> shares = resolver.shares();
  std::sort(shares.begin(), shares.end(),
            [](const WatchedShare& a, const WatchedShare& b) { return a.id < b.id; });
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].id, "share-i");
  EXPECT_EQ(shares[0].usage_path, idle + "/usage");
  EXPECT_FALSE(shares[0].report_all_exits);  // no process: nothing to reclaim
  EXPECT_EQ(shares[1].id, "share-p");
  EXPECT_TRUE(shares[1].cgroup_ids.empty());
  EXPECT_TRUE(shares[1].report_all_exits);  // its process has no cgroup the kernel can filter on
  EXPECT_FALSE(resolver.share_of(child.pid, 0, 0).has_value());
  testing::reap(child.pid);
}

}  // namespace
}  // namespace tessera::agent
