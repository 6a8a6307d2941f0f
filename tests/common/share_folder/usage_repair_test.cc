// The agent's guarded writes to a usage page: slot reclaim (the process watcher) and repair (the
// out-of-band checks), against pages a tenant scribbles on, replaces and truncates meanwhile.
#include "tessera/share_folder/usage_repair.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_folder/snapshot.h"

namespace tessera::share_folder {
namespace {

namespace fs = std::filesystem;
constexpr char kGpu[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr uint64_t kGiB = 1ull << 30;

fs::path fresh_folder(const std::string& name) {
  const fs::path base = fs::temp_directory_path() / (name + "-" + std::to_string(getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  return base;
}

void make_share_folder(const fs::path& folder) {
  DeviceLimit device;
  device.uuid = kGpu;
  device.memory_limit = 4 * kGiB;
  ASSERT_EQ(write_limits(folder.string(), {device}).message(), "");
  ASSERT_EQ(share::create_usage_page(folder.c_str()), 0);
}

// Writes one slot as a shim would (and raises the high-water mark unless told not to).
void write_slot(const fs::path& folder, uint32_t index, uint64_t owner, uint64_t bytes,
                bool raise_mark = true) {
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::map_usage_page((folder / "usage").c_str(), true, page), 0);
  page->slots[index].owner.store(owner);
  page->slots[index].bytes[0].store(bytes);
  if (raise_mark && page->slot_high_water.load() < index + 1)
    page->slot_high_water.store(index + 1);
  share::unmap_usage_page(page);
}

// The slot `index` as the one reader copies it (zero when it holds nothing).
SlotCopy slot_at(const fs::path& folder, uint32_t index) {
  for (const SlotCopy& slot : read_usage_page((folder / "usage").string()).slots)
    if (slot.index == index) return slot;
  return SlotCopy{};
}

TEST(UsageRepair, ClearsOnlyTheOwnersItWasToldAndSetsOnlyUnchangedFigures) {
  const fs::path folder = fresh_folder("usage-repair-slots");
  make_share_folder(folder);
  write_slot(folder, 0, 10, kGiB);
  write_slot(folder, 1, 11, 2 * kGiB);
  write_slot(folder, 2, 12, 0);
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
  const UsagePageCopy page = read_usage_page((folder / "usage").string());
  ASSERT_EQ(page.problem, UsageProblem::kNone);
  EXPECT_EQ(slot_at(folder, 0).owner, 0u);
  EXPECT_EQ(slot_at(folder, 0).bytes[0], 0u);
  EXPECT_EQ(slot_at(folder, 1).owner, 11u);
  EXPECT_EQ(slot_at(folder, 1).bytes[0], 2 * kGiB);
  EXPECT_EQ(slot_at(folder, 2).bytes[0], 3 * kGiB);
  EXPECT_EQ(page.high_water, 3u);
  fs::remove_all(folder);
}

TEST(UsageRepair, RestoresAHighWaterMarkAHeaderAndATruncatedOrReplacedPage) {
  const fs::path folder = fresh_folder("usage-repair-shape");
  const std::string usage = (folder / "usage").string();
  make_share_folder(folder);
  write_slot(folder, 5, 10, kGiB);
  {  // The tenant resets the mark and scribbles the header.
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page(usage.c_str(), true, page), 0);
    page->slot_high_water.store(0);
    page->version = 99;
    share::unmap_usage_page(page);
  }
  EXPECT_EQ(read_usage_page(usage).problem, UsageProblem::kBadHeader);
  UsagePageRepair repair;
  repair.rewrite_header = true;
  repair.high_water = 6;
  ASSERT_EQ(repair_usage_page(folder.string(), repair).status().message(), "");
  EXPECT_EQ(read_usage_page(usage).problem, UsageProblem::kNone);
  EXPECT_EQ(read_usage_page(usage).high_water, 6u);
  // A mark no shim writes (above kMaxSlots) is lowered to the sound value.
  {
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page(usage.c_str(), true, page), 0);
    page->slot_high_water.store(100000);
    share::unmap_usage_page(page);
  }
  ASSERT_EQ(repair_usage_page(folder.string(), repair).status().message(), "");
  EXPECT_EQ(read_usage_page(usage).high_water, 6u);

  // Truncated: extended to a whole page with a shim's header; the shim can map it again.
  ASSERT_EQ(truncate(usage.c_str(), 10), 0);
  EXPECT_EQ(read_usage_page(usage).problem, UsageProblem::kTruncated);
  UsagePageRepair extend;
  extend.extend = true;
  extend.high_water = 0;
  ASSERT_EQ(repair_usage_page(folder.string(), extend).status().message(), "");
  EXPECT_EQ(read_usage_page(usage).problem, UsageProblem::kNone);
  share::UsagePage* mapped = nullptr;
  EXPECT_EQ(share::map_usage_page(usage.c_str(), true, mapped), 0);
  share::unmap_usage_page(mapped);

  // Replaced by a symlink: removed (the target untouched) and created anew.
  const fs::path target = folder / "target";
  std::ofstream(target) << "keep";
  fs::remove(usage);
  fs::create_symlink(target, usage);
  EXPECT_EQ(read_usage_page(usage).problem, UsageProblem::kSymlink);
  UsagePageRepair recreate;
  recreate.recreate = true;
  ASSERT_EQ(repair_usage_page(folder.string(), recreate).status().message(), "");
  EXPECT_EQ(read_usage_page(usage).problem, UsageProblem::kNone);
  EXPECT_EQ(fs::file_size(target), 4u);
  fs::remove_all(folder);
}

// A tenant truncating its page while the agent repairs it: the repair may fail, the agent lives.
// The compute area's repair: counters put back only where they still hold what the read saw, and
// gates only ever closed with buckets only ever lowered (no credit), also on a page recreated in
// place of a FIFO; devices not named are left as they are.
TEST(UsageRepair, ComputeCountersGoBackAndGatesOnlyEverClose) {
  const fs::path folder = fresh_folder("usage-repair-compute");
  ASSERT_NO_FATAL_FAILURE(make_share_folder(folder));
  {
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page((folder / "usage").c_str(), true, page), 0);
    page->compute.devices[0].busy_ns.store(1000);
    page->compute.devices[0].others_busy_ns.store(77);
    page->compute.devices[0].tokens_ns.store(7'000'000);  // credit the tenant gave itself
    page->compute.devices[1].tokens_ns.store(-10'000'000);
    page->compute.devices[2].tokens_ns.store(3'000'000);
    page->compute.closed_mask.store(0);
    share::unmap_usage_page(page);
  }
  UsagePageRepair repair;
  using Counter = ComputeRepair::Counter;
  repair.compute.counters = {{0, Counter::kBusy, 1000, 9000},
                             {0, Counter::kOthersBusy, 78, 500},  // changed since: left
                             {0, Counter::kClosed, 0, 4000}};
  repair.compute.close_gates = 0b11;
  repair.compute.tokens_ns[0] = -3'000'000;
  repair.compute.tokens_ns[1] = 0;  // device 1 owes more already: kept
  Result<RepairOutcome> outcome = repair_usage_page(folder.string(), repair);
  ASSERT_EQ(outcome.status().message(), "");
  EXPECT_EQ(outcome->counters_set, 2u);
  EXPECT_EQ(outcome->skipped, 1u);
  EXPECT_EQ(outcome->gates_closed, 2u);
  const UsagePageCopy page = read_usage_page((folder / "usage").string());
  EXPECT_EQ(page.compute[0].busy_ns, 9000u);
  EXPECT_EQ(page.compute[0].others_busy_ns, 77u);
  EXPECT_EQ(page.compute[0].closed_ns, 4000u);
  EXPECT_TRUE(page.compute[0].closed);
  EXPECT_EQ(page.compute[0].tokens_ns, -3'000'000);
  EXPECT_TRUE(page.compute[1].closed);
  EXPECT_EQ(page.compute[1].tokens_ns, -10'000'000);
  EXPECT_FALSE(page.compute[2].closed);
  EXPECT_EQ(page.compute[2].tokens_ns, 3'000'000);
  EXPECT_EQ(compute_counter_name(Counter::kOthersBusy), "others_busy_ns");

  // A FIFO in the page's place: the new page starts with the gates closed and the counters back.
  fs::remove(folder / "usage");
  ASSERT_EQ(mkfifo((folder / "usage").c_str(), 0666), 0);
  UsagePageRepair recreate;
  recreate.recreate = true;
  recreate.compute.counters = {{0, Counter::kBusy, 0, 9000}};
  recreate.compute.close_gates = 0b1;
  recreate.compute.tokens_ns[0] = -1'000'000;
  outcome = repair_usage_page(folder.string(), recreate);
  ASSERT_EQ(outcome.status().message(), "");
  const UsagePageCopy fresh = read_usage_page((folder / "usage").string());
  EXPECT_EQ(fresh.problem, UsageProblem::kNone);
  EXPECT_EQ(fresh.compute[0].busy_ns, 9000u);
  EXPECT_TRUE(fresh.compute[0].closed);
  EXPECT_EQ(fresh.compute[0].tokens_ns, -1'000'000);
  EXPECT_FALSE(fresh.compute[1].closed);
  fs::remove_all(folder);
}

TEST(UsageRepair, ATruncateRacingTheRepairNeverCrashesTheAgent) {
  const fs::path folder = fresh_folder("usage-repair-race");
  make_share_folder(folder);
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
    (void)read_usage_page(usage);
  }
  done = true;
  tenant.join();
  std::printf("repairs racing a truncating tenant: %d done, %d refused, no fault\n", ok, refused);
  EXPECT_EQ(ok + refused, 2000);
  fs::remove_all(folder);
}

TEST(UsagePageMapping, RefusesWhatIsNoUsagePage) {
  const fs::path folder = fresh_folder("usage-mapping-refuses");
  std::ofstream(folder / "usage") << "not a page";
  EXPECT_EQ(UsagePageMapping::open((folder / "usage").string()).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_EQ(symlink("/etc/passwd", (folder / "link").c_str()), 0);
  EXPECT_EQ(UsagePageMapping::open((folder / "link").string()).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_EQ(mkfifo((folder / "fifo").c_str(), 0666), 0);
  EXPECT_FALSE(UsagePageMapping::open((folder / "fifo").string()).is_ok());  // never blocks
  EXPECT_EQ(UsagePageMapping::open((folder / "absent").string()).status().code(),
            StatusCode::kNotFound);
  fs::remove_all(folder);
}

TEST(UsagePageMapping, ReclaimClearsEverySlotOfThatOwnerOnly) {
  const fs::path folder = fresh_folder("usage-mapping-reclaim");
  make_share_folder(folder);
  write_slot(folder, 0, 10, kGiB);
  write_slot(folder, 1, 11, kGiB);
  write_slot(folder, 2, 10, 2 * kGiB);
  write_slot(folder, 7, 10, kGiB, /*raise_mark=*/false);  // above the mark: no shim's slot
  Result<UsagePageMapping> mapping = UsagePageMapping::open((folder / "usage").string());
  ASSERT_TRUE(mapping.is_ok()) << mapping.status().message();
  Result<int> cleared = mapping->reclaim_owner(10, share::make_owner(1, 1, 1));
  ASSERT_TRUE(cleared.is_ok()) << cleared.status().message();
  EXPECT_EQ(*cleared, 2);
  EXPECT_EQ(read_usage_page((folder / "usage").string()).live_owners(), std::vector<uint64_t>{11});
  EXPECT_EQ(slot_at(folder, 2).bytes[0], 0u);
  EXPECT_EQ(slot_at(folder, 7).owner, 10u);
  EXPECT_EQ(*mapping->reclaim_owner(10, share::make_owner(1, 1, 1)), 0);
  fs::remove_all(folder);
}

// A tenant truncating the page under the watcher's long-lived mapping, while slots are reclaimed
// through it: every reclaim ends (cleared, or an error), none faults the process.
TEST(UsagePageMapping, AReclaimUnderAConcurrentTruncateIsAnErrorNeverAFault) {
  const fs::path folder = fresh_folder("usage-mapping-race");
  make_share_folder(folder);
  const std::string usage = (folder / "usage").string();
  Result<UsagePageMapping> mapping = UsagePageMapping::open(usage);
  ASSERT_TRUE(mapping.is_ok()) << mapping.status().message();
  std::atomic<bool> done{false};
  std::atomic<int> cuts{0};
  std::thread tenant([&] {
    while (!done.load()) {
      (void)!truncate(usage.c_str(), 0);
      (void)!truncate(usage.c_str(), sizeof(share::UsagePage));
      cuts.fetch_add(1);
    }
  });
  int ok = 0, refused = 0;
  // At least 2000 reclaims, and on until the tenant has cut the page a few hundred times.
  for (int round = 0; round < 2000 || (cuts.load() < 300 && round < 2'000'000); ++round) {
    Result<int> cleared = mapping->reclaim_owner(10, share::make_owner(1, 1, 1));
    if (cleared.is_ok()) {
      ++ok;
    } else {
      EXPECT_EQ(cleared.status().code(), StatusCode::kFailedPrecondition)
          << cleared.status().message();
      ++refused;
    }
  }
  done = true;
  tenant.join();
  std::printf("reclaims racing a truncating tenant (%d cuts): %d done, %d refused, no fault\n",
              cuts.load(), ok, refused);
  // Cut to nothing under the mapping: the reclaim's first read faults (SIGBUS), and is refused.
  ASSERT_EQ(truncate(usage.c_str(), 0), 0);
  const Result<int> faulted = mapping->reclaim_owner(10, share::make_owner(1, 1, 1));
  EXPECT_EQ(faulted.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(faulted.status().message().find("truncated under its mapping"), std::string::npos)
      << faulted.status().message();
  // Whole again but zeroed: no valid header, refused without a fault.
  ASSERT_EQ(truncate(usage.c_str(), sizeof(share::UsagePage)), 0);
  EXPECT_EQ(mapping->reclaim_owner(10, share::make_owner(1, 1, 1)).status().code(),
            StatusCode::kFailedPrecondition);
  fs::remove_all(folder);
}

}  // namespace
}  // namespace tessera::share_folder
