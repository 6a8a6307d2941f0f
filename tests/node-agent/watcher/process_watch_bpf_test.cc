// The process watcher in the kernel (as root, where BPF loads): a SIGKILLed share process's slot
// is cleared by its exit event (the watcher has no other path; the time it took is printed, not
// judged), and an open of a fake nvidia node by an unshimmed process in a test cgroup is a
// Finding. Where the kernel refuses BPF, the test says why and checks the fallback:
// the periodic checks see the dead owner through /proc.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "clock/clock.h"
#include "tessera/share_folder/snapshot.h"
#include "usage/share_processes.h"
#include "watch_fixture.h"
#include "watcher/process_watch_program.h"
#include "watcher/process_watcher.h"
#include "watcher/share_folder_resolver.h"

namespace tessera::agent {
namespace {

using testing::Child;
using testing::RecordingFindings;
using testing::WatchTempDir;

// How long a test waits for a killed process's slot to be cleared: liveness only (the exit event
// clears it in about a millisecond; nothing else in these tests clears a slot).
constexpr auto kReclaimLiveness = std::chrono::seconds(30);

constexpr char kUnifiedRoot[] = "/sys/fs/cgroup/unified";

// A v2 cgroup of the test's own; removed (after its processes are gone) when it goes.
class TestCgroup {
 public:
  TestCgroup() {
    for (const char* root : {kUnifiedRoot, "/sys/fs/cgroup"}) {
      if (access((std::string(root) + "/cgroup.procs").c_str(), W_OK) != 0) continue;
      if (access((std::string(root) + "/cgroup.controllers").c_str(), R_OK) != 0) continue;
      const std::string path = std::string(root) + "/tessera-watch-" + std::to_string(getpid());
      if (mkdir(path.c_str(), 0755) != 0) continue;
      path_ = path;
      struct stat info {};
      if (stat(path.c_str(), &info) == 0) id_ = info.st_ino;  // a v2 cgroup's id is its inode
      return;
    }
  }
  ~TestCgroup() {
    if (!path_.empty()) rmdir(path_.c_str());
  }
  bool usable() const { return id_ != 0; }
  uint64_t id() const { return id_; }
  std::string procs() const { return path_ + "/cgroup.procs"; }

 private:
  std::string path_;
  uint64_t id_ = 0;
};

struct Loaded {
  std::unique_ptr<ProcessWatchProgram> program;
  std::string why_not;
};

Loaded load_program() {
  ProcessWatchProgram::Options options;
  Result<std::unique_ptr<ProcessWatchProgram>> loaded = ProcessWatchProgram::load(options);
  if (!loaded.is_ok()) return {nullptr, loaded.status().message()};
  return {std::move(loaded).value(), ""};
}

WatchedShare test_share(const std::string& dir, uint64_t cgroup) {
  WatchedShare share;
  share.id = "share-bpf";
  share.usage_path = dir + "/usage";
  share.claim_uid = "uid-bpf";
  share.cgroup_ids = {cgroup};
  return share;
}

// The fallback (no BPF): a killed process's slot stays until a periodic check (the shim's
// reclaim, the agent's 1 s /proc checks) finds its owner dead: its owner word is in the page and
// no live process has it.
void check_fallback(const std::string& why) {
  std::printf("process watcher: BPF cannot load here (%s); testing the periodic fallback\n",
              why.c_str());
  EXPECT_FALSE(why.empty());
  WatchTempDir dir;
  const Child child = testing::spawn_child("", dir.path(), "");
  ASSERT_TRUE(child.ok);
  EXPECT_EQ(live_process_owners().count(child.owner), 1u);
  testing::reap(child.pid);
  EXPECT_EQ(share_folder::read_usage_page(dir.path() + "/usage").live_owners(),
            std::vector<uint64_t>{child.owner});
  EXPECT_EQ(live_process_owners().count(child.owner), 0u);
}

TEST(ProcessWatchBpf, LoadSaysWhyWithoutKernelBtf) {
  ProcessWatchProgram::Options options;
  options.btf_path = "/nonexistent/vmlinux";
  Result<std::unique_ptr<ProcessWatchProgram>> loaded = ProcessWatchProgram::load(options);
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kUnavailable);
  if (process_watch_built() && geteuid() == 0) {
    EXPECT_NE(loaded.status().message().find("/nonexistent/vmlinux"), std::string::npos)
        << loaded.status().message();
  }
}

TEST(ProcessWatchBpf, AKilledShareProcessSlotIsClearedByItsExitEvent) {
  Loaded loaded = load_program();
  if (!loaded.program) return check_fallback(loaded.why_not);
  TestCgroup cgroup;
  if (!cgroup.usable()) GTEST_SKIP() << "no writable cgroup v2 hierarchy to make a test cgroup in";
  WatchTempDir dir;
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::open_or_create_usage_page(dir.path().c_str(), page), 0);
  share::unmap_usage_page(page);

  StaticShareResolver resolver({test_share(dir.path(), cgroup.id())});
  RecordingFindings findings;
  ProcessWatcher watcher(resolver, findings, real_clock(), loaded.program.get());
  ASSERT_TRUE(watcher.refresh_shares().is_ok());
  ASSERT_TRUE(
      loaded.program->start([&](const tessera_watch_event& e) { watcher.handle(e); }).is_ok());

  const Child child = testing::spawn_child(cgroup.procs(), dir.path(), "");
  ASSERT_TRUE(child.ok);
  const std::string usage = dir.path() + "/usage";
  ASSERT_EQ(share_folder::read_usage_page(usage).live_owners(), std::vector<uint64_t>{child.owner});

  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(child.pid, SIGKILL), 0);
  while (!share_folder::read_usage_page(usage).live_owners().empty() &&
         std::chrono::steady_clock::now() - killed_at < kReclaimLiveness) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const auto cleared_at = std::chrono::steady_clock::now();
  const auto latency = std::chrono::duration<double, std::milli>(cleared_at - killed_at);
  std::printf("process watcher: SIGKILL -> slot clear in %.3f ms (open hook %s)\n", latency.count(),
              loaded.program->open_hook().c_str());
  if (const auto kernel = watcher.counters().last_reclaim_latency)
    std::printf("process watcher: kernel event -> slot clear in %.3f ms\n",
                std::chrono::duration<double, std::milli>(*kernel).count());
  EXPECT_TRUE(share_folder::read_usage_page(usage).live_owners().empty());
  EXPECT_EQ(watcher.counters().slots_reclaimed, 1u);
  EXPECT_TRUE(watcher.counters().last_reclaim_latency.has_value());
  testing::reap(child.pid);
  loaded.program->stop();
}

// The same through the resolver the agent runs with: the share's cgroup learned from the process
// that owns its slot, the kernel filter set from it.
TEST(ProcessWatchBpf, TheAgentsResolverWatchesTheCgroupOfASlotOwner) {
  Loaded loaded = load_program();
  if (!loaded.program) return check_fallback(loaded.why_not);
  TestCgroup cgroup;
  if (!cgroup.usable()) GTEST_SKIP() << "no writable cgroup v2 hierarchy to make a test cgroup in";
  WatchTempDir shares;
  const std::string folder = shares.path() + "/share-agent";
  ASSERT_EQ(mkdir(folder.c_str(), 0755), 0);
  const Child child = testing::spawn_child(cgroup.procs(), folder, "");
  ASSERT_TRUE(child.ok);

  ShareFolderResolver resolver(ShareFolderResolver::Options{shares.path()});
  resolver.refresh();
  ASSERT_EQ(resolver.shares().size(), 1u);
  EXPECT_EQ(resolver.shares()[0].cgroup_ids, std::vector<uint64_t>{cgroup.id()});
  EXPECT_FALSE(resolver.shares()[0].report_all_exits);
  RecordingFindings findings;
  ProcessWatcher watcher(resolver, findings, real_clock(), loaded.program.get());
  ASSERT_TRUE(watcher.refresh_shares().is_ok());
  ASSERT_TRUE(
      loaded.program->start([&](const tessera_watch_event& e) { watcher.handle(e); }).is_ok());

  const std::string usage = folder + "/usage";
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(child.pid, SIGKILL), 0);
  while (!share_folder::read_usage_page(usage).live_owners().empty() &&
         std::chrono::steady_clock::now() - killed_at < kReclaimLiveness) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const auto latency =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed_at);
  std::printf("process watcher (agent resolver): SIGKILL -> slot clear in %.3f ms\n",
              latency.count());
  EXPECT_TRUE(share_folder::read_usage_page(usage).live_owners().empty());
  EXPECT_EQ(watcher.counters().slots_reclaimed, 1u);
  testing::reap(child.pid);
  loaded.program->stop();
}

TEST(ProcessWatchBpf, AnUnshimmedOpenOfAFakeNvidiaNodeInTheCgroupIsAFinding) {
  Loaded loaded = load_program();
  if (!loaded.program) return check_fallback(loaded.why_not);
  TestCgroup cgroup;
  if (!cgroup.usable()) GTEST_SKIP() << "no writable cgroup v2 hierarchy to make a test cgroup in";
  WatchTempDir dir;
  // The node: major 195 as /dev/nvidia*. The LSM hook sees its open before the driver does; the
  // sys_exit hook sees only opens that succeed, and without an nvidia driver this kernel has no
  // driver for 195 (ENXIO): there the fake node borrows /dev/null's numbers (1:3), watched for
  // the test, so the open succeeds and what is tested is the same path with another major.
  const bool lsm = loaded.program->open_hook() == "lsm/file_open";
  const std::string node = dir.path() + "/nvidia0";
  const dev_t numbers = lsm ? makedev(195, 0) : makedev(1, 3);
  ASSERT_EQ(mknod(node.c_str(), S_IFCHR | 0666, numbers), 0) << std::strerror(errno);
  if (!lsm) {
    ASSERT_TRUE(loaded.program->watch_device_major(1).is_ok());
  }
  std::ofstream(dir.path() + "/libvgpu.so") << std::string(4096, '\0');

  StaticShareResolver resolver({test_share(dir.path(), cgroup.id())});
  RecordingFindings findings;
  ProcessWatcher watcher(resolver, findings, real_clock(), loaded.program.get());
  ASSERT_TRUE(watcher.refresh_shares().is_ok());
  ASSERT_TRUE(
      loaded.program->start([&](const tessera_watch_event& e) { watcher.handle(e); }).is_ok());

  const Child outside = testing::spawn_child("", "", node);  // in no share
  const Child shimmed = testing::spawn_child(cgroup.procs(), "", node, dir.path() + "/libvgpu.so");
  const Child unshimmed = testing::spawn_child(cgroup.procs(), "", node);
  ASSERT_TRUE(outside.ok && shimmed.ok && unshimmed.ok);
  std::printf("process watcher: the fake node's open: %s\n",
              unshimmed.open_error ? std::strerror(unshimmed.open_error) : "opened");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (findings.findings().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // any finding for the other two
  const std::vector<Finding> seen = findings.findings();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, FindingKind::kUnshimmedProcess);
  EXPECT_EQ(seen[0].host_pid, unshimmed.pid);
  EXPECT_EQ(seen[0].share, "share-bpf");
  std::printf("process watcher: %s\n", seen[0].detail.c_str());
  loaded.program->stop();
  testing::reap(outside.pid);
  testing::reap(shimmed.pid);
  testing::reap(unshimmed.pid);
}

}  // namespace
}  // namespace tessera::agent
