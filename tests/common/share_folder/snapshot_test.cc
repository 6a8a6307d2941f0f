// The one reader of a share folder's pages, against pages written with the common code and pages a
// tenant left in every shape it can: symlinks, FIFOs, cut files, garbage, a forged high-water mark.
#include "tessera/share_folder/snapshot.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"

namespace tessera::share_folder {
namespace {

namespace fs = std::filesystem;

constexpr size_t kHeader = offsetof(share::UsagePage, slots);

class Snapshot : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("share-folder-snapshot-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    DeviceLimit a, b;
    a.uuid = "GPU-aaaa";
    a.memory_limit = 1ull << 30;
    b.uuid = "GPU-bbbb";
    ASSERT_EQ(write_limits(dir_.string(), {a, b}).message(), "");
    ASSERT_EQ(share::create_usage_page(dir_.c_str()), 0);
    // The tenant's side: the page mapped writable, as the shim maps it.
    ASSERT_EQ(share::map_usage_page(usage_path().c_str(), true, page_), 0);
  }
  void TearDown() override {
    unmap();
    fs::remove_all(dir_);
  }
  void unmap() {
    if (page_) share::unmap_usage_page(page_);
    page_ = nullptr;
  }
  std::string usage_path() const { return (dir_ / "usage").string(); }
  ShareFolderSnapshot read() const { return read_share_folder(dir_.string()); }
  void replace_usage_with_bytes(const std::string& bytes) {
    unmap();
    fs::remove(dir_ / "usage");
    std::ofstream(dir_ / "usage", std::ios::binary) << bytes;
  }

  fs::path dir_;
  share::UsagePage* page_ = nullptr;
};

TEST_F(Snapshot, SumsSlotsPerDeviceAndCountsOwnedSlots) {
  page_->slot_high_water = 3;
  page_->slots[0].owner = share::make_owner(100, 1, 1);
  page_->slots[0].pid = 100;
  page_->slots[0].bytes[0] = 1000;
  page_->slots[0].bytes[1] = 7;
  page_->slots[0].launches = 10;
  page_->slots[0].throttled_ns = 500;
  page_->slots[0].allocations_denied = 2;
  // A reclaimed slot (owner gone): its counters stay, it is no process.
  page_->slots[1].launches = 5;
  page_->slots[1].throttled_ns = 100;
  page_->slots[2].owner = share::make_owner(101, 1, 1);
  page_->slots[2].bytes[0] = 24;
  page_->slots[3].owner = share::make_owner(102, 1, 1);  // above the high-water mark: unseen
  page_->slots[3].bytes[0] = 1ull << 40;
  page_->compute.devices[0].busy_ns = 3'000'000'000;
  const ShareFolderSnapshot folder = read();
  ASSERT_TRUE(folder.readable()) << folder.problem_message();
  EXPECT_EQ(folder.problem_message(), "");
  EXPECT_EQ(folder.usage.problem, UsageProblem::kNone);
  ASSERT_EQ(folder.limits.devices.size(), 2u);
  EXPECT_EQ(folder.limits.devices[0].uuid, "GPU-aaaa");
  EXPECT_EQ(folder.limits.devices[0].memory_limit, 1ull << 30);
  EXPECT_EQ(folder.limits.device_index("GPU-bbbb"), 1);
  EXPECT_EQ(folder.limits.device_index("GPU-cccc"), -1);
  EXPECT_EQ(folder.usage.memory_bytes(0), 1024u);
  EXPECT_EQ(folder.usage.memory_bytes(1), 7u);
  EXPECT_EQ(folder.usage.launches(), 15u);
  EXPECT_EQ(folder.usage.throttled_ns(), 600u);
  EXPECT_EQ(folder.usage.allocations_denied(), 2u);
  EXPECT_EQ(folder.usage.processes(), 2u);
  EXPECT_EQ(folder.usage.live_owners(),
            (std::vector<uint64_t>{share::make_owner(100, 1, 1), share::make_owner(101, 1, 1)}));
  EXPECT_TRUE(folder.usage.owns(share::make_owner(101, 1, 1)));
  EXPECT_FALSE(folder.usage.owns(share::make_owner(102, 1, 1)));
  // Every slot that holds anything is copied, the one above the mark too (the checks judge it).
  ASSERT_EQ(folder.usage.slots.size(), 4u);
  EXPECT_EQ(folder.usage.slots[3].index, 3u);
  EXPECT_EQ(folder.usage.slots[3].bytes[0], 1ull << 40);
  // The shim's meter measures (kMeasureNvml): GPU time from the usage page's compute area.
  EXPECT_EQ(folder.gpu_busy_ns(0), 3'000'000'000u);
}

TEST_F(Snapshot, AHugeHighWaterMarkIsBoundedAndSumsSaturate) {
  page_->slot_high_water = 0xffffffff;
  page_->slots[0].bytes[0] = ~0ull - 1;
  page_->slots[1].bytes[0] = 10;  // would wrap
  page_->slots[share::kMaxSlots - 1].launches = 1;
  const ShareFolderSnapshot folder = read();
  ASSERT_TRUE(folder.readable()) << folder.problem_message();
  EXPECT_EQ(folder.usage.high_water, 0xffffffffu);  // as read: the checks report it
  EXPECT_EQ(folder.usage.bounded_high_water(), share::kMaxSlots);
  EXPECT_EQ(folder.usage.memory_bytes(0), ~0ull);
  EXPECT_EQ(folder.usage.launches(), 1u);
}

TEST_F(Snapshot, AbsentUsagePageIsNothingUsedAndNoProblem) {
  unmap();
  fs::remove(dir_ / "usage");
  const ShareFolderSnapshot folder = read();
  EXPECT_EQ(folder.usage.problem, UsageProblem::kMissing);
  EXPECT_TRUE(folder.readable());
  EXPECT_EQ(folder.problem_message(), "");
  EXPECT_EQ(folder.usage.memory_bytes(0), 0u);
  EXPECT_TRUE(folder.usage.live_owners().empty());
}

TEST_F(Snapshot, ASymlinkIsNeverFollowed) {
  replace_usage_with_bytes("");
  fs::remove(dir_ / "usage");
  std::ofstream(dir_ / "elsewhere") << std::string(sizeof(share::UsagePage), 'x');
  fs::create_symlink(dir_ / "elsewhere", dir_ / "usage");
  const ShareFolderSnapshot folder = read();
  EXPECT_EQ(folder.usage.problem, UsageProblem::kSymlink);
  EXPECT_EQ(folder.usage.message, "usage page is a symlink: " + usage_path());
  EXPECT_FALSE(folder.readable());
  EXPECT_EQ(folder.problem_message(), folder.usage.message);
  EXPECT_TRUE(folder.usage.slots.empty());
}

TEST_F(Snapshot, AFifoNeverBlocks) {
  replace_usage_with_bytes("");
  fs::remove(dir_ / "usage");
  ASSERT_EQ(mkfifo((dir_ / "usage").c_str(), 0666), 0);
  const ShareFolderSnapshot folder = read();  // would hang on a blocking open
  EXPECT_EQ(folder.usage.problem, UsageProblem::kNotRegular);
  EXPECT_EQ(folder.usage.message, "usage page is not a regular file: " + usage_path());
  EXPECT_FALSE(folder.readable());
}

TEST_F(Snapshot, APageCutMidSlotKeepsItsWholeSlotsAndSaysSo) {
  page_->slot_high_water = 2;
  page_->slots[0].owner = share::make_owner(100, 1, 1);
  page_->slots[0].bytes[0] = 5;
  page_->slots[1].owner = share::make_owner(101, 1, 1);
  unmap();
  const size_t cut = kHeader + sizeof(share::ProcessSlot) + sizeof(share::ProcessSlot) / 2;
  ASSERT_EQ(truncate(usage_path().c_str(), static_cast<off_t>(cut)), 0);
  const ShareFolderSnapshot folder = read();
  EXPECT_EQ(folder.usage.problem, UsageProblem::kTruncated);
  EXPECT_EQ(folder.usage.message, "usage page is truncated (" + std::to_string(cut) + " of " +
                                      std::to_string(sizeof(share::UsagePage)) +
                                      " bytes): " + usage_path());
  EXPECT_EQ(folder.usage.file_size, cut);
  EXPECT_FALSE(folder.readable());
  // The header and the one whole slot were read: its owner is known (the meters use it), the
  // half slot is not made up.
  EXPECT_TRUE(folder.usage.header_valid);
  EXPECT_EQ(folder.usage.slots_read, 1u);
  EXPECT_EQ(folder.usage.live_owners(), std::vector<uint64_t>{share::make_owner(100, 1, 1)});
}

TEST_F(Snapshot, APageShorterThanItsHeaderHasNoSlots) {
  unmap();
  ASSERT_EQ(truncate(usage_path().c_str(), static_cast<off_t>(kHeader / 2)), 0);
  const UsagePageCopy usage = read_usage_page(usage_path());
  EXPECT_EQ(usage.problem, UsageProblem::kTruncated);
  EXPECT_FALSE(usage.header_valid);
  EXPECT_TRUE(usage.slots.empty());
  EXPECT_TRUE(usage.live_owners().empty());
}

TEST_F(Snapshot, AScribbledHeaderIsABadHeaderWithItsSlotsStillCopied) {
  page_->slot_high_water = 1;
  page_->slots[0].owner = 77;
  page_->slots[0].bytes[0] = 9;
  page_->version = 99;
  const UsagePageCopy usage = read_usage_page(usage_path());
  EXPECT_EQ(usage.problem, UsageProblem::kBadHeader);
  EXPECT_NE(usage.message.find("version 99"), std::string::npos) << usage.message;
  EXPECT_NE(usage.message.find(usage_path()), std::string::npos) << usage.message;
  ASSERT_EQ(usage.slots.size(), 1u);  // the checks clear or keep them
  EXPECT_EQ(usage.slots[0].owner, 77u);
  // No figure is taken from a page no shim wrote.
  EXPECT_TRUE(usage.counted_slots().empty());
  EXPECT_TRUE(usage.live_owners().empty());
  EXPECT_EQ(usage.memory_bytes(0), 0u);
}

TEST_F(Snapshot, GarbageOfEveryLengthIsAProblemNeverACrash) {
  std::mt19937_64 random(42);
  for (size_t length : {size_t{0}, size_t{1}, kHeader - 1, kHeader, kHeader + 100,
                        sizeof(share::UsagePage), sizeof(share::UsagePage) + 4096}) {
    std::string bytes(length, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    replace_usage_with_bytes(bytes);
    const UsagePageCopy usage = read_usage_page(usage_path());
    EXPECT_TRUE(usage.problem == UsageProblem::kTruncated ||
                usage.problem == UsageProblem::kBadHeader)
        << length << ": " << usage_problem_name(usage.problem);
    EXPECT_FALSE(usage.message.empty());
    EXPECT_TRUE(usage.live_owners().empty());
    EXPECT_LE(usage.slots.size(), share::kMaxSlots);
  }
}

TEST_F(Snapshot, LimitsPageProblemsAreTyped) {
  EXPECT_EQ(read_limits_page((dir_ / "absent").string()).problem, LimitsProblem::kMissing);
  std::ofstream(dir_ / "short") << "TLIM";
  const LimitsPageCopy cut = read_limits_page((dir_ / "short").string());
  EXPECT_EQ(cut.problem, LimitsProblem::kTruncated);
  EXPECT_EQ(cut.message, "limits page is truncated (4 of " +
                             std::to_string(sizeof(share::LimitsPage)) +
                             " bytes): " + (dir_ / "short").string());
  std::ofstream(dir_ / "garbage") << std::string(sizeof(share::LimitsPage), 'x');
  EXPECT_EQ(read_limits_page((dir_ / "garbage").string()).problem, LimitsProblem::kBadHeader);
  fs::create_symlink(dir_ / "limits", dir_ / "link");
  EXPECT_EQ(read_limits_page((dir_ / "link").string()).problem, LimitsProblem::kSymlink);
  ASSERT_EQ(mkfifo((dir_ / "fifo").c_str(), 0666), 0);
  EXPECT_EQ(read_limits_page((dir_ / "fifo").string()).problem, LimitsProblem::kNotRegular);
  // No limits page: the folder is no share, whatever its usage page says.
  fs::remove(dir_ / "limits");
  const ShareFolderSnapshot folder = read();
  EXPECT_EQ(folder.limits.problem, LimitsProblem::kMissing);
  EXPECT_FALSE(folder.readable());
  EXPECT_EQ(folder.problem_message(), "no limits page: " + (dir_ / "limits").string());
}

TEST_F(Snapshot, AgentMeasuredGpuTimeComesFromTheLimitsPage) {
  DeviceLimit a, b;
  a.uuid = "GPU-aaaa";
  b.uuid = "GPU-bbbb";
  ASSERT_EQ(
      write_limits(dir_.string(), {a, b}, {share::kPriorityNormal, share::kMeasureAgent}).message(),
      "");
  // The page is the agent's (mode 0444); written here as the meter does.
  fs::permissions(dir_ / "limits", fs::perms::owner_write, fs::perm_options::add);
  const int fd = open((dir_ / "limits").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* memory =
      mmap(nullptr, sizeof(share::LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(memory, MAP_FAILED);
  static_cast<share::LimitsPage*>(memory)->measured[0].share_busy_ns = 42;
  static_cast<share::LimitsPage*>(memory)->measured[1].context_overhead = 520ull << 20;
  munmap(memory, sizeof(share::LimitsPage));
  page_->compute.devices[0].busy_ns = 999;  // a tenant's figure: not used
  const ShareFolderSnapshot folder = read();
  ASSERT_TRUE(folder.readable()) << folder.problem_message();
  EXPECT_TRUE(folder.limits.agent_measures());
  EXPECT_EQ(folder.gpu_busy_ns(0), 42u);
  EXPECT_EQ(folder.limits.devices[1].context_overhead, 520ull << 20);
}

}  // namespace
}  // namespace tessera::share_folder
