// The pending board (compute/pending_board.h): the shares of one device NVML cannot measure (a MIG
// instance) publish when each of their processes was pending there, and each share is charged its
// processes' equal parts of the time: the rule (equal_split), the board between two shares in the
// user's private folder, a span published after its window, and a board of the wrong size refused.
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compute/meter.h"
#include "compute/pending_board.h"
#include "tessera/pending_spans.h"

namespace tessera::vgpu::compute {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMs = 1000 * 1000;
// A span of process `process`, one of the share's (`own`) or another's.
struct Span {
  int64_t start_ns;
  int64_t end_ns;
  int process;
  bool own;
};

PendingBoard::Split split(const std::vector<Span>& spans, int64_t from, int64_t to) {
  std::vector<PendingBoard::ProcessSpan> process_spans;
  uint32_t own = 0;
  for (const Span& span : spans) {
    process_spans.push_back({span.start_ns, span.end_ns, span.process});
    if (span.own) own |= 1u << span.process;
  }
  std::vector<PendingBoard::Edge> edges(2 * spans.size() + 1);
  return PendingBoard::equal_split(process_spans.data(), static_cast<int>(spans.size()), own, from,
                                   to, edges.data());
}

TEST(PendingBoardSplit, AProcessAloneIsGivenAllOfItsPendingTime) {
  const PendingBoard::Split s = split({{10 * kMs, 20 * kMs, 0, true}}, 0, 30 * kMs);
  EXPECT_EQ(s.own_ns, 10 * kMs);
  EXPECT_EQ(s.others_ns, 0);
}

TEST(PendingBoardSplit, TwoPendingAtOnceEachGetHalfOfThatTime) {
  // A alone 0-5, A and B 5-10, B alone 10-15.
  const PendingBoard::Split s =
      split({{0, 10 * kMs, 0, true}, {5 * kMs, 15 * kMs, 1, false}}, 0, 20 * kMs);
  EXPECT_EQ(s.own_ns, 5 * kMs + 5 * kMs / 2);
  EXPECT_EQ(s.others_ns, 5 * kMs + 5 * kMs / 2);
}

TEST(PendingBoardSplit, ThreeProcessesTwoOfTheShareGetTwoThirds) {
  const PendingBoard::Split s =
      split({{0, 30 * kMs, 0, true}, {0, 30 * kMs, 1, true}, {0, 30 * kMs, 2, false}}, 0, 30 * kMs);
  EXPECT_EQ(s.own_ns, 20 * kMs);
  EXPECT_EQ(s.others_ns, 10 * kMs);
}

TEST(PendingBoardSplit, OverlappingSpansOfOneProcessCountOnce) {
  // Two threads of process 0 pending 0-10 and 5-15, process 1 pending 0-20: process 0 is one of
  // two pending processes throughout 0-15.
  const PendingBoard::Split s = split(
      {{0, 10 * kMs, 0, true}, {5 * kMs, 15 * kMs, 0, true}, {0, 20 * kMs, 1, false}}, 0, 20 * kMs);
  EXPECT_EQ(s.own_ns, 15 * kMs / 2);
  EXPECT_EQ(s.others_ns, 15 * kMs / 2 + 5 * kMs);
}

TEST(PendingBoardSplit, OnlyTheWindowIsCounted) {
  const PendingBoard::Split s =
      split({{0, 10 * kMs, 0, true}, {0, 10 * kMs, 1, false}}, 4 * kMs, 6 * kMs);
  EXPECT_EQ(s.own_ns, 1 * kMs);
  EXPECT_EQ(s.others_ns, 1 * kMs);
  EXPECT_EQ(split({{0, 10 * kMs, 0, true}}, 10 * kMs, 20 * kMs).own_ns, 0);
}

std::unique_ptr<share::LimitsPage> limits_page(const char* uuid) {
  auto page = std::make_unique<share::LimitsPage>();
  share::init_limits_page(*page);
  std::snprintf(page->devices[0].uuid, share::kUuidBytes, "%s", uuid);
  page->device_count.store(1);
  return page;
}

class PendingBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = (fs::temp_directory_path() / ("pending-board-" + std::to_string(getpid()))).string();
    fs::remove_all(base_);
    fs::create_directories(base_);
    file_ = base_ + "/tessera-" + std::to_string(geteuid()) + "/tessera-pending-MIG-instance";
  }
  void TearDown() override { fs::remove_all(base_); }

  // A board of share `share` seen by process `process`.
  std::unique_ptr<PendingBoard> board(uint64_t share, uint64_t process) {
    return std::make_unique<PendingBoard>(limits_.get(), base_.c_str(), share, process);
  }

  std::string base_, file_;
  std::unique_ptr<share::LimitsPage> limits_ = limits_page("MIG-instance");
};

TEST_F(PendingBoardTest, TwoSharesAreChargedTheirEqualPartsOfTheTimeTheyWerePending) {
  auto thirty = board(30, 301);
  auto seventy = board(70, 701);
  auto seventy_second = board(70, 702);  // a second process of the 70 share
  const int64_t now = 2000 * kMs;
  // 30 pending 0-10; 70's first process 5-20; its second 15-25.
  const PendingSpan a{1000 * kMs, 1010 * kMs, 0};
  const PendingSpan b{1005 * kMs, 1020 * kMs, 0};
  const PendingSpan c{1015 * kMs, 1025 * kMs, 0};
  thirty->publish(0, &a, 1, now);
  seventy->publish(0, &b, 1, now);
  seventy_second->publish(0, &c, 1, now);
  struct stat info {};
  ASSERT_EQ(stat(file_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  EXPECT_EQ(info.st_size, static_cast<off_t>(sizeof(PendingBoard::Page)));

  PendingBoard::Split s30, s70;
  ASSERT_TRUE(thirty->charge(0, 990 * kMs, 1030 * kMs, &s30));
  ASSERT_TRUE(seventy->charge(0, 990 * kMs, 1030 * kMs, &s70));
  // 30: alone 0-5, with one other 5-10. 70: half of 5-10, alone 10-15, its two processes 15-20
  // and its second alone 20-25.
  EXPECT_EQ(s30.own_ns, 5 * kMs + 5 * kMs / 2);
  EXPECT_EQ(s70.own_ns, 5 * kMs / 2 + 5 * kMs + 5 * kMs + 5 * kMs);
  // Together exactly the time anyone was pending, each share's "others" the other's part.
  EXPECT_EQ(s30.own_ns + s70.own_ns, 25 * kMs);
  EXPECT_EQ(s30.others_ns, s70.own_ns);
  EXPECT_EQ(s70.others_ns, s30.own_ns);
}

TEST_F(PendingBoardTest, ASpanPublishedAfterItsWindowIsChargedWhole) {
  auto thirty = board(30, 301);
  auto seventy = board(70, 701);
  const PendingSpan early{1000 * kMs, 1010 * kMs, 0};
  thirty->publish(0, &early, 1, 2000 * kMs);
  seventy->publish(0, &early, 1, 2000 * kMs);
  PendingBoard::Split s;
  ASSERT_TRUE(thirty->charge(0, 990 * kMs, 1020 * kMs, &s));
  EXPECT_EQ(s.own_ns, 5 * kMs);
  // Published only now, though it ended before the window just charged: its split is gone, so
  // the share pays all of it (never less than it used); the other share's late span is not its.
  const PendingSpan late{1012 * kMs, 1018 * kMs, 0};
  thirty->publish(0, &late, 1, 2000 * kMs);
  seventy->publish(0, &late, 1, 2000 * kMs);
  ASSERT_TRUE(thirty->charge(0, 1020 * kMs, 1030 * kMs, &s));
  EXPECT_EQ(s.own_ns, 6 * kMs);
  EXPECT_EQ(s.others_ns, 0);
}

TEST_F(PendingBoardTest, TheRingKeepsTheLastSpansAndAProcessItsRecord) {
  auto thirty = board(30, 301);
  std::vector<PendingSpan> spans;
  for (int i = 0; i < PendingBoard::kSpans + 10; ++i)
    spans.push_back({(1000 + 2 * i) * kMs, (1001 + 2 * i) * kMs, 0});
  thirty->publish(0, spans.data(), static_cast<int>(spans.size()), 2000 * kMs);
  PendingBoard::Split s;
  ASSERT_TRUE(thirty->charge(0, 0, 5000 * kMs, &s));
  EXPECT_EQ(s.own_ns, PendingBoard::kSpans * kMs);  // the 10 oldest were overwritten
  thirty->publish(0, spans.data(), 1, 2000 * kMs);  // same record, one more span
  std::ifstream file(file_, std::ios::binary);
  PendingBoard::Page page{};
  file.read(reinterpret_cast<char*>(&page), sizeof page);
  int records = 0;
  for (const PendingBoard::Record& record : page.records) records += record.process != 0;
  EXPECT_EQ(records, 1);
}

TEST_F(PendingBoardTest, ABoardOfTheWrongSizeIsRefusedAndNotUsed) {
  fs::create_directories(fs::path(file_).parent_path());
  chmod(fs::path(file_).parent_path().c_str(), 0700);
  { std::ofstream(file_) << "not a board"; }
  chmod(file_.c_str(), 0600);
  auto thirty = board(30, 301);
  EXPECT_FALSE(thirty->usable(0));
  PendingBoard::Split s;
  EXPECT_FALSE(thirty->charge(0, 0, 10 * kMs, &s));
}

TEST_F(PendingBoardTest, AFileOfTheRightSizeButAnotherKindIsRefused) {
  fs::create_directories(fs::path(file_).parent_path());
  chmod(fs::path(file_).parent_path().c_str(), 0700);
  {
    PendingBoard::Page other{};
    other.magic = PendingBoard::kMagic + 1;  // another board's header
    other.version = PendingBoard::kVersion;
    std::ofstream(file_, std::ios::binary)
        .write(reinterpret_cast<const char*>(&other), sizeof other);
  }
  chmod(file_.c_str(), 0600);
  auto thirty = board(30, 301);
  EXPECT_FALSE(thirty->usable(0));
  const std::unique_ptr<share::LimitsPage> escaping = limits_page("MIG/../escape");
  auto misnamed = std::make_unique<PendingBoard>(escaping.get(), base_.c_str(), 30, 302);
  EXPECT_FALSE(misnamed->usable(0));  // a device name that is no file name
}

// The meter's source: exact where the board can be used, what the launches spanned otherwise.
TEST_F(PendingBoardTest, OwnSourceChargesTheBoardsPartsOverALaggedWindow) {
  auto usage = std::make_unique<share::UsagePage>();
  share::init_usage_page(*usage);
  std::atomic<uint64_t> timed{1};
  auto thirty = board(30, 301);
  auto seventy = board(70, 701);
  OwnSource source(usage.get(), nullptr, &timed, thirty.get(), 25 * kMs);
  Busy busy;
  EXPECT_FALSE(source.measure(0, 1000 * kMs, &busy));  // the first window starts at 975
  const PendingSpan a{980 * kMs, 990 * kMs, 0};
  thirty->publish(0, &a, 1, 1000 * kMs);
  seventy->publish(0, &a, 1, 1000 * kMs);
  ASSERT_TRUE(source.measure(0, 1020 * kMs, &busy));  // (975, 995]
  EXPECT_EQ(busy.share_ns, 5 * kMs);
  EXPECT_EQ(busy.others_ns, 5 * kMs);
  EXPECT_FALSE(source.timed(0));  // exact: nothing for the meter to take out
}

// Under the agent each process publishes into its share's own folder (`pending-<uuid>`, no file
// shared with another share): created whole, 0666 as the usage page (the share's processes may run
// as different uids), the common page the agent reads.
TEST_F(PendingBoardTest, UnderTheAgentSpansGoToTheSharesOwnFolder) {
  const std::string folder = base_ + "/share";
  fs::create_directories(folder);
  PendingBoard own_folder(limits_.get(), folder.c_str(), 1, 301, PendingBoard::Where::kShareFolder);
  const PendingSpan span{1000 * kMs, 1010 * kMs, 0};
  own_folder.publish(0, &span, 1, 2000 * kMs);
  const std::string path = folder + "/pending-MIG-instance";
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0666u);
  EXPECT_EQ(info.st_size, static_cast<off_t>(sizeof(share::PendingPage)));
  EXPECT_FALSE(fs::exists(fs::path(file_).parent_path()));  // nothing on the user's board
  auto page = std::make_unique<share::PendingPage>();
  std::ifstream(path, std::ios::binary)
      .read(reinterpret_cast<char*>(page.get()), sizeof(share::PendingPage));
  ASSERT_TRUE(share::valid_pending_page(*page));
  EXPECT_EQ(page->overflowed, 0u);
  int records = 0;
  for (const share::PendingRecord& record : page->records) {
    if (record.process == 0) continue;
    ++records;
    EXPECT_EQ(record.process, 301u);
    share::ProcessSpan taken[4];
    int64_t late = 0;
    ASSERT_EQ(share::take_spans(record, 0, 900 * kMs, 1100 * kMs, 0, taken, 4, &late), 1);
    EXPECT_EQ(taken[0].start_ns, 1000 * kMs);
    EXPECT_EQ(taken[0].end_ns, 1010 * kMs);
  }
  EXPECT_EQ(records, 1);
}

TEST_F(PendingBoardTest, UnderTheAgentAFileTheTenantReplacedIsRefused) {
  const std::string folder = base_ + "/share";
  fs::create_directories(folder);
  fs::create_symlink("/etc/passwd", folder + "/pending-MIG-instance");
  PendingBoard own_folder(limits_.get(), folder.c_str(), 1, 301, PendingBoard::Where::kShareFolder);
  EXPECT_FALSE(own_folder.usable(0));  // never through a symlink
  fs::remove(folder + "/pending-MIG-instance");
  ASSERT_EQ(mkfifo((folder + "/pending-MIG-instance").c_str(), 0666), 0);
  PendingBoard fifo(limits_.get(), folder.c_str(), 1, 302, PendingBoard::Where::kShareFolder);
  EXPECT_FALSE(fifo.usable(0));  // nor a FIFO (and without blocking on it)
}

TEST_F(PendingBoardTest, AProcessThatFindsEveryRecordTakenSaysSoInThePage) {
  const std::string folder = base_ + "/share";
  fs::create_directories(folder);
  const PendingSpan span{1000 * kMs, 1010 * kMs, 0};
  std::vector<std::unique_ptr<PendingBoard>> processes;
  for (int p = 0; p <= PendingBoard::kRecords; ++p) {
    processes.push_back(std::make_unique<PendingBoard>(limits_.get(), folder.c_str(), 1, 400 + p,
                                                       PendingBoard::Where::kShareFolder));
    processes.back()->publish(0, &span, 1, 2000 * kMs);
  }
  auto page = std::make_unique<share::PendingPage>();
  std::ifstream(folder + "/pending-MIG-instance", std::ios::binary)
      .read(reinterpret_cast<char*>(page.get()), sizeof(share::PendingPage));
  EXPECT_EQ(page->overflowed, 1u);  // the agent must not take these spans for all of the share's
}

// A stand-in for the agent's figures (AgentSource): what it returns, and which devices the meter
// asked it to forget.
class AgentFigures final : public BusySource {
 public:
  bool measure(int device, int64_t, Busy* out) override {
    if (primed_[device] == false) {
      primed_[device] = true;
      return false;
    }
    *out = next;
    return true;
  }
  void reset() override {}
  void forget(int device) override {
    primed_[device] = false;
    ++forgets;
  }
  Busy next;
  int forgets = 0;

 private:
  bool primed_[share::kMaxDevices] = {};
};

// Where the agent splits a device (split_mask), its figures are the share's: exact, nothing for
// the meter to take out; where it stops, the share is back on what its launches spanned.
TEST(OwnSourceUnderTheAgent, ChargesTheAgentsSplitWhereItsBitIsSet) {
  auto usage = std::make_unique<share::UsagePage>();
  share::init_usage_page(*usage);
  usage->slot_high_water = 1;
  usage->slots[0].owner = share::make_owner(42, 7, 9);
  usage->slots[0].generation = 1;
  std::unique_ptr<share::LimitsPage> limits = limits_page("MIG-instance");
  std::atomic<uint64_t> timed{1};
  AgentFigures agent;
  agent.next = Busy{3 * kMs, 7 * kMs};
  OwnSource source(usage.get(), &agent, &timed, nullptr, OwnSource::kPendingLag, limits.get());
  Busy busy;
  EXPECT_FALSE(source.measure(0, 1000 * kMs, &busy));  // the slots' first look
  usage->slots[0].gpu_busy_ns += 10 * kMs;
  ASSERT_TRUE(source.measure(0, 1005 * kMs, &busy));
  EXPECT_EQ(busy.share_ns, 10 * kMs);  // what the launches spanned
  EXPECT_TRUE(source.timed(0));

  limits->split_mask = 1;
  limits->measured[0].sampled_at_ns = 1000 * kMs;  // the agent publishes
  usage->slots[0].gpu_busy_ns += 10 * kMs;
  EXPECT_FALSE(source.measure(0, 1010 * kMs, &busy));  // the agent's figures start a window
  EXPECT_EQ(agent.forgets, 1);
  ASSERT_TRUE(source.measure(0, 1015 * kMs, &busy));
  EXPECT_EQ(busy.share_ns, 3 * kMs);
  EXPECT_EQ(busy.others_ns, 7 * kMs);
  EXPECT_FALSE(source.timed(0));

  // The agent stopped publishing (killed, restarting): its bit is still set, its figures are old.
  // The share is charged its own spans again, never left unmeasured.
  usage->slots[0].gpu_busy_ns += 6 * kMs;
  ASSERT_TRUE(source.measure(0, 1000 * kMs + OwnSource::kAgentStale + 1, &busy));
  EXPECT_EQ(busy.share_ns, 6 * kMs);
  EXPECT_TRUE(source.timed(0));
  // Publishing again: back on its figures (a fresh window).
  limits->measured[0].sampled_at_ns = 1300 * kMs;
  EXPECT_FALSE(source.measure(0, 1310 * kMs, &busy));
  EXPECT_EQ(agent.forgets, 2);

  limits->split_mask = 0;
  usage->slots[0].gpu_busy_ns += 4 * kMs;
  ASSERT_TRUE(source.measure(0, 1320 * kMs, &busy));
  EXPECT_EQ(busy.share_ns, 4 * kMs);
  EXPECT_TRUE(source.timed(0));
}

// A share with no compute setting runs a meter (which publishes its pending spans) only where the
// agent asks it to time its launches: a limited share is beside it in an instance.
TEST(OwnSourceUnderTheAgent, AShareAskedToTimeItsLaunchesRunsAMeter) {
  std::unique_ptr<share::LimitsPage> limits = limits_page("MIG-instance");
  limits->devices[0].cores_request = 100;
  limits->devices[0].cores_limit = 100;
  EXPECT_FALSE(Meter::share_has_compute(*limits));
  limits->time_launches_mask = 1;
  EXPECT_TRUE(Meter::share_has_compute(*limits));
}

}  // namespace
}  // namespace tessera::vgpu::compute
