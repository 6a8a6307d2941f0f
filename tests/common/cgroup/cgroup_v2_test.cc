// tessera/cgroup/cgroup_v2.h: mountinfo parsing as the kernel writes it (show_mountinfo in
// fs/proc_namespace.c: escapes, optional fields before "-"), the 0:: line, mapping a cgroup path
// to a directory under a mount of the whole hierarchy or of a subtree; and, as root, a real
// cgroup2 mount with a cgroup of our own (this machine mounts cgroup v1, so the test mounts v2).
#include "tessera/cgroup/cgroup_v2.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tessera::cgroup {
namespace {

TEST(Cgroup2Mounts, FindsEveryUnifiedMountAndSkipsV1) {
  const std::string mountinfo =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "36 31 0:33 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw\n"
      "90 22 0:33 /kubepods/pod1 /run/my\\040cgroups rw master:3 shared:4 - cgroup2 none rw\n";
  Result<std::vector<Mount>> mounts = parse_cgroup2_mounts(mountinfo);
  ASSERT_TRUE(mounts.is_ok()) << mounts.status().message();
  ASSERT_EQ(mounts->size(), 2u);
  EXPECT_EQ((*mounts)[0], (Mount{"/", "/sys/fs/cgroup/unified"}));
  EXPECT_EQ((*mounts)[1], (Mount{"/kubepods/pod1", "/run/my cgroups"}));
  EXPECT_TRUE(parse_cgroup2_mounts("")->empty()) << "no cgroup2: none, not an error";
  Result<std::vector<Mount>> broken = parse_cgroup2_mounts("36 31 0:33 /\n");
  ASSERT_FALSE(broken.is_ok());
  EXPECT_NE(broken.status().message().find("mountinfo line 1 is not a mount"), std::string::npos);
}

TEST(ProcessCgroup, IsTheUnifiedLine) {
  EXPECT_EQ(*parse_process_cgroup("4:memory:/a\n0::/kubepods/pod1/c1\n"), "/kubepods/pod1/c1");
  EXPECT_EQ(*parse_process_cgroup("0::/\n"), "/");
  EXPECT_EQ(parse_process_cgroup("4:memory:/a\n").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(parse_process_cgroup("0::/gone (deleted)\n").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(parse_process_cgroup("0::relative\n").status().code(), StatusCode::kInvalidArgument);
  Result<std::string> own = process_cgroup(getpid());
  EXPECT_TRUE(own.is_ok() || own.status().code() == StatusCode::kNotFound)
      << own.status().message();
}

TEST(DirectoryOf, MapsThePathUnderTheMountThatHoldsIt) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cgroup-map-" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "whole/kubepods/pod1/c1");
  std::filesystem::create_directories(root / "sub/c1");
  const std::vector<Mount> mounts = {{"/other", (root / "elsewhere").string()},
                                     {"/kubepods/pod1", (root / "sub").string()},
                                     {"/", (root / "whole").string()}};
  EXPECT_EQ(*directory_of(mounts, "/kubepods/pod1/c1"), (root / "sub/c1").string());
  EXPECT_EQ(*directory_of(mounts, "/kubepods/pod1"), (root / "sub").string());
  // /kubepods/pod10 is not under /kubepods/pod1: the whole hierarchy's mount shows it.
  std::filesystem::create_directories(root / "whole/kubepods/pod10");
  EXPECT_EQ(*directory_of(mounts, "/kubepods/pod10"), (root / "whole/kubepods/pod10").string());
  Result<std::string> missing = directory_of(mounts, "/nowhere");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("cgroup /nowhere is under no cgroup2 mount"),
            std::string::npos);
  std::filesystem::remove_all(root);
}

// As root: mount cgroup2, create a cgroup, move a child into it, read the child's 0:: line back
// and find its directory from this process's own mountinfo.
TEST(OwnedCgroup, HoldsAProcessAndIsRemovedWhenEmpty) {
  if (geteuid() != 0) GTEST_SKIP() << "creating cgroups needs root";
  const std::string mount_point =
      (std::filesystem::temp_directory_path() / ("cgroup2-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(mount_point);
  if (::mount("none", mount_point.c_str(), "cgroup2", 0, nullptr) != 0) {
    std::filesystem::remove(mount_point);
    GTEST_SKIP() << "cannot mount cgroup2 here: " << std::strerror(errno);
  }
  Result<std::vector<Mount>> mounts = cgroup2_mounts();
  ASSERT_TRUE(mounts.is_ok()) << mounts.status().message();
  bool listed = false;
  for (const Mount& mount : *mounts) listed = listed || mount.mount_point == mount_point;
  EXPECT_TRUE(listed) << "our mount is in /proc/self/mountinfo";
  std::string name = "tessera-test-" + std::to_string(getpid());
  {
    Result<OwnedCgroup> owned = OwnedCgroup::create(mount_point, name);
    ASSERT_TRUE(owned.is_ok()) << owned.status().message();
    const pid_t child = fork();
    if (child == 0) {
      pause();
      _exit(0);
    }
    ASSERT_TRUE(owned->add(child).is_ok());
    Result<std::string> path = process_cgroup(child);
    ASSERT_TRUE(path.is_ok()) << path.status().message();
    EXPECT_TRUE(path->ends_with("/" + name)) << *path;
    // The hierarchy may be mounted elsewhere too (/sys/fs/cgroup/unified on a hybrid machine): the
    // directory found is the same cgroup, whichever mount shows it.
    Result<std::string> directory = directory_of(*mounts, *path);
    ASSERT_TRUE(directory.is_ok()) << directory.status().message();
    struct stat found = {};
    struct stat ours = {};
    ASSERT_EQ(::stat(directory->c_str(), &found), 0);
    ASSERT_EQ(::stat(owned->directory().c_str(), &ours), 0);
    EXPECT_EQ(found.st_dev, ours.st_dev) << *directory;
    EXPECT_EQ(found.st_ino, ours.st_ino) << *directory;
    // A cgroup with a member cannot be removed: the error names it, and it stays owned.
    OwnedCgroup busy = std::move(*owned);
    const Status refused = busy.remove();
    EXPECT_FALSE(refused.is_ok());
    EXPECT_NE(refused.message().find(busy.directory()), std::string::npos) << refused.message();
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    EXPECT_TRUE(busy.remove().is_ok());
    EXPECT_FALSE(std::filesystem::exists(mount_point + "/" + name));
  }
  EXPECT_FALSE(OwnedCgroup::create(mount_point, "../escape").is_ok());
  ::umount(mount_point.c_str());
  std::filesystem::remove(mount_point);
}

}  // namespace
}  // namespace tessera::cgroup
