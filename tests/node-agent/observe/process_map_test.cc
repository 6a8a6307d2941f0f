#include "observe/process_map.h"

#include <gtest/gtest.h>

#include "enforcement/fake_node.h"

namespace tessera::agent {
namespace {

constexpr char kUid[] = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

TEST(ProcessMap, PodUidFromEitherKubeletCgroupDriver) {
  // cgroupfs driver.
  EXPECT_EQ(pod_uid_of_cgroup_path(std::string("/kubepods/besteffort/pod") + kUid + "/abc"), kUid);
  EXPECT_EQ(pod_uid_of_cgroup_path(std::string("/kubepods/pod") + kUid + "/abc"), kUid);
  // systemd driver: '-' in the UID written as '_'.
  EXPECT_EQ(pod_uid_of_cgroup_path("/kubepods.slice/kubepods-burstable.slice/"
                                   "kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0."
                                   "slice/cri-containerd-abc.scope"),
            kUid);
  EXPECT_EQ(pod_uid_of_cgroup_path("/kubepods.slice/"
                                   "kubepods-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/x"),
            kUid);
  // Under another root (a kubelet with its own cgroup root, a test's tree).
  EXPECT_EQ(
      pod_uid_of_cgroup_path(std::string("/tessera-test/kubepods/besteffort/pod") + kUid + "/ctr"),
      kUid);
  // Not a pod: host processes, look-alikes.
  EXPECT_EQ(pod_uid_of_cgroup_path("/user.slice/user-0.slice/session-1.scope"), std::nullopt);
  EXPECT_EQ(pod_uid_of_cgroup_path("/kubepods/besteffort/podnot-a-uid/x"), std::nullopt);
  EXPECT_EQ(pod_uid_of_cgroup_path("/kubepods/besteffort/pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0"),
            std::nullopt);
  EXPECT_EQ(pod_uid_of_cgroup_path("/"), std::nullopt);
}

TEST(ProcessMap, PodUidFromV1AndV2CgroupLines) {
  EXPECT_EQ(pod_uid_of_cgroup_file(testing::pod_cgroup_file(kUid)), kUid);
  // Only the v2 line names it (a pure v2 host).
  EXPECT_EQ(pod_uid_of_cgroup_file(std::string("0::/kubepods/burstable/pod") + kUid + "/c\n"),
            kUid);
  // A v1 line with named hierarchy and ':' in no path.
  EXPECT_EQ(pod_uid_of_cgroup_file(std::string("1:name=systemd:/init.scope\n3:pids:/kubepods/pod") +
                                   kUid + "/c\n"),
            kUid);
  EXPECT_EQ(pod_uid_of_cgroup_file("0::/init.scope\n"), std::nullopt);
  EXPECT_EQ(pod_uid_of_cgroup_file("garbage without colons"), std::nullopt);
}

TEST(ProcessMap, KnownPidsCostOneStatReadAndReusedPidsAreReadAgain) {
  testing::FakeProc proc(testing::fresh_folder("process-map"));
  proc.add(100, 5000, testing::pod_cgroup_file(kUid));
  proc.add(101, 6000);
  ProcessMap map(proc.root().string());
  map.begin_pass();
  const ProcessFacts* a = map.lookup(100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->start_time, 5000u);
  EXPECT_EQ(a->owner, testing::FakeProc::owner(100, 5000));
  EXPECT_EQ(a->pod_uid, kUid);
  const ProcessFacts* b = map.lookup(101);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->pod_uid, std::nullopt);
  EXPECT_EQ(map.lookup(102), nullptr);  // no such process
  map.end_pass();
  EXPECT_EQ(map.full_reads(), 2u);

  // Next pass: the same processes are not read again in full.
  map.begin_pass();
  ASSERT_NE(map.lookup(100), nullptr);
  EXPECT_EQ(map.full_reads(), 2u);
  // Pid 100 exits and is reused by a process of no pod: read again, a new owner.
  proc.remove(100);
  proc.add(100, 7000);
  map.end_pass();
  map.begin_pass();
  const ProcessFacts* reused = map.lookup(100);
  ASSERT_NE(reused, nullptr);
  EXPECT_EQ(reused->owner, testing::FakeProc::owner(100, 7000));
  EXPECT_EQ(reused->pod_uid, std::nullopt);
  EXPECT_EQ(map.full_reads(), 3u);
  // Gone: nullptr; live_owners lists the live ones.
  proc.remove(101);
  EXPECT_EQ(map.lookup(101), nullptr);
  const auto& live = map.live_owners();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live.begin()->second, 100);
  std::filesystem::remove_all(proc.root());
}

}  // namespace
}  // namespace tessera::agent
