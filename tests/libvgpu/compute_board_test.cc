// The priority signal's two sources (compute/priority_board.h): the agent's yield_mask in the
// limits page, and the per-user board of `tessera run` shares without an agent, which lives in a
// folder only its user can open, is never mapped (truncating it cannot SIGBUS anyone) and is
// refused with one line when it has the wrong owner, mode or size.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "compute/priority_board.h"

namespace tessera::vgpu::compute {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMs = 1000 * 1000;

std::unique_ptr<share::LimitsPage> limits_page(const char* uuid) {
  auto page = std::make_unique<share::LimitsPage>();
  share::init_limits_page(*page);
  std::snprintf(page->devices[0].uuid, share::kUuidBytes, "%s", uuid);
  page->device_count.store(1);
  return page;
}

class UserBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = (fs::temp_directory_path() / ("compute-board-" + std::to_string(getpid()))).string();
    fs::remove_all(base_);
    fs::create_directories(base_);
    chmod(base_.c_str(), 0755);  // like /dev/shm: others may look in, the board folder is 0700
    folder_ = base_ + "/tessera-" + std::to_string(geteuid());
    file_ = folder_ + "/tessera-device-GPU-board";
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string base_, folder_, file_;
  std::unique_ptr<share::LimitsPage> high_limits_ = limits_page("GPU-board");
  std::unique_ptr<share::LimitsPage> low_limits_ = limits_page("GPU-board");
};

TEST_F(UserBoardTest, APrivateFolderAndFileCoordinateTwoShares) {
  UserBoard high(high_limits_.get(), base_.c_str());
  UserBoard low(low_limits_.get(), base_.c_str());
  EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 1 * kMs));
  struct stat info {};
  ASSERT_EQ(lstat(folder_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_EQ(info.st_uid, geteuid());
  ASSERT_EQ(lstat(file_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  EXPECT_EQ(info.st_size, 64);

  high.announce(0, share::kPriorityHigh, 100 * kMs);
  EXPECT_TRUE(low.higher_active(0, share::kPriorityLow, 50 * kMs));
  EXPECT_TRUE(low.higher_active(0, share::kPriorityNormal, 50 * kMs));
  EXPECT_FALSE(low.higher_active(0, share::kPriorityHigh, 50 * kMs));
  EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 100 * kMs));  // the hold ran out
  high.announce(0, share::kPriorityHigh, 80 * kMs);  // never shortens an announcement
  EXPECT_TRUE(low.higher_active(0, share::kPriorityLow, 90 * kMs));
}

// The owner truncating the board (by mistake or on purpose) costs priorities, not processes: the
// board is read with pread, so the next look finds it short and refuses it with one line.
TEST_F(UserBoardTest, TruncatingTheBoardDoesNotSigbus) {
  UserBoard high(high_limits_.get(), base_.c_str());
  UserBoard low(low_limits_.get(), base_.c_str());
  high.announce(0, share::kPriorityHigh, 100 * kMs);
  ASSERT_TRUE(low.higher_active(0, share::kPriorityLow, 10 * kMs));
  ASSERT_EQ(truncate(file_.c_str(), 0), 0);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 10 * kMs));
  EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 20 * kMs));
  low.announce(0, share::kPriorityLow, 200 * kMs);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("was truncated"), std::string::npos) << said;
  // One line per board and process, not one per period.
  EXPECT_EQ(said.find("was truncated", said.find("was truncated") + 1), std::string::npos) << said;
  high.announce(0, share::kPriorityHigh, 200 * kMs);  // the announcer is not harmed either
  // A new process finds a board of the wrong size and refuses it too.
  auto other_limits = limits_page("GPU-board");
  UserBoard fresh(other_limits.get(), base_.c_str());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(fresh.higher_active(0, share::kPriorityLow, 10 * kMs));
  const std::string refused = testing::internal::GetCapturedStderr();
  EXPECT_NE(refused.find("wrong size"), std::string::npos) << refused;
}

TEST_F(UserBoardTest, ABoardOpenToOthersOrInAnOpenFolderIsRefused) {
  {
    UserBoard high(high_limits_.get(), base_.c_str());
    high.announce(0, share::kPriorityHigh, 100 * kMs);
  }
  ASSERT_EQ(chmod(file_.c_str(), 0666), 0);
  {
    UserBoard low(low_limits_.get(), base_.c_str());
    testing::internal::CaptureStderr();
    EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 10 * kMs));
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("must be 0600"), std::string::npos) << said;
  }
  ASSERT_EQ(chmod(file_.c_str(), 0600), 0);
  ASSERT_EQ(chmod(folder_.c_str(), 0777), 0);
  {
    UserBoard low(low_limits_.get(), base_.c_str());
    testing::internal::CaptureStderr();
    EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 10 * kMs));
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("must be 0700"), std::string::npos) << said;
  }
  // A symlink in the folder's place is not followed.
  fs::remove_all(folder_);
  fs::create_directories(base_ + "/elsewhere");
  fs::create_directory_symlink(base_ + "/elsewhere", folder_);
  {
    UserBoard low(low_limits_.get(), base_.c_str());
    testing::internal::CaptureStderr();
    EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 10 * kMs));
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("symlink"), std::string::npos) << said;
  }
  EXPECT_TRUE(fs::is_empty(base_ + "/elsewhere"));
}

// Another user can neither open the board nor truncate it (as root: a child that becomes nobody).
TEST_F(UserBoardTest, AnotherUserCannotOpenOrTruncateTheBoard) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become a second uid (setuid in a child)";
  UserBoard high(high_limits_.get(), base_.c_str());
  high.announce(0, share::kPriorityHigh, 100 * kMs);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    if (open(file_.c_str(), O_RDWR) >= 0 || errno != EACCES) _exit(11);
    if (open(file_.c_str(), O_RDONLY) >= 0 || errno != EACCES) _exit(12);
    if (truncate(file_.c_str(), 0) == 0 || errno != EACCES) _exit(13);
    if (open(folder_.c_str(), O_RDONLY | O_DIRECTORY) >= 0 || errno != EACCES) _exit(14);
    // Its own board is its own folder's: it does not see root's announcement.
    auto limits = limits_page("GPU-board");
    UserBoard own(limits.get(), base_.c_str());
    if (own.higher_active(0, share::kPriorityLow, 10 * kMs)) _exit(15);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10 setuid, 11 open rw, 12 open ro, 13 truncate, "
                                       "14 folder, 15 saw another user's board";
  struct stat info {};
  ASSERT_EQ(stat(file_.c_str(), &info), 0);
  EXPECT_EQ(info.st_size, 64);
  UserBoard low(low_limits_.get(), base_.c_str());
  EXPECT_TRUE(low.higher_active(0, share::kPriorityLow, 10 * kMs));
}

TEST(LimitsYield, ReadsTheAgentsYieldMaskPerDevice) {
  auto limits = limits_page("GPU-a");
  LimitsYield yield(limits.get());
  EXPECT_FALSE(yield.higher_active(0, share::kPriorityLow, 0));
  limits->yield_mask.store(0b10);
  EXPECT_FALSE(yield.higher_active(0, share::kPriorityLow, 0));
  EXPECT_TRUE(yield.higher_active(1, share::kPriorityLow, 0));
  yield.announce(0, share::kPriorityHigh, 100 * kMs);  // the agent measures: nothing written
  EXPECT_EQ(limits->yield_mask.load(), 0b10u);
}

}  // namespace
}  // namespace tessera::vgpu::compute
