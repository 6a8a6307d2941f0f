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
#include <vector>

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
  UserBoard high(high_limits_.get(), base_.c_str(), 1);
  UserBoard low(low_limits_.get(), base_.c_str(), 2);
  EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 1 * kMs));
  struct stat info {};
  ASSERT_EQ(lstat(folder_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_EQ(info.st_uid, geteuid());
  ASSERT_EQ(lstat(file_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  EXPECT_EQ(info.st_size, static_cast<off_t>(sizeof(UserBoard::Page)));

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
  UserBoard high(high_limits_.get(), base_.c_str(), 1);
  UserBoard low(low_limits_.get(), base_.c_str(), 2);
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
  UserBoard fresh(other_limits.get(), base_.c_str(), 3);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(fresh.higher_active(0, share::kPriorityLow, 10 * kMs));
  const std::string refused = testing::internal::GetCapturedStderr();
  EXPECT_NE(refused.find("wrong size"), std::string::npos) << refused;
}

TEST_F(UserBoardTest, ABoardOpenToOthersOrInAnOpenFolderIsRefused) {
  {
    UserBoard high(high_limits_.get(), base_.c_str(), 1);
    high.announce(0, share::kPriorityHigh, 100 * kMs);
  }
  ASSERT_EQ(chmod(file_.c_str(), 0666), 0);
  {
    UserBoard low(low_limits_.get(), base_.c_str(), 2);
    testing::internal::CaptureStderr();
    EXPECT_FALSE(low.higher_active(0, share::kPriorityLow, 10 * kMs));
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("must be 0600"), std::string::npos) << said;
  }
  ASSERT_EQ(chmod(file_.c_str(), 0600), 0);
  ASSERT_EQ(chmod(folder_.c_str(), 0777), 0);
  {
    UserBoard low(low_limits_.get(), base_.c_str(), 2);
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
    UserBoard low(low_limits_.get(), base_.c_str(), 2);
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
  UserBoard high(high_limits_.get(), base_.c_str(), 1);
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
    UserBoard own(limits.get(), base_.c_str(), 4);
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
  EXPECT_EQ(info.st_size, static_cast<off_t>(sizeof(UserBoard::Page)));
  UserBoard low(low_limits_.get(), base_.c_str(), 2);
  EXPECT_TRUE(low.higher_active(0, share::kPriorityLow, 10 * kMs));
}

// Classes on the board: each active share's entry reserves its request against the others of its
// priority, and expires after the hold (a dead share's entry with it).
TEST_F(UserBoardTest, ShareEntriesReserveRequestsAndExpire) {
  UserBoard guaranteed(high_limits_.get(), base_.c_str(), 11);
  UserBoard best_effort(low_limits_.get(), base_.c_str(), 12);
  auto other_limits = limits_page("GPU-board");
  UserBoard low(other_limits.get(), base_.c_str(), 13);
  const Claim g60{60, 60}, be{0, 100};
  constexpr uint32_t kNormal = share::kPriorityNormal;
  EXPECT_EQ(best_effort.spare(0, kNormal, be, true, 10 * kMs, 110 * kMs), 100u);  // alone
  EXPECT_EQ(guaranteed.spare(0, kNormal, g60, true, 10 * kMs, 110 * kMs), 0u);
  EXPECT_EQ(best_effort.spare(0, kNormal, be, true, 20 * kMs, 120 * kMs), 40u);
  // An inactive share keeps its entry until it expires, and is counted until then.
  EXPECT_EQ(best_effort.spare(0, kNormal, be, false, 100 * kMs, 0), 40u);
  // A share of another priority does not count (it yields, or is yielded to, whole).
  EXPECT_EQ(low.spare(0, share::kPriorityLow, Claim{50, 50}, true, 30 * kMs, 130 * kMs), 0u);
  EXPECT_EQ(best_effort.spare(0, kNormal, be, true, 40 * kMs, 140 * kMs), 40u);
  // The guaranteed share stops refreshing (quiet, or dead): from its expiry on, all is spare.
  EXPECT_EQ(best_effort.spare(0, kNormal, be, true, 109 * kMs, 209 * kMs), 40u);
  EXPECT_EQ(best_effort.spare(0, kNormal, be, true, 110 * kMs, 210 * kMs), 100u);
  // The guaranteed share comes back (a new entry if its old one was taken).
  EXPECT_EQ(guaranteed.spare(0, kNormal, g60, true, 150 * kMs, 250 * kMs), 0u);
  EXPECT_EQ(best_effort.spare(0, kNormal, be, true, 160 * kMs, 260 * kMs), 40u);
}

// Shares that time their own launches (a MIG instance) publish what their launches spanned and read
// the others' growth, whatever their priority; an expired entry counts no more.
TEST_F(UserBoardTest, TimedSharesSeeEachOthersSpans) {
  UserBoard a(high_limits_.get(), base_.c_str(), 21);
  UserBoard b(low_limits_.get(), base_.c_str(), 22);
  const Claim c30{30, 30}, c70{70, 70};
  uint64_t others = 0;
  int sharers = 0;
  ASSERT_TRUE(a.others_timed(0, 1'000'000, 10 * kMs, &others, &sharers));
  EXPECT_EQ(sharers, 0);
  a.spare(0, share::kPriorityNormal, c30, true, 10 * kMs, 110 * kMs);  // publishes 1 ms
  ASSERT_TRUE(b.others_timed(0, 5'000'000, 11 * kMs, &others, &sharers));
  EXPECT_EQ(sharers, 0);  // a's entry seen for the first time: its growth starts here
  b.spare(0, share::kPriorityLow, c70, true, 11 * kMs, 111 * kMs);
  ASSERT_TRUE(a.others_timed(0, 3'000'000, 15 * kMs, &others, &sharers));
  EXPECT_EQ(sharers, 0);                                               // b's entry, first seen
  a.spare(0, share::kPriorityNormal, c30, true, 15 * kMs, 115 * kMs);  // publishes 3 ms
  ASSERT_TRUE(b.others_timed(0, 9'000'000, 16 * kMs, &others, &sharers));
  EXPECT_EQ(sharers, 1);
  EXPECT_EQ(others, 2'000'000u);                                    // a grew from 1 ms to 3 ms
  b.spare(0, share::kPriorityLow, c70, true, 16 * kMs, 116 * kMs);  // publishes 9 ms
  ASSERT_TRUE(a.others_timed(0, 3'000'000, 20 * kMs, &others, &sharers));
  EXPECT_EQ(sharers, 1);
  EXPECT_EQ(others, 4'000'000u);  // b grew from 5 ms to 9 ms
  // b stops refreshing: once its entry expires it is not a sharer, whatever it published.
  ASSERT_TRUE(a.others_timed(0, 3'000'000, 117 * kMs, &others, &sharers));
  EXPECT_EQ(sharers, 0);
}

TEST(MeterApportion, SpansBeyondTheWindowLoseAnEqualPartOfTheExcess) {
  constexpr int64_t kW = 5'000'000;
  // Alone, or spans that fit in the window: all of the span is the share's.
  EXPECT_EQ(Meter::apportion_timed(3'000'000, 0, 0, kW), 3'000'000);
  EXPECT_EQ(Meter::apportion_timed(2'000'000, 3'000'000, 1, kW), 2'000'000);
  // Two shares pending the whole window on a time-sliced device: half each.
  EXPECT_EQ(Meter::apportion_timed(kW, kW, 1, kW), kW / 2);
  // One pending all the window, the other 2 ms of it: those 2 ms were shared.
  EXPECT_EQ(Meter::apportion_timed(kW, 2'000'000, 1, kW), 4'000'000);
  EXPECT_EQ(Meter::apportion_timed(2'000'000, kW, 1, kW), 1'000'000);
  // Never below span / (sharers + 1) (the others' spans arrived late and add up to much more).
  EXPECT_EQ(Meter::apportion_timed(1'000'000, 30'000'000, 1, kW), 500'000);
  // Three shares pending the whole window: a third each.
  EXPECT_EQ(Meter::apportion_timed(kW, 2 * kW, 2, kW), kW - (2 * kW) / 3);
}

TEST_F(UserBoardTest, AFullBoardSaysSoOnceAndTheShareStillRuns) {
  std::vector<std::unique_ptr<share::LimitsPage>> pages;
  std::vector<std::unique_ptr<UserBoard>> boards;
  for (int i = 0; i < UserBoard::kEntries; ++i) {
    pages.push_back(limits_page("GPU-board"));
    boards.push_back(std::make_unique<UserBoard>(pages.back().get(), base_.c_str(), 100 + i));
    boards.back()->spare(0, share::kPriorityNormal, Claim{1, 1}, true, 10 * kMs, 110 * kMs);
  }
  UserBoard late(low_limits_.get(), base_.c_str(), 99);
  testing::internal::CaptureStderr();
  // 64 shares hold 1 % each: 36 spare for a best-effort share that could not claim an entry.
  EXPECT_EQ(late.spare(0, share::kPriorityNormal, Claim{0, 100}, true, 20 * kMs, 120 * kMs), 36u);
  EXPECT_EQ(late.spare(0, share::kPriorityNormal, Claim{0, 100}, true, 30 * kMs, 130 * kMs), 36u);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("is full"), std::string::npos) << said;
  EXPECT_EQ(said.find("is full", said.find("is full") + 1), std::string::npos) << said;
  // Once the others expire, it claims an entry: the others see its request.
  EXPECT_EQ(late.spare(0, share::kPriorityNormal, Claim{50, 50}, true, 200 * kMs, 300 * kMs), 0u);
  EXPECT_EQ(boards[0]->spare(0, share::kPriorityNormal, Claim{0, 100}, true, 210 * kMs, 310 * kMs),
            50u);
}

TEST_F(UserBoardTest, ShareIdentityIsTheFoldersForEveryProcess) {
  const std::string a = base_ + "/share-a", b = base_ + "/share-b";
  fs::create_directories(a);
  fs::create_directories(b);
  const uint64_t id_a = UserBoard::share_identity(a.c_str(), 7);
  EXPECT_NE(id_a, 0u);
  EXPECT_EQ(UserBoard::share_identity((a + "/.").c_str(), 8), id_a);  // another process
  EXPECT_NE(UserBoard::share_identity(b.c_str(), 7), id_a);
  EXPECT_EQ(UserBoard::share_identity("", 7), 7u);  // standalone: the process is the share
  EXPECT_EQ(UserBoard::share_identity((base_ + "/missing").c_str(), 9), 9u);
}

TEST(LimitsYield, ReadsTheAgentsSparePerDevice) {
  auto limits = limits_page("GPU-a");
  limits->requests[0].spare_percent.store(share::kSpareUnknown);
  limits->requests[1].spare_percent.store(40);
  LimitsYield yield(limits.get());
  EXPECT_EQ(yield.spare(0, share::kPriorityNormal, Claim{0, 100}, true, 0, 0), kSpareUnknown);
  EXPECT_EQ(yield.spare(1, share::kPriorityNormal, Claim{0, 100}, true, 0, 0), 40u);
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
