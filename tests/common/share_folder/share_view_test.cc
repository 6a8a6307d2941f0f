// The view builder both the agent's local API and the CLI's local mode answer with.
#include "tessera/share_folder/share_view.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"

namespace tessera::share_folder {
namespace {

namespace fs = std::filesystem;
namespace v1 = tessera::node::v1;
constexpr uint64_t kGiB = 1ull << 30;

class ShareView : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("share-folder-view-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_EQ(write_limits(dir_.string(), {{"GPU-aaaa", 2 * kGiB, 50, 80}, {"GPU-bbbb"}},
                           {share::kPriorityHigh})
                  .message(),
              "");
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::open_or_create_usage_page(dir_.c_str(), page), 0);
    page->slot_high_water = 2;
    page->slots[0].owner = share::make_owner(100, 1, 1);
    page->slots[0].pid = 100;
    page->slots[0].bytes[0] = kGiB;
    page->slots[0].bytes[1] = 5;
    page->slots[0].launches = 7;
    page->slots[0].throttled_ns = 2'000'000'000;
    page->slots[1].owner = share::make_owner(101, 1, 1);  // a process that is gone
    page->slots[1].pid = 101;
    page->slots[1].allocations_denied = 3;
    page->compute.devices[0].busy_ns = 4'000'000'000;
    share::unmap_usage_page(page);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

TEST_F(ShareView, TheAgentsShareGetsTheFiguresOfItsOwnDevicesAndHostPids) {
  v1::Share share;
  share.add_devices()->set_gpu_uuid("GPU-bbbb");  // the checkpoint's device, not the page's first
  ShareViewOptions options;
  options.host_process = [](const SlotCopy& slot) {
    return std::optional(HostProcess{static_cast<int>(slot.pid) + 1000, "burn"});
  };
  fill_share_from_folder(read_share_folder(dir_.string()), options, share);
  EXPECT_EQ(share.read_error(), "");
  EXPECT_EQ(share.priority(), "");  // the caller's, from its checkpoint
  ASSERT_EQ(share.devices_size(), 1);
  EXPECT_EQ(share.devices(0).memory_used_bytes(), 5u);
  EXPECT_EQ(share.devices(0).launches(), 7u);
  EXPECT_EQ(share.launches(), 7u);
  EXPECT_DOUBLE_EQ(share.throttled_seconds(), 2.0);
  EXPECT_EQ(share.allocations_denied(), 3u);
  ASSERT_EQ(share.processes_size(), 2);
  EXPECT_EQ(share.processes(0).host_pid(), 1100);
  EXPECT_EQ(share.processes(0).command(), "burn");
  ASSERT_EQ(share.processes(0).memory_bytes_size(), 1);
  EXPECT_EQ(share.processes(0).memory_bytes(0), 5u);
}

TEST_F(ShareView, ATesseraRunShareIsWhatItsLimitsPageSays) {
  v1::Share share;
  ShareViewOptions options;
  options.devices_from_limits_page = true;
  options.counters = ShareViewOptions::Counters::kFirstDevice;
  options.host_process = [](const SlotCopy& slot) -> std::optional<HostProcess> {
    if (slot.pid == 101) return std::nullopt;  // gone: not listed
    return HostProcess{static_cast<int>(slot.pid), ""};
  };
  fill_share_from_folder(read_share_folder(dir_.string()), options, share);
  EXPECT_EQ(share.read_error(), "");
  EXPECT_EQ(share.priority(), "high");
  ASSERT_EQ(share.devices_size(), 2);
  EXPECT_EQ(share.devices(0).gpu_uuid(), "GPU-aaaa");
  EXPECT_EQ(share.devices(0).memory_limit_bytes(), 2 * kGiB);
  EXPECT_EQ(share.devices(0).cores_request_percent(), 50u);
  EXPECT_EQ(share.devices(0).cores_limit_percent(), 80u);
  EXPECT_TRUE(share.devices(1).memory_unlimited());
  EXPECT_EQ(share.devices(0).memory_used_bytes(), kGiB);
  EXPECT_DOUBLE_EQ(share.devices(0).gpu_seconds(), 4.0);
  // Per process, not per device: on the first device only, so sums over devices stay right.
  EXPECT_EQ(share.devices(0).launches(), 7u);
  EXPECT_EQ(share.devices(1).launches(), 0u);
  EXPECT_EQ(share.launches(), 0u);
  ASSERT_EQ(share.processes_size(), 1);
  EXPECT_EQ(share.processes(0).pid(), 100);
  EXPECT_EQ(share.processes(0).memory_bytes_size(), 2);
}

TEST_F(ShareView, AFolderThatCannotBeReadWholeHasNoUsageFigures) {
  ASSERT_EQ(truncate((dir_ / "usage").c_str(), 1000), 0);
  v1::Share share;
  ShareViewOptions options;
  options.devices_from_limits_page = true;
  fill_share_from_folder(read_share_folder(dir_.string()), options, share);
  EXPECT_EQ(share.read_error(), "usage page is truncated (1000 of " +
                                    std::to_string(sizeof(share::UsagePage)) +
                                    " bytes): " + (dir_ / "usage").string());
  ASSERT_EQ(share.devices_size(), 2);  // the limits are known
  EXPECT_EQ(share.devices(0).memory_limit_bytes(), 2 * kGiB);
  EXPECT_EQ(share.devices(0).memory_used_bytes(), 0u);
  EXPECT_EQ(share.processes_size(), 0);

  fs::remove(dir_ / "limits");
  v1::Share unknown;
  fill_share_from_folder(read_share_folder(dir_.string()), options, unknown);
  EXPECT_EQ(unknown.read_error(), "no limits page: " + (dir_ / "limits").string());
  EXPECT_EQ(unknown.devices_size(), 0);
}

}  // namespace
}  // namespace tessera::share_folder
