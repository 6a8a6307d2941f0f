// The agent's snapshot of its shares (api/node_snapshot.h) on share folders a tenant may have
// damaged: a usage page cut short, a symlink or a FIFO in its place, no limits page. Such a share
// is listed with its limits and a read_error, never with usage figures of 0 that look read.
#include "api/node_snapshot.h"
#include "observe/observer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "devices/resource_slices.h"
#include "share/share_manager.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
namespace v1 = tessera::node::v1;

constexpr uint64_t kGiB = 1ull << 30;
constexpr size_t kUsageHeader = offsetof(share::UsagePage, slots);

class NodeSnapshot : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("node-snapshot-" + std::to_string(getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_ / "shares");
    fs::create_directories(base_ / "proc");  // no processes to map: host pids stay 0

    spec_.claim_uid = "uid-1";
    spec_.pool = "node-1";
    spec_.device = "gpu-0";
    spec_.uuid = "GPU-aaaa";
    spec_.memory_bytes = 4 * kGiB;
    spec_.cores = 30;
    ClaimEntry entry;
    entry.namespace_name = "tenants";
    entry.name = "train";
    entry.state = ClaimState::kPrepareCompleted;
    entry.shares = {spec_};
    checkpoint_["uid-1"] = entry;
    folder_ = base_ / "shares" / spec_.folder_name();
    fs::create_directories(folder_);
    ASSERT_EQ(share_folder::write_limits(folder_.string(), {share_limits(spec_)}).message(), "");

    // One process holding 1 GiB, with 3 allocations denied and 2 s throttled so far.
    ASSERT_EQ(share::create_usage_page(folder_.c_str()), 0);
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page((folder_ / "usage").c_str(), true, page), 0);
    page->slot_high_water = 1;
    page->slots[0].owner = share::make_owner(100, 1, 1);
    page->slots[0].pid = 100;
    page->slots[0].bytes[0] = kGiB;
    page->slots[0].allocations_denied = 3;
    page->slots[0].throttled_ns = 2'000'000'000;
    page->slots[0].launches = 50;
    page->compute.devices[0].busy_ns = 10'000'000'000;
    share::unmap_usage_page(page);
  }
  void TearDown() override { fs::remove_all(base_); }

  // One observation of the node stamped `unix_ms`, and its snapshot.
  ObservedNode observe(int64_t unix_ms = 1000) {
    ObserverOptions observing;
    observing.shares_dir = (base_ / "shares").string();
    observing.proc_root = (base_ / "proc").string();
    observing.checkpoint = [this] { return checkpoint_; };
    observing.devices = [this] { return devices_; };
    if (!health_.empty()) observing.health = [this] { return DeviceHealthSnapshot{1, health_}; };
    observing.unix_ms = [unix_ms] { return unix_ms; };
    return {Observer(observing, nullptr).observe(), nullptr};
  }
  v1::ListSharesResponse snapshot(int64_t unix_ms = 1000) {
    NodeSnapshotSources sources;
    sources.node_name = "node-1";
    return node_snapshot(observe(unix_ms), sources);
  }

  // The share's figures are all unknown (0 in the message) and its limits still there.
  static void expect_limits_only(const v1::Share& share) {
    EXPECT_EQ(share.allocations_denied(), 0u);
    EXPECT_EQ(share.throttled_seconds(), 0.0);
    EXPECT_EQ(share.launches(), 0u);
    EXPECT_EQ(share.processes_size(), 0);
    ASSERT_EQ(share.devices_size(), 1);
    EXPECT_EQ(share.devices(0).gpu_uuid(), "GPU-aaaa");
    EXPECT_EQ(share.devices(0).memory_limit_bytes(), 4 * kGiB);
    EXPECT_EQ(share.devices(0).cores_request_percent(), 30u);
    EXPECT_EQ(share.devices(0).memory_used_bytes(), 0u);
    EXPECT_EQ(share.devices(0).gpu_seconds(), 0.0);
  }

  fs::path base_;
  fs::path folder_;
  ShareSpec spec_;
  Checkpoint checkpoint_;
  std::vector<NodeDevice> devices_;
  std::vector<DeviceHealthReport> health_;
};

TEST_F(NodeSnapshot, AReadableFolderHasItsUsageAndNoReadError) {
  const v1::ListSharesResponse node = snapshot();
  ASSERT_EQ(node.shares_size(), 1);
  const v1::Share& share = node.shares(0);
  EXPECT_EQ(share.read_error(), "");
  EXPECT_EQ(share.allocations_denied(), 3u);
  EXPECT_DOUBLE_EQ(share.throttled_seconds(), 2.0);
  EXPECT_EQ(share.launches(), 50u);
  ASSERT_EQ(share.processes_size(), 1);
  EXPECT_EQ(share.devices(0).memory_used_bytes(), kGiB);
  EXPECT_DOUBLE_EQ(share.devices(0).gpu_seconds(), 10.0);
}

TEST_F(NodeSnapshot, AGpuIsNamedByItsProductNameAsTheCliLocalModeNamesIt) {
  // The inventory as NVML lists it, published as the agent publishes it (node_devices).
  GpuInfo gpu;
  gpu.minor = 0;
  gpu.uuid = "GPU-aaaa";
  gpu.product_name = "NVIDIA H200";
  gpu.memory_bytes = 140 * kGiB;
  devices_ = node_devices({gpu});
  const v1::ListSharesResponse node = snapshot();
  ASSERT_EQ(node.gpus_size(), 1);
  EXPECT_EQ(node.gpus(0).name(), "NVIDIA H200");  // not the device name "gpu-0"
  EXPECT_EQ(node.gpus(0).uuid(), "GPU-aaaa");
  EXPECT_EQ(node.gpus(0).index(), 0u);
  EXPECT_EQ(node.gpus(0).shares(), 1u);
}

// A GPU in static MIG mode is published only through its instances: the snapshot lists the GPU
// once, in MIG mode, with each instance under it (profile, GI/CI ids, placement, memory, health,
// the shares inside it); the share names its instance's device; an unhealthy instance leaves the
// other instance healthy and makes the GPU say which one is not.
TEST_F(NodeSnapshot, MigInstancesAreListedUnderTheirGpuWithTheSharesInsideThem) {
  auto instance = [](const std::string& name, const std::string& uuid, unsigned gi,
                     unsigned start) {
    NodeDevice device{name, uuid, 0, 71168ull << 20, "NVIDIA H200"};
    MigDeviceRef mig;
    mig.parent_uuid = "GPU-aaaa";
    mig.profile = "3g.71gb";
    mig.placement = {start, 4};
    mig.multiprocessors = 60;
    mig.gi_id = gi;
    mig.ci_id = 0;
    device.mig = mig;
    return device;
  };
  devices_ = {instance("gpu-0-mig-gi1", "MIG-1111", 1, 4),
              instance("gpu-0-mig-gi2", "MIG-2222", 2, 0),
              NodeDevice{"gpu-1", "GPU-bbbb", 1, 140 * kGiB, "NVIDIA H200"}};
  checkpoint_["uid-1"].shares[0].device = "gpu-0-mig-gi2";
  checkpoint_["uid-1"].shares[0].uuid = "MIG-2222";
  auto report = [](const std::string& device, DeviceHealthState state) {
    DeviceHealthReport out;
    out.pool_name = "node-1";
    out.device_name = device;
    out.state = state;
    return out;
  };
  DeviceHealthReport sick = report("gpu-0-mig-gi1", DeviceHealthState::kUnhealthy);
  sick.message = "XID 94: contained ECC error";
  sick.xid = 94;
  health_ = {report("gpu-0-mig-gi2", DeviceHealthState::kHealthy), sick,
             report("gpu-1", DeviceHealthState::kHealthy)};
  const v1::ListSharesResponse node = snapshot();
  ASSERT_EQ(node.gpus_size(), 2);
  const v1::Gpu& gpu = node.gpus(0);
  EXPECT_EQ(gpu.uuid(), "GPU-aaaa");
  EXPECT_EQ(gpu.name(), "NVIDIA H200");
  EXPECT_EQ(gpu.index(), 0u);
  EXPECT_TRUE(gpu.mig_enabled());
  EXPECT_EQ(gpu.shares(), 1u);
  ASSERT_EQ(gpu.mig_instances_size(), 2);
  const v1::MigInstance& first = gpu.mig_instances(0);
  EXPECT_EQ(first.device(), "gpu-0-mig-gi1");
  EXPECT_EQ(first.uuid(), "MIG-1111");
  EXPECT_EQ(first.profile(), "3g.71gb");
  EXPECT_EQ(first.gpu_instance_id(), 1u);
  EXPECT_EQ(first.placement_start(), 4u);
  EXPECT_EQ(first.placement_size(), 4u);
  EXPECT_EQ(first.memory_total_bytes(), 71168ull << 20);
  EXPECT_EQ(first.multiprocessors(), 60u);
  EXPECT_FALSE(first.healthy());
  EXPECT_EQ(first.health_reason(), "xid-94: XID 94: contained ECC error");
  EXPECT_EQ(first.shares(), 0u);
  const v1::MigInstance& second = gpu.mig_instances(1);
  EXPECT_TRUE(second.healthy());
  EXPECT_EQ(second.health_reason(), "");
  EXPECT_EQ(second.shares(), 1u);
  EXPECT_FALSE(gpu.healthy());
  EXPECT_EQ(gpu.health_reason(), "MIG instance gpu-0-mig-gi1: xid-94: XID 94: contained ECC error");
  const v1::Gpu& whole = node.gpus(1);
  EXPECT_FALSE(whole.mig_enabled());
  EXPECT_EQ(whole.mig_instances_size(), 0);
  EXPECT_TRUE(whole.healthy());
  EXPECT_EQ(whole.index(), 1u);
  EXPECT_EQ(whole.memory_total_bytes(), 140 * kGiB);
  ASSERT_EQ(node.shares_size(), 1);
  EXPECT_EQ(node.shares(0).devices(0).device(), "gpu-0-mig-gi2");
  EXPECT_EQ(node.shares(0).devices(0).gpu_uuid(), "MIG-2222");
}

// Requests and limits (docs/resource-model.md): the consumed capacities are the requests, the
// config's limits above them; the class follows. The checkpoint's share says so whatever its
// folder holds.
TEST_F(NodeSnapshot, ASharesRequestsLimitsAndClassAreItsCheckpointsResolved) {
  v1::ListSharesResponse node = snapshot();
  ASSERT_EQ(node.shares_size(), 1);
  const v1::ShareDevice* device = &node.shares(0).devices(0);
  EXPECT_EQ(device->memory_request_bytes(), 4 * kGiB);
  EXPECT_EQ(device->memory_limit_bytes(), 4 * kGiB);
  EXPECT_EQ(device->cores_limit_percent(), 30u) << "no limit of its own: its request";
  EXPECT_EQ(device->qos_class(), "guaranteed");
  EXPECT_EQ(node.shares(0).qos_class(), "guaranteed");

  ShareSpec& spec = checkpoint_["uid-1"].shares[0];
  spec.config.memory_limit = 8 * kGiB;
  spec.config.cores_limit = 60;
  node = snapshot();
  device = &node.shares(0).devices(0);
  EXPECT_EQ(device->memory_request_bytes(), 4 * kGiB);
  EXPECT_EQ(device->memory_limit_bytes(), 8 * kGiB);
  EXPECT_EQ(device->cores_request_percent(), 30u);
  EXPECT_EQ(device->cores_limit_percent(), 60u);
  EXPECT_EQ(node.shares(0).qos_class(), "burstable");

  spec.cores = 0;  // no cores requested
  spec.config.cores_limit.reset();
  node = snapshot();
  device = &node.shares(0).devices(0);
  EXPECT_EQ(device->cores_request_percent(), 0u);
  EXPECT_EQ(device->cores_limit_percent(), 100u) << "best-effort may reach the whole GPU";
  EXPECT_EQ(node.shares(0).qos_class(), "best-effort");
}

// Which layer holds the share's memory: the shim alone, or the driver's partition too, with the
// driver's count beside the shim's; and the GPU's capability with its reason.
TEST_F(NodeSnapshot, TheLayerHoldingTheMemoryAndTheGpusCapabilityAreShown) {
  GpuInfo gpu;
  gpu.uuid = "GPU-aaaa";
  gpu.product_name = "NVIDIA H200";
  gpu.memory_bytes = 140 * kGiB;
  devices_ = node_devices({gpu});
  v1::ListSharesResponse node = snapshot();
  EXPECT_EQ(node.shares(0).devices(0).memory_layer(), "shim");
  EXPECT_FALSE(node.shares(0).devices(0).has_driver_memory_used_bytes());

  PartitionCapability capability;
  capability.gpus["GPU-aaaa"] = {false, "driver 580.159.04 is older than R615"};
  SharePartitionView view;
  view.driver = true;
  view.driver_used = kGiB + (500ull << 20);
  view.shim_used = kGiB;
  view.cgroups = 1;
  NodeSnapshotSources sources;
  sources.node_name = "node-1";
  sources.partition_capability = &capability;
  sources.partitions = [&] { return PartitionViews{{{spec_.name(), "GPU-aaaa"}, view}}; };
  node = node_snapshot(observe(1000), sources);
  ASSERT_EQ(node.gpus_size(), 1);
  EXPECT_FALSE(node.gpus(0).driver_partitions());
  EXPECT_EQ(node.gpus(0).driver_partitions_reason(), "driver 580.159.04 is older than R615");
  const v1::ShareDevice& device = node.shares(0).devices(0);
  EXPECT_EQ(device.memory_layer(), "both");
  EXPECT_EQ(device.driver_memory_used_bytes(), kGiB + (500ull << 20));
  EXPECT_EQ(device.memory_used_bytes(), kGiB) << "the shim's own count beside the driver's";
}

TEST_F(NodeSnapshot, AShareHasTheTimeItsClaimWasPreparedOrNoneWhenUnknown) {
  checkpoint_["uid-1"].prepared_unix_ms = 1764604800123;
  v1::ListSharesResponse node = snapshot();
  ASSERT_EQ(node.shares_size(), 1);
  EXPECT_EQ(node.shares(0).prepared_unix_ms(), 1764604800123);
  // An entry from a checkpoint written before the agent recorded it: unknown (0, AGE <unknown>).
  checkpoint_["uid-1"].prepared_unix_ms.reset();
  node = snapshot();
  ASSERT_EQ(node.shares_size(), 1);
  EXPECT_EQ(node.shares(0).prepared_unix_ms(), 0);
}

TEST_F(NodeSnapshot, NoUsagePageYetIsNothingUsedNotAnError) {
  fs::remove(folder_ / "usage");
  const v1::ListSharesResponse node = snapshot();
  ASSERT_EQ(node.shares_size(), 1);
  EXPECT_EQ(node.shares(0).read_error(), "");
  expect_limits_only(node.shares(0));
}

TEST_F(NodeSnapshot, ATruncatedUsagePageIsAReadErrorNotZeroUsage) {
  // The header survives and names one slot; half of that slot is gone.
  const size_t cut = kUsageHeader + sizeof(share::ProcessSlot) / 2;
  ASSERT_EQ(truncate((folder_ / "usage").c_str(), static_cast<off_t>(cut)), 0);
  const v1::ListSharesResponse node = snapshot();
  ASSERT_EQ(node.shares_size(), 1);
  const v1::Share& share = node.shares(0);
  EXPECT_EQ(share.read_error(), "usage page is truncated (" + std::to_string(cut) + " of " +
                                    std::to_string(sizeof(share::UsagePage)) +
                                    " bytes): " + (folder_ / "usage").string());
  expect_limits_only(share);

  // Shorter than its header.
  ASSERT_EQ(truncate((folder_ / "usage").c_str(), static_cast<off_t>(kUsageHeader / 2)), 0);
  const v1::Share again = snapshot().shares(0);
  EXPECT_NE(again.read_error().find((folder_ / "usage").string()), std::string::npos);
  EXPECT_NE(again.read_error().find("usage page is truncated"), std::string::npos)
      << again.read_error();
  expect_limits_only(again);
}

TEST_F(NodeSnapshot, ASymlinkFifoOrGarbageInPlaceOfTheUsagePageIsAReadError) {
  const fs::path usage = folder_ / "usage";
  fs::remove(usage);
  std::ofstream(base_ / "elsewhere") << std::string(sizeof(share::UsagePage), 'x');
  fs::create_symlink(base_ / "elsewhere", usage);
  v1::Share share = snapshot().shares(0);
  EXPECT_EQ(share.read_error(), "usage page is a symlink: " + usage.string());
  expect_limits_only(share);

  fs::remove(usage);
  ASSERT_EQ(mkfifo(usage.c_str(), 0666), 0);
  share = snapshot().shares(0);  // never blocks on the FIFO
  EXPECT_NE(share.read_error().find("is not a regular file"), std::string::npos)
      << share.read_error();
  expect_limits_only(share);

  fs::remove(usage);
  std::ofstream(usage) << std::string(sizeof(share::UsagePage), 'x');
  share = snapshot().shares(0);
  EXPECT_EQ(share.read_error().rfind("usage page is not valid (magic ", 0), 0u)
      << share.read_error();
  EXPECT_NE(share.read_error().find(usage.string()), std::string::npos) << share.read_error();
  expect_limits_only(share);
}

TEST_F(NodeSnapshot, NoLimitsPageIsAReadErrorWithTheCheckpointsLimits) {
  fs::remove(folder_ / "limits");
  const v1::Share share = snapshot().shares(0);
  EXPECT_NE(share.read_error().find((folder_ / "limits").string()), std::string::npos)
      << share.read_error();
  expect_limits_only(share);
}

TEST_F(NodeSnapshot, NoCoresRateAcrossASnapshotThatCouldNotRead) {
  const v1::ListSharesResponse readable = snapshot(1000);
  const fs::path usage = folder_ / "usage";
  fs::rename(usage, base_ / "usage.kept");
  fs::create_symlink(base_ / "usage.kept", usage);
  v1::ListSharesResponse unread = snapshot(2000);
  ASSERT_FALSE(unread.shares(0).read_error().empty());
  fill_cores_used(readable, unread);
  EXPECT_EQ(unread.shares(0).devices(0).cores_used_percent(), 0.0);
  // Read again: its 10 s of GPU time are not 10 s used in the last second (from an unknown 0).
  fs::remove(usage);
  fs::rename(base_ / "usage.kept", usage);
  v1::ListSharesResponse again = snapshot(3000);
  ASSERT_EQ(again.shares(0).read_error(), "");
  fill_cores_used(unread, again);
  EXPECT_EQ(again.shares(0).devices(0).cores_used_percent(), 0.0);
  // Between two readable snapshots the rate is as before.
  v1::ListSharesResponse later = snapshot(4000);
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::map_usage_page(usage.c_str(), true, page), 0);
  page->compute.devices[0].busy_ns = 10'500'000'000;
  share::unmap_usage_page(page);
  later = snapshot(4000);
  fill_cores_used(again, later);
  EXPECT_NEAR(later.shares(0).devices(0).cores_used_percent(), 50.0, 1e-9);
}

}  // namespace
}  // namespace tessera::agent
