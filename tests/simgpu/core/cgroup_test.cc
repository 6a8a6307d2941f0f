// Cgroup v2 paths of the simulated R615 driver's memory partitions: the pure parsers.
#include "core/cgroup.h"

#include <gtest/gtest.h>

namespace simgpu {
namespace {

TEST(SimCgroup, ProcCgroupGivesTheV2Line) {
  EXPECT_EQ(parse_proc_cgroup("9:name=systemd:/\n4:memory:/x\n0::/kubepods/pod1/ctr\n"),
            "/kubepods/pod1/ctr");
  EXPECT_EQ(parse_proc_cgroup("0::/"), "/");
  EXPECT_FALSE(parse_proc_cgroup("4:memory:/x\n1:cpu:/\n"));
  EXPECT_FALSE(parse_proc_cgroup(""));
}

TEST(SimCgroup, MountinfoListsEveryCgroup2MountAndDecodesEscapes) {
  const char* mountinfo =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 master:2 - cgroup2 cgroup2 rw\n"
      "45 27 0:38 /a /tmp/my\\040mount rw,relatime - cgroup2 none rw\n"
      "46 27 0:39 / /mnt/other rw - ext4 /dev/sda1 rw\n";
  const std::vector<Cgroup2Mount> mounts = parse_cgroup2_mounts(mountinfo);
  ASSERT_EQ(mounts.size(), 2u);
  EXPECT_EQ(mounts[0].mount_point, "/sys/fs/cgroup/unified");
  EXPECT_EQ(mounts[0].root, "/");
  EXPECT_EQ(mounts[1].mount_point, "/tmp/my mount");
  EXPECT_EQ(mounts[1].root, "/a");
  EXPECT_TRUE(parse_cgroup2_mounts("garbage\n\n1 2 3\n").empty());
}

TEST(SimCgroup, DirectoriesResolveRelativeToTheHierarchyRootWhereverItIsMounted) {
  const std::vector<Cgroup2Mount> mounts = {
      {"/sys/fs/cgroup", "/"}, {"/tmp/cg", "/"}, {"/tmp/cg/deeper", "/other"}, {"/mnt/a", "/a"}};
  EXPECT_EQ(cgroup_of_directory("/sys/fs/cgroup/x/y", mounts), "/x/y");
  EXPECT_EQ(cgroup_of_directory("/tmp/cg/x/y", mounts), "/x/y");  // the same cgroup
  EXPECT_EQ(cgroup_of_directory("/sys/fs/cgroup", mounts), "/");
  EXPECT_EQ(cgroup_of_directory("/mnt/a/b", mounts), "/a/b");
  EXPECT_EQ(cgroup_of_directory("/mnt/a", mounts), "/a");
  // The deepest mount that holds the directory decides.
  EXPECT_EQ(cgroup_of_directory("/tmp/cg/deeper/z", mounts), "/other/z");
  EXPECT_FALSE(cgroup_of_directory("/tmp/cgx", mounts));
  EXPECT_FALSE(cgroup_of_directory("/home", mounts));
}

TEST(SimCgroup, AncestryComparesWholeComponents) {
  EXPECT_TRUE(is_same_or_ancestor("/", "/a/b"));
  EXPECT_TRUE(is_same_or_ancestor("/a", "/a"));
  EXPECT_TRUE(is_same_or_ancestor("/a", "/a/b"));
  EXPECT_FALSE(is_same_or_ancestor("/a", "/ab"));
  EXPECT_FALSE(is_same_or_ancestor("/a/b", "/a"));
}

TEST(SimCgroup, PathsAreNormalised) {
  EXPECT_EQ(normalise_absolute_path("/a//b/./c/../d/"), "/a/b/d");
  EXPECT_EQ(normalise_absolute_path("/.."), "/");
  EXPECT_EQ(normalise_absolute_path("/"), "/");
  EXPECT_FALSE(normalise_absolute_path("a/b"));
}

TEST(SimCgroup, ReadsThisProcessAndNoOther) {
  // The kernel prints the `0::` line once a cgroup2 hierarchy has been mounted anywhere.
  if (const std::optional<std::string> own = read_process_cgroup(0)) {
    EXPECT_TRUE(own->starts_with('/')) << *own;
  }
  EXPECT_FALSE(read_process_cgroup(-5));
}

}  // namespace
}  // namespace simgpu
