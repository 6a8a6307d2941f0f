#include "tessera/share_contract.h"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::share {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/tessera-share-contract-XXXXXX";
    if (mkdtemp(pattern)) path_ = pattern;
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

int wait_exit(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ---- owner words
// ---------------------------------------------------------------------------------

uint64_t own_namespace_inode() {
  struct stat info {};
  return stat("/proc/self/ns/pid", &info) == 0 ? info.st_ino : 0;
}

TEST(OwnerWord, OwnProcessFromProc) {
  ProcessIdentity self;
  ASSERT_EQ(read_process_identity("/proc", kSelfPid, self), 0);
  EXPECT_EQ(self.pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(self.pid_namespace, own_namespace_inode());
  uint64_t start_time = 0;
  ASSERT_EQ(read_process_start_time("/proc", getpid(), start_time), 0);
  EXPECT_EQ(self.start_time, start_time);
  EXPECT_EQ(self.owner(), make_owner(self.pid, self.pid_namespace, self.start_time));
  // The same through the pid as /proc numbers it (what the agent does for host processes).
  ProcessIdentity by_pid;
  ASSERT_EQ(read_process_identity("/proc", getpid(), by_pid), 0);
  EXPECT_EQ(by_pid.owner(), self.owner());
  uint64_t pid_namespace = 0;
  ASSERT_EQ(read_pid_namespace("/proc", kSelfPid, pid_namespace), 0);
  EXPECT_EQ(pid_namespace, self.pid_namespace);
}

TEST(OwnerWord, StableForAProcess) {
  ProcessIdentity first;
  ASSERT_EQ(read_process_identity("/proc", kSelfPid, first), 0);
  for (int i = 0; i < 100; ++i) {
    ProcessIdentity again;
    ASSERT_EQ(read_process_identity("/proc", kSelfPid, again), 0);
    ASSERT_EQ(again.owner(), first.owner());
  }
}

TEST(OwnerWord, GoneOrZombieProcessesHaveNone) {
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  if (child == 0) {
    char byte = 0;
    (void)!read(go[0], &byte, 1);
    _exit(0);
  }
  ProcessIdentity live;
  ASSERT_EQ(read_process_identity("/proc", child, live), 0);
  ProcessIdentity self;
  ASSERT_EQ(read_process_identity("/proc", kSelfPid, self), 0);
  EXPECT_NE(live.owner(), self.owner());
  EXPECT_EQ(live.pid, static_cast<uint32_t>(child));
  ASSERT_EQ(write(go[1], "x", 1), 1);
  // Exited, not yet reaped: a zombie holds no GPU memory.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  ProcessIdentity zombie;
  EXPECT_EQ(read_process_identity("/proc", child, zombie), ESRCH);
  uint64_t start_time = 0;
  EXPECT_EQ(read_process_start_time("/proc", child, start_time), ESRCH);
  EXPECT_EQ(wait_exit(child), 0);
  EXPECT_EQ(read_process_identity("/proc", child, zombie), ESRCH);
  EXPECT_EQ(read_process_identity("/proc", 0, zombie), ESRCH);
  EXPECT_EQ(read_process_identity("/proc", -7, zombie), ESRCH);
  EXPECT_EQ(read_process_identity("/nonexistent", getpid(), zombie), ESRCH);
  close(go[0]);
  close(go[1]);
}

// A fake /proc: what the agent sees of a container's processes, and pid reuse.
class FakeProc : public ::testing::Test {
 protected:
  void make(int pid, const std::string& status, const std::string& stat) {
    const fs::path base = fs::path(dir_.path()) / std::to_string(pid);
    fs::create_directories(base / "ns");
    fs::remove(base / "ns" / "pid");
    fs::create_symlink("pid:[4026532999]", base / "ns" / "pid");
    std::ofstream(base / "status") << status;
    std::ofstream(base / "stat") << stat;
  }
  static std::string stat_line(int pid, uint64_t start_time) {
    return std::to_string(pid) + " (a) (b c) S 1 7 7 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 " +
           std::to_string(start_time) + " 1000 ";
  }
  int identity(int pid, ProcessIdentity& out) {
    return read_process_identity(dir_.path(), pid, out);
  }
  TempDir dir_;
};

TEST_F(FakeProc, ContainerProcessIsNamedByItsInnermostPid) {
  make(4242, "Name:\tburn\nState:\tS (sleeping)\nPid:\t4242\nNSpid:\t4242\t90\t7\n",
       stat_line(4242, 987654));
  ProcessIdentity out;
  ASSERT_EQ(identity(4242, out), 0);
  EXPECT_EQ(out.pid, 7u);
  EXPECT_EQ(out.pid_namespace, 4026532999u);
  EXPECT_EQ(out.start_time, 987654u);
  EXPECT_EQ(out.owner(), make_owner(7, 4026532999, 987654));
}

TEST_F(FakeProc, DifferentAfterPidReuse) {
  // The same pid in the same namespace, a later process: another start time, another owner word,
  // so a slot of the dead process is never taken for the new one's.
  const std::string status = "Name:\tx\nState:\tR (running)\nNSpid:\t4242\t7\n";
  make(4242, status, stat_line(4242, 1000));
  ProcessIdentity before;
  ASSERT_EQ(identity(4242, before), 0);
  make(4242, status, stat_line(4242, 1001));
  ProcessIdentity after;
  ASSERT_EQ(identity(4242, after), 0);
  EXPECT_EQ(before.pid, after.pid);
  EXPECT_NE(before.owner(), after.owner());
  EXPECT_EQ(owner_pid(before.owner()), owner_pid(after.owner()));
}

TEST_F(FakeProc, LongLinesBeforeNspidAreSkipped) {
  std::string groups = "Groups:";
  while (groups.size() < 20000) groups += "\t12345";
  make(4242, "Name:\tx\n" + groups + "\nState:\tR (running)\nNSpid:\t4242\t7\n",
       stat_line(4242, 5));
  ProcessIdentity out;
  ASSERT_EQ(identity(4242, out), 0);
  EXPECT_EQ(out.pid, 7u);
}

TEST_F(FakeProc, KernelsWithoutNspidUseThePidLine) {
  make(4242, "Name:\tx\nState:\tR (running)\nPid:\t4242\n", stat_line(4242, 5));
  ProcessIdentity out;
  ASSERT_EQ(identity(4242, out), 0);
  EXPECT_EQ(out.pid, 4242u);
}

TEST_F(FakeProc, UnreadableOrZombieProcessesAreRefused) {
  make(1, "Name:\tdead\nState:\tZ (zombie)\nNSpid:\t1\t8\n", stat_line(1, 5));
  make(2, "Name:\tnopid\nState:\tR (running)\n", stat_line(2, 5));
  make(3, "Name:\tshort\nState:\tR (running)\nNSpid:\t3\n", "3 (x) S 1 2");
  make(4, "Name:\tbig\nState:\tR (running)\nNSpid:\t4\t4194304\n", stat_line(4, 5));
  make(5, "Name:\tz\nState:\tR (running)\nNSpid:\t5\n", "5 (x) Z 1 2 3");
  ProcessIdentity out;
  EXPECT_EQ(identity(1, out), ESRCH);   // State: Z
  EXPECT_EQ(identity(2, out), EPROTO);  // no pid line at all
  EXPECT_EQ(identity(3, out), EPROTO);  // stat cut before field 22
  EXPECT_EQ(identity(4, out), EPROTO);  // more than the 22 bits the owner word holds
  EXPECT_EQ(identity(5, out), ESRCH);   // stat state Z
  EXPECT_EQ(identity(6, out), ESRCH);   // absent
}

TEST_F(FakeProc, AFifoInPlaceOfAProcFileDoesNotBlock) {
  make(4242, "", stat_line(4242, 5));
  const std::string status = dir_ / "4242/status";
  fs::remove(status);
  ASSERT_EQ(mkfifo(status.c_str(), 0666), 0);
  const pid_t child = fork();
  if (child == 0) {
    alarm(5);
    ProcessIdentity out;
    _exit(read_process_identity(dir_.path(), 4242, out) == EINVAL ? 0 : 1);
  }
  EXPECT_EQ(wait_exit(child), 0);
}

// ---- the usage page
// ------------------------------------------------------------------------------

mode_t mode_of(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0 ? info.st_mode : 0;
}

ino_t inode_of(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0 ? info.st_ino : 0;
}

// Names in `dir` other than "usage".
int other_entries(const std::string& dir) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename() != "usage") ++count;
  return count;
}

TEST(UsagePage, CreatedCompleteWithOneModeWhateverTheUmask) {
  TempDir dir;
  const mode_t old_umask = umask(027);
  ASSERT_EQ(create_usage_page(dir.path().c_str()), 0);
  umask(old_umask);
  const std::string path = dir / "usage";
  EXPECT_TRUE(S_ISREG(mode_of(path)));
  EXPECT_EQ(mode_of(path) & 07777, kUsagePageMode);
  EXPECT_EQ(fs::file_size(path), sizeof(UsagePage));
  EXPECT_EQ(other_entries(dir.path()), 0);  // the temporary name is gone
  UsagePage* page = nullptr;
  ASSERT_EQ(map_usage_page(path.c_str(), true, page), 0);
  EXPECT_TRUE(valid_usage_page(*page));
  EXPECT_EQ(page->slot_high_water.load(), 0u);
  unmap_usage_page(page);
}

TEST(UsagePage, AnExistingPageIsKept) {
  TempDir dir;
  UsagePage* page = nullptr;
  ASSERT_EQ(open_or_create_usage_page(dir.path().c_str(), page), 0);
  page->slots[0].owner.store(12345);
  const ino_t inode = inode_of(dir / "usage");
  ASSERT_EQ(create_usage_page(dir.path().c_str()), 0);
  EXPECT_EQ(inode_of(dir / "usage"), inode);
  // A page published by another process while this one prepared its own: that one wins.
  char temporary[1024];
  ASSERT_EQ(prepare_usage_page(dir.path().c_str(), temporary, sizeof temporary), 0);
  EXPECT_EQ(fs::path(temporary).filename().string()[0], '.');
  ASSERT_EQ(publish_usage_page(temporary, (dir / "usage").c_str()), 0);
  EXPECT_EQ(inode_of(dir / "usage"), inode);
  EXPECT_FALSE(fs::exists(temporary));
  UsagePage* again = nullptr;
  ASSERT_EQ(open_or_create_usage_page(dir.path().c_str(), again), 0);
  EXPECT_EQ(again->slots[0].owner.load(), 12345u);
  unmap_usage_page(again);
  unmap_usage_page(page);
}

TEST(UsagePage, ASymlinkAtThePageNameIsRefused) {
  TempDir dir;
  const std::string victim = dir / "host-file";
  std::ofstream(victim) << std::string(sizeof(UsagePage), 'v');
  fs::create_symlink(victim, dir / "usage");
  UsagePage* page = nullptr;
  EXPECT_EQ(map_usage_page((dir / "usage").c_str(), true, page), ELOOP);
  EXPECT_EQ(open_or_create_usage_page(dir.path().c_str(), page), ELOOP);
  EXPECT_EQ(page, nullptr);
  ASSERT_EQ(create_usage_page(dir.path().c_str()), 0);  // a name exists: nothing is replaced
  EXPECT_TRUE(fs::is_symlink(dir / "usage"));
  EXPECT_EQ(fs::file_size(victim), sizeof(UsagePage));
  std::ifstream in(victim);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().find_first_not_of('v'), std::string::npos) << "the target was written";
  // A dangling symlink is not followed either (no file is created at its target).
  fs::remove(dir / "usage");
  fs::create_symlink(dir / "elsewhere", dir / "usage");
  EXPECT_EQ(open_or_create_usage_page(dir.path().c_str(), page), ELOOP);
  EXPECT_FALSE(fs::exists(dir / "elsewhere"));
}

TEST(UsagePage, AFifoOrAShortFileAtThePageNameIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(mkfifo((dir / "usage").c_str(), 0666), 0);
  const pid_t child = fork();
  if (child == 0) {
    alarm(5);
    UsagePage* page = nullptr;
    const bool refused = map_usage_page((dir / "usage").c_str(), true, page) == EINVAL &&
                         map_usage_page((dir / "usage").c_str(), false, page) == EINVAL &&
                         open_or_create_usage_page(dir.path().c_str(), page) == EINVAL;
    _exit(refused ? 0 : 1);
  }
  EXPECT_EQ(wait_exit(child), 0);
  fs::remove(dir / "usage");
  std::ofstream(dir / "usage") << "short";
  UsagePage* page = nullptr;
  EXPECT_EQ(map_usage_page((dir / "usage").c_str(), false, page), ENODATA);
  fs::resize_file(dir / "usage", sizeof(UsagePage));  // full size, all zero: no valid header
  EXPECT_EQ(map_usage_page((dir / "usage").c_str(), false, page), EPROTO);
  EXPECT_EQ(page, nullptr);
}

TEST(UsagePage, ACrashBetweenCreateAndLinkLeavesNoPageVisible) {
  TempDir dir;
  const pid_t child = fork();
  if (child == 0) {
    char temporary[1024];
    if (prepare_usage_page(dir.path().c_str(), temporary, sizeof temporary) != 0) _exit(1);
    raise(SIGKILL);  // before publish_usage_page
    _exit(2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(fs::exists(dir / "usage"));
  UsagePage* page = nullptr;
  EXPECT_EQ(map_usage_page((dir / "usage").c_str(), true, page), ENOENT);
  // What the crash left is a dot-named file no reader opens; the next opener creates the page.
  EXPECT_EQ(other_entries(dir.path()), 1);
  ASSERT_EQ(open_or_create_usage_page(dir.path().c_str(), page), 0);
  EXPECT_TRUE(valid_usage_page(*page));
  unmap_usage_page(page);
}

TEST(UsagePage, ProcessesKilledWhileCreatingNeverExposeAHalfPage) {
  std::mt19937 random(42);
  for (int round = 0; round < 20; ++round) {
    TempDir dir;
    std::vector<pid_t> children;
    for (int i = 0; i < 3; ++i) {
      const pid_t child = fork();
      if (child == 0) {
        UsagePage* page = nullptr;
        _exit(open_or_create_usage_page(dir.path().c_str(), page) == 0 ? 0 : 1);
      }
      children.push_back(child);
    }
    usleep(std::uniform_int_distribution<int>(0, 3000)(random));
    for (pid_t child : children) kill(child, SIGKILL);
    for (pid_t child : children) waitpid(child, nullptr, 0);
    // Whatever moment they died at, a published page is whole and valid.
    if (fs::exists(dir / "usage")) {
      UsagePage* page = nullptr;
      ASSERT_EQ(map_usage_page((dir / "usage").c_str(), false, page), 0) << "round " << round;
      unmap_usage_page(page);
    }
  }
}

TEST(UsagePage, ConcurrentCreatorsShareOnePage) {
  TempDir dir;
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    const pid_t child = fork();
    if (child == 0) {
      UsagePage* page = nullptr;
      if (open_or_create_usage_page(dir.path().c_str(), page) != 0) _exit(1);
      page->slots[i].owner.store(static_cast<uint64_t>(i) + 1);
      _exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) EXPECT_EQ(wait_exit(child), 0);
  UsagePage* page = nullptr;
  ASSERT_EQ(map_usage_page((dir / "usage").c_str(), false, page), 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(page->slots[i].owner.load(), static_cast<uint64_t>(i) + 1);
  unmap_usage_page(page);
  EXPECT_EQ(other_entries(dir.path()), 0);
}

TEST(UsagePage, ReadOnlyMappingCannotWrite) {
  TempDir dir;
  ASSERT_EQ(create_usage_page(dir.path().c_str()), 0);
  UsagePage* page = nullptr;
  ASSERT_EQ(map_usage_page((dir / "usage").c_str(), false, page), 0);
  // Dies (SIGSEGV; under ASan its report and a non-zero exit).
  EXPECT_DEATH(page->slots[0].owner.store(1), "");
  unmap_usage_page(page);
}

}  // namespace
}  // namespace tessera::share
