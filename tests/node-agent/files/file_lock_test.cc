#include "files/file_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

class FileLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("agent-file-lock-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "state.lock").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Whether a child process (another agent) finds the lock free: its exit status says.
  bool free_in_another_process() const {
    const pid_t child = fork();
    if (child == 0) {
      Result<std::optional<FileLock>> lock = FileLock::try_acquire(path_);
      _exit(!lock.is_ok() ? 2 : (*lock ? 0 : 1));
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 2) << "try_acquire failed in the child";
    return WEXITSTATUS(status) == 0;
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(FileLockTest, ExcludesAnotherProcessUntilReleased) {
  {
    Result<FileLock> held = FileLock::acquire(path_);
    ASSERT_EQ(held.status().message(), "");
    EXPECT_EQ(held->path(), path_);
    EXPECT_FALSE(free_in_another_process());
  }
  EXPECT_TRUE(free_in_another_process());  // released with its owner
}

// Each acquire opens the file anew: threads of one process exclude each other as processes do.
TEST_F(FileLockTest, ExcludesAnotherThreadOfTheSameProcess) {
  Result<FileLock> held = FileLock::acquire(path_);
  ASSERT_TRUE(held.is_ok());
  std::async(std::launch::async, [&] {
    Result<std::optional<FileLock>> again = FileLock::try_acquire(path_);
    ASSERT_TRUE(again.is_ok());
    EXPECT_FALSE(*again);
  }).get();
}

TEST_F(FileLockTest, AcquireWaitsForTheHolder) {
  std::optional<Result<FileLock>> held(FileLock::acquire(path_));
  ASSERT_TRUE(held->is_ok());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    Result<FileLock> lock = FileLock::acquire(path_);
    EXPECT_TRUE(lock.is_ok());
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(got);
  held.reset();
  waiter.join();
  EXPECT_TRUE(got);
}

// A per-claim lock file removed by its holder while another call waited: the waiter ends up holding
// the file the path names now, so a third caller cannot hold a lock beside it.
TEST_F(FileLockTest, AWaiterOfARemovedLockFileLocksTheFileThePathNamesNow) {
  Result<FileLock> first = FileLock::acquire(path_);
  ASSERT_TRUE(first.is_ok());
  std::promise<void> locked;
  std::promise<void> done;
  std::thread waiter([&] {
    Result<FileLock> second = FileLock::acquire(path_);
    EXPECT_TRUE(second.is_ok());
    locked.set_value();
    done.get_future().wait();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  first->remove_and_release();
  locked.get_future().wait();
  EXPECT_TRUE(fs::exists(path_));  // created again by the waiter
  EXPECT_FALSE(free_in_another_process());
  done.set_value();
  waiter.join();
  EXPECT_TRUE(free_in_another_process());
}

TEST_F(FileLockTest, RemoveAndReleaseUnlinksTheFile) {
  Result<FileLock> held = FileLock::acquire(path_);
  ASSERT_TRUE(held.is_ok());
  held->remove_and_release();
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_TRUE(free_in_another_process());
}

TEST_F(FileLockTest, ALockFileThatIsASymlinkIsRefusedNamingThePath) {
  fs::create_symlink(dir_ / "elsewhere", path_);
  Result<FileLock> refused = FileLock::acquire(path_);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInternal);
  EXPECT_NE(refused.status().message().find("cannot open lock file " + path_), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere"));
}

}  // namespace
}  // namespace tessera::agent
