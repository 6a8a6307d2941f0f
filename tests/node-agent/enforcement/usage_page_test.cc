#include "enforcement/usage_page.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "enforcement/fake_node.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
constexpr char kGpu[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr uint64_t kGiB = 1ull << 30;

TEST(UsagePage, ReadsEveryShapeATenantCanLeave) {
  const fs::path folder = testing::fresh_folder("usage-page-read");
  EXPECT_EQ(read_usage_page(folder.string()).state, UsagePageState::kMissing);
  testing::make_share_folder(folder, kGpu, 4 * kGiB);
  testing::write_slot(folder, 3, 77, kGiB);
  UsagePageSnapshot valid = read_usage_page(folder.string());
  EXPECT_EQ(valid.state, UsagePageState::kValid);
  EXPECT_EQ(valid.high_water, 4u);
  ASSERT_EQ(valid.slots.size(), 1u);
  EXPECT_EQ(valid.slots[0].index, 3u);
  EXPECT_EQ(valid.slots[0].owner, 77u);
  EXPECT_EQ(valid.slots[0].bytes[0], kGiB);
  // Slots above the high-water mark are read too (a tenant may have reset the mark).
  testing::write_slot(folder, 9, 78, kGiB, 0, /*raise_mark=*/false);
  EXPECT_EQ(read_usage_page(folder.string()).slots.size(), 2u);

  // A scribbled header.
  {
    const int fd = open((folder / "usage").c_str(), O_WRONLY);
    const uint32_t junk = 0xdeadbeef;
    ASSERT_EQ(pwrite(fd, &junk, sizeof junk, 0), 4);
    close(fd);
  }
  UsagePageSnapshot bad = read_usage_page(folder.string());
  EXPECT_EQ(bad.state, UsagePageState::kBadHeader);
  EXPECT_NE(bad.problem.find("magic 3735928559"), std::string::npos) << bad.problem;
  EXPECT_EQ(bad.slots.size(), 2u);
  // Truncated: read with pread, no fault.
  ASSERT_EQ(truncate((folder / "usage").c_str(), 100), 0);
  UsagePageSnapshot short_page = read_usage_page(folder.string());
  EXPECT_EQ(short_page.state, UsagePageState::kShort);
  EXPECT_EQ(short_page.size, 100u);
  // A FIFO (would block a reader that does not open it non-blocking) and a symlink.
  fs::remove(folder / "usage");
  ASSERT_EQ(mkfifo((folder / "usage").c_str(), 0666), 0);
  EXPECT_EQ(read_usage_page(folder.string()).state, UsagePageState::kNotRegular);
  fs::remove(folder / "usage");
  fs::create_symlink("/etc/passwd", folder / "usage");
  UsagePageSnapshot link = read_usage_page(folder.string());
  EXPECT_EQ(link.state, UsagePageState::kNotRegular);
  EXPECT_EQ(link.problem, "the usage page is a symlink");
  fs::remove_all(folder);
}

TEST(UsagePage, RepairClearsOnlyTheOwnersItWasToldAndSetsOnlyUnchangedFigures) {
  const fs::path folder = testing::fresh_folder("usage-page-repair");
  testing::make_share_folder(folder, kGpu, 4 * kGiB);
  testing::write_slot(folder, 0, 10, kGiB);
  testing::write_slot(folder, 1, 11, 2 * kGiB);
  testing::write_slot(folder, 2, 12, 0);
  UsagePageRepair repair;
  repair.clears.push_back({0, 10});
  repair.clears.push_back({1, 999});  // the slot holds 11 now: left alone
  repair.sets.push_back({2, 12, 0, 0, 3 * kGiB});
  repair.sets.push_back({1, 11, 0, 5, 4 * kGiB});  // the slot holds 2 GiB, not 5: left alone
  repair.high_water = 3;
  Result<RepairOutcome> outcome = repair_usage_page(folder.string(), repair);
  ASSERT_EQ(outcome.status().message(), "");
  EXPECT_EQ(outcome->cleared, 1u);
  EXPECT_EQ(outcome->set, 1u);
  EXPECT_EQ(outcome->skipped, 2u);
  const testing::PageCopy page = testing::copy_page(folder);
  ASSERT_TRUE(page.valid);
  EXPECT_EQ(page.owners[0], 0u);
  EXPECT_EQ(page.bytes[0], 0u);
  EXPECT_EQ(page.owners[1], 11u);
  EXPECT_EQ(page.bytes[1], 2 * kGiB);
  EXPECT_EQ(page.bytes[2], 3 * kGiB);
  EXPECT_EQ(page.high_water, 3u);
  fs::remove_all(folder);
}

TEST(UsagePage, RepairRestoresAHighWaterMarkAHeaderAndATruncatedOrReplacedPage) {
  const fs::path folder = testing::fresh_folder("usage-page-shape");
  testing::make_share_folder(folder, kGpu, 4 * kGiB);
  testing::write_slot(folder, 5, 10, kGiB);
  {  // The tenant resets the mark and scribbles the header.
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page((folder / "usage").c_str(), true, page), 0);
    page->slot_high_water.store(0);
    page->version = 99;
    share::unmap_usage_page(page);
  }
  UsagePageRepair repair;
  repair.rewrite_header = true;
  repair.high_water = 6;
  ASSERT_EQ(repair_usage_page(folder.string(), repair).status().message(), "");
  EXPECT_EQ(read_usage_page(folder.string()).state, UsagePageState::kValid);
  EXPECT_EQ(testing::copy_page(folder).high_water, 6u);
  // A mark no shim writes (above kMaxSlots) is lowered to the sound value.
  {
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page((folder / "usage").c_str(), true, page), 0);
    page->slot_high_water.store(100000);
    share::unmap_usage_page(page);
  }
  ASSERT_EQ(repair_usage_page(folder.string(), repair).status().message(), "");
  EXPECT_EQ(testing::copy_page(folder).high_water, 6u);

  // Truncated: extended to a whole page with a shim's header; the shim can map it again.
  ASSERT_EQ(truncate((folder / "usage").c_str(), 10), 0);
  UsagePageRepair extend;
  extend.extend = true;
  extend.high_water = 0;
  ASSERT_EQ(repair_usage_page(folder.string(), extend).status().message(), "");
  EXPECT_EQ(read_usage_page(folder.string()).state, UsagePageState::kValid);
  EXPECT_TRUE(testing::copy_page(folder).valid);

  // Replaced by a symlink: removed (the target untouched) and created anew.
  const fs::path target = folder / "target";
  std::ofstream(target) << "keep";
  fs::remove(folder / "usage");
  fs::create_symlink(target, folder / "usage");
  UsagePageRepair recreate;
  recreate.recreate = true;
  ASSERT_EQ(repair_usage_page(folder.string(), recreate).status().message(), "");
  EXPECT_EQ(read_usage_page(folder.string()).state, UsagePageState::kValid);
  EXPECT_EQ(fs::file_size(target), 4u);
  fs::remove_all(folder);
}

// A tenant truncating its page while the agent repairs it: the repair may fail, the agent lives.
TEST(UsagePage, ATruncateRacingTheRepairNeverCrashesTheAgent) {
  const fs::path folder = testing::fresh_folder("usage-page-race");
  testing::make_share_folder(folder, kGpu, 4 * kGiB);
  const std::string usage = (folder / "usage").string();
  std::atomic<bool> done{false};
  std::thread tenant([&] {
    while (!done.load()) {
      (void)!truncate(usage.c_str(), 0);
      (void)!truncate(usage.c_str(), sizeof(share::UsagePage));
    }
  });
  UsagePageRepair repair;
  for (uint32_t i = 0; i < share::kMaxSlots; ++i) repair.clears.push_back({i, 0});
  repair.high_water = 0;
  int ok = 0, refused = 0;
  for (int round = 0; round < 2000; ++round) {
    Result<RepairOutcome> outcome = repair_usage_page(folder.string(), repair);
    if (outcome.is_ok()) {
      ++ok;
    } else {
      EXPECT_EQ(outcome.status().code(), StatusCode::kFailedPrecondition)
          << outcome.status().message();
      ++refused;
    }
    (void)read_usage_page(folder.string());
  }
  done = true;
  tenant.join();
  std::printf("repairs racing a truncating tenant: %d done, %d refused, no fault\n", ok, refused);
  EXPECT_EQ(ok + refused, 2000);
  fs::remove_all(folder);
}

}  // namespace
}  // namespace tessera::agent
