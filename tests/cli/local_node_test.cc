// The local share reader against share folders written with the common code (write_limits,
// create_usage_page), and against folders whose pages a tenant garbled.
#include "views/local_node.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_region.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
namespace v1 = tessera::node::v1;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

class LocalNode : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessera-local-node-XXXXXX";
    root_ = mkdtemp(pattern);
    options_.share_root = root_;
    options_.nvml_library = "";  // GPUs from the shares' UUIDs
    options_.now_unix_ms = [] { return int64_t{1'700'000'000'000}; };
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string make_share(const std::string& name, std::vector<share_folder::DeviceLimit> limits,
                         uint32_t priority = share::kPriorityNormal) {
    const std::string folder = root_ + "/" + name;
    fs::create_directories(folder);
    EXPECT_EQ(share_folder::write_limits(folder, limits, {priority}).message(), "");
    return folder;
  }

  // The share's usage page, mapped writable as the shim maps it.
  share::UsagePage& usage_of(const std::string& folder) {
    share::UsagePage* page = nullptr;
    EXPECT_EQ(share::open_or_create_usage_page(folder.c_str(), page), 0);
    mapped_.push_back(page);
    return *page;
  }

  // Claims slot `index` for process `pid` with `start_time` and the caller's pid namespace.
  static share::ProcessSlot& claim(share::UsagePage& page, uint32_t index, uint32_t pid,
                                   uint64_t start_time) {
    uint64_t pid_namespace = 0;
    EXPECT_EQ(share::read_pid_namespace("/proc", share::kSelfPid, pid_namespace), 0);
    share::ProcessSlot& slot = page.slots[index];
    slot.owner.store(share::make_owner(pid, pid_namespace, start_time));
    slot.pid.store(pid);
    slot.start_time.store(start_time);
    if (page.slot_high_water.load() <= index) page.slot_high_water.store(index + 1);
    return slot;
  }

  static uint64_t own_start_time() {
    uint64_t start = 0;
    EXPECT_EQ(share::read_process_start_time("/proc", share::kSelfPid, start), 0);
    return start;
  }

  void write_owner(const std::string& folder, int pid, uint64_t start_time) {
    std::ofstream(folder + "/owner") << pid << " " << start_time << "\n";
  }

  Result<v1::ListSharesResponse> read() { return read_local_node(options_); }

  void TearDownPages() {
    for (share::UsagePage* page : mapped_) share::unmap_usage_page(page);
    mapped_.clear();
  }
  ~LocalNode() override { TearDownPages(); }

  std::string root_;
  LocalNodeOptions options_;
  std::vector<share::UsagePage*> mapped_;
};

TEST_F(LocalNode, NoShareRootIsAnEmptyNode) {
  options_.share_root = root_ + "/absent";
  const auto node = read();
  ASSERT_TRUE(node.is_ok()) << node.status().message();
  EXPECT_EQ(node->shares_size(), 0);
  EXPECT_EQ(node->gpus_size(), 0);
  EXPECT_FALSE(node->node().empty());
  EXPECT_EQ(node->sampled_unix_ms(), 1'700'000'000'000);
}

TEST_F(LocalNode, ReadsLimitsUsageAndLiveProcesses) {
  const std::string folder =
      make_share("alpha", {{"GPU-aaaa", 4 * kGiB, 30, 60}, {"GPU-bbbb", share::kUnlimited, 100}},
                 share::kPriorityHigh);
  share::UsagePage& page = usage_of(folder);
  share::ProcessSlot& self = claim(page, 0, static_cast<uint32_t>(getpid()), own_start_time());
  self.bytes[0].store(1 * kGiB);
  self.bytes[1].store(256 * kMiB);
  self.launches.store(100);
  self.throttled_ns.store(2'000'000'000);
  self.gpu_busy_ns.store(500'000'000);
  self.allocations_denied.store(3);
  // A process killed before it cleared its slot: its bytes still count (as the shim counts
  // them), but it is no process of the share any more.
  share::ProcessSlot& gone = claim(page, 1, 4'000'000, 12345);
  gone.bytes[0].store(512 * kMiB);
  gone.launches.store(5);
  page.compute.devices[0].busy_ns.store(1'500'000'000);

  const auto node = read();
  ASSERT_TRUE(node.is_ok()) << node.status().message();
  ASSERT_EQ(node->shares_size(), 1);
  const v1::Share& share = node->shares(0);
  EXPECT_EQ(share.name(), "alpha");
  EXPECT_EQ(share.folder(), folder);
  EXPECT_EQ(share.source(), "tessera-run");
  EXPECT_EQ(share.priority(), "high");
  EXPECT_GT(share.prepared_unix_ms(), 0);
  ASSERT_EQ(share.devices_size(), 2);
  const v1::ShareDevice& first = share.devices(0);
  EXPECT_EQ(first.gpu_uuid(), "GPU-aaaa");
  EXPECT_FALSE(first.memory_unlimited());
  EXPECT_EQ(first.memory_limit_bytes(), 4 * kGiB);
  EXPECT_EQ(first.memory_used_bytes(), 1 * kGiB + 512 * kMiB);
  EXPECT_EQ(first.cores_request_percent(), 30u);
  EXPECT_EQ(first.cores_limit_percent(), 60u);
  EXPECT_DOUBLE_EQ(first.gpu_seconds(), 1.5);
  EXPECT_EQ(first.launches(), 105u);
  EXPECT_DOUBLE_EQ(first.throttled_seconds(), 2.0);
  EXPECT_EQ(first.allocations_denied(), 3u);
  const v1::ShareDevice& second = share.devices(1);
  EXPECT_TRUE(second.memory_unlimited());
  EXPECT_EQ(second.memory_used_bytes(), 256 * kMiB);
  EXPECT_EQ(second.cores_request_percent(), 100u);
  EXPECT_EQ(second.launches(), 0u);  // share-wide counters are on the first device only

  ASSERT_EQ(share.processes_size(), 1);
  const v1::Process& process = share.processes(0);
  EXPECT_EQ(process.pid(), getpid());
  EXPECT_EQ(process.host_pid(), getpid());
  std::ifstream comm("/proc/self/comm");
  std::string own_command;
  std::getline(comm, own_command);
  EXPECT_EQ(process.command(), own_command);
  ASSERT_EQ(process.memory_bytes_size(), 2);
  EXPECT_EQ(process.memory_bytes(0), 1 * kGiB);
  EXPECT_EQ(process.launches(), 100u);
  EXPECT_DOUBLE_EQ(process.gpu_seconds(), 0.5);

  // Without NVML the GPUs are the shares' UUIDs, marked as not seen.
  ASSERT_EQ(node->gpus_size(), 2);
  EXPECT_EQ(node->gpus(0).uuid(), "GPU-aaaa");
  EXPECT_EQ(node->gpus(0).shares(), 1u);
  EXPECT_FALSE(node->gpus(0).healthy());
  EXPECT_EQ(node->gpus(0).health_reason(), "NVML not asked");
}

TEST_F(LocalNode, SharesAreSortedAndCountedPerGpu) {
  make_share("b", {{"GPU-aaaa", kGiB, 100}});
  make_share("a", {{"GPU-aaaa", kGiB, 100}});
  fs::create_directories(root_ + "/.hidden");
  std::ofstream(root_ + "/not-a-folder") << "x";
  const auto node = read();
  ASSERT_TRUE(node.is_ok());
  ASSERT_EQ(node->shares_size(), 2);
  EXPECT_EQ(node->shares(0).name(), "a");
  EXPECT_EQ(node->shares(1).name(), "b");
  ASSERT_EQ(node->gpus_size(), 1);
  EXPECT_EQ(node->gpus(0).shares(), 2u);
}

TEST_F(LocalNode, AShareWhoseTesseraRunIsGoneIsALeftover) {
  const std::string live = make_share("live", {{"GPU-aaaa", kGiB, 100}});
  write_owner(live, getpid(), own_start_time());
  const std::string left = make_share("left", {{"GPU-aaaa", kGiB, 100}});
  write_owner(left, getpid(), own_start_time() + 1);  // the pid was reused since
  auto node = read();
  ASSERT_TRUE(node.is_ok());
  ASSERT_EQ(node->shares_size(), 1);
  EXPECT_EQ(node->shares(0).name(), "live");

  options_.include_stale = true;
  node = read();
  ASSERT_TRUE(node.is_ok());
  EXPECT_EQ(node->shares_size(), 2);

  // Named on the command line, it is shown whatever its owner.
  options_.include_stale = false;
  options_.share_folders = {left};
  node = read();
  ASSERT_TRUE(node.is_ok());
  ASSERT_EQ(node->shares_size(), 1);
  EXPECT_EQ(node->shares(0).name(), "left");
}

TEST_F(LocalNode, ATruncatedUsagePageIsAProblemOfThatShareOnly) {
  const std::string bad = make_share("bad", {{"GPU-aaaa", 2 * kGiB, 50}});
  const std::string good = make_share("good", {{"GPU-aaaa", kGiB, 100}});
  usage_of(good).slot_high_water.store(0);
  // A page cut short (a tenant truncated the file): no mapping of it could be read safely.
  {
    share::UsagePage& page = usage_of(bad);
    claim(page, 0, static_cast<uint32_t>(getpid()), own_start_time()).bytes[0].store(kGiB);
  }
  TearDownPages();
  ASSERT_EQ(truncate((bad + "/usage").c_str(), 1000), 0);

  const auto node = read();
  ASSERT_TRUE(node.is_ok()) << node.status().message();
  ASSERT_EQ(node->shares_size(), 2);
  // Its limits are still shown; its usage is not made up: it says why it is unknown.
  EXPECT_EQ(node->shares(0).name(), "bad");
  EXPECT_EQ(node->shares(0).devices(0).memory_limit_bytes(), 2 * kGiB);
  EXPECT_EQ(node->shares(0).devices(0).memory_used_bytes(), 0u);
  EXPECT_EQ(node->shares(0).processes_size(), 0);
  EXPECT_EQ(node->shares(0).read_error(), "usage page is truncated (1000 of " +
                                              std::to_string(sizeof(share::UsagePage)) +
                                              " bytes): " + bad + "/usage");
  EXPECT_EQ(node->shares(1).name(), "good");
  EXPECT_EQ(node->shares(1).read_error(), "");
}

TEST_F(LocalNode, GarbageSymlinksAndFifosAreRefusedWithoutBlocking) {
  const std::string garbage = make_share("garbage", {{"GPU-aaaa", kGiB, 100}});
  {
    std::ofstream file(garbage + "/usage", std::ios::binary);
    const std::string noise(sizeof(share::UsagePage), '\x5a');
    file << noise;
  }
  const std::string linked = make_share("linked", {{"GPU-aaaa", kGiB, 100}});
  ASSERT_EQ(symlink("/etc/passwd", (linked + "/usage").c_str()), 0);
  const std::string piped = make_share("piped", {{"GPU-aaaa", kGiB, 100}});
  ASSERT_EQ(mkfifo((piped + "/usage").c_str(), 0600), 0);
  const std::string short_limits = root_ + "/short";
  fs::create_directories(short_limits);
  std::ofstream(short_limits + "/limits") << "TLIM";

  const auto node = read();
  ASSERT_TRUE(node.is_ok());
  ASSERT_EQ(node->shares_size(), 4);
  const auto& shares = node->shares();
  EXPECT_EQ(shares[0].name(), "garbage");
  EXPECT_NE(shares[0].read_error().find("usage page is not valid"), std::string::npos)
      << shares[0].read_error();
  EXPECT_EQ(shares[1].name(), "linked");
  EXPECT_EQ(shares[1].read_error(), "usage page is a symlink: " + linked + "/usage");
  EXPECT_EQ(shares[2].name(), "piped");
  EXPECT_EQ(shares[2].read_error(), "usage page is not a regular file: " + piped + "/usage");
  EXPECT_EQ(shares[3].name(), "short");
  EXPECT_EQ(shares[3].read_error(), "limits page is truncated (4 of " +
                                        std::to_string(sizeof(share::LimitsPage)) +
                                        " bytes): " + short_limits + "/limits");
  EXPECT_EQ(node->shares(3).devices_size(), 0);
}

TEST_F(LocalNode, AnUnreadableShareRootIsAnError) {
  options_.share_root = root_ + "/file";
  std::ofstream(options_.share_root) << "x";
  EXPECT_TRUE(read().is_ok());  // not a folder: no shares
  if (geteuid() == 0) GTEST_SKIP() << "root reads folders whatever their mode";
  options_.share_root = root_ + "/locked";
  fs::create_directories(options_.share_root);
  chmod(options_.share_root.c_str(), 0);
  const auto node = read();
  chmod(options_.share_root.c_str(), 0700);
  ASSERT_FALSE(node.is_ok());
  EXPECT_NE(node.status().message().find("cannot list the share folder"), std::string::npos);
}

#ifdef SIMGPU_LIB_DIR
TEST_F(LocalNode, GpusComeFromNvmlWhenItLoads) {
  setenv("SIMGPU_DEVICES",
         "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0;name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0",
         1);
  setenv("SIMGPU_STATE", (root_ + "/simgpu.state").c_str(), 1);
  options_.nvml_library = std::string(SIMGPU_LIB_DIR) + "/libnvidia-ml.so.1";
  make_share("on-nvml-gpu", {{"GPU-not-on-this-node", kGiB, 100}});
  const auto node = read();
  ASSERT_TRUE(node.is_ok());
  ASSERT_EQ(node->gpus_size(), 3);
  EXPECT_EQ(node->gpus(0).name(), "NVIDIA H200");
  EXPECT_EQ(node->gpus(0).index(), 0u);
  EXPECT_EQ(node->gpus(0).memory_total_bytes(), 16 * kGiB);
  EXPECT_TRUE(node->gpus(0).healthy());
  EXPECT_EQ(node->gpus(1).index(), 1u);
  EXPECT_TRUE(node->gpus(1).uuid().rfind("GPU-", 0) == 0);
  // A UUID the share names that NVML does not list is shown, and marked.
  EXPECT_EQ(node->gpus(2).uuid(), "GPU-not-on-this-node");
  EXPECT_EQ(node->gpus(2).health_reason(), "not listed by NVML");
  EXPECT_EQ(node->gpus(2).shares(), 1u);
}
#endif

TEST(Rates, ComeFromCounterDifferencesOverTheInterval) {
  v1::ListSharesResponse before, now;
  before.set_sampled_unix_ms(10'000);
  now.set_sampled_unix_ms(12'000);
  auto add = [](v1::ListSharesResponse& node, const std::string& name, double gpu_seconds,
                double throttled) {
    v1::ShareDevice& device = *node.add_shares()->add_devices();
    node.mutable_shares(node.shares_size() - 1)->set_name(name);
    device.set_gpu_uuid("GPU-a");
    device.set_gpu_seconds(gpu_seconds);
    device.set_throttled_seconds(throttled);
  };
  add(before, "busy", 10.0, 1.0);
  add(now, "busy", 10.6, 2.0);
  add(before, "recreated", 50.0, 9.0);
  add(now, "recreated", 1.0, 0.0);
  add(before, "many-threads", 0, 0);
  add(now, "many-threads", 0, 8.0);
  add(now, "new", 3.0, 0);

  const auto rates = rates_between(before, now);
  ASSERT_EQ(rates.size(), 3u);
  EXPECT_NEAR(rates.at(share_device_key("busy", "GPU-a")).cores_used_percent, 30.0, 1e-9);
  EXPECT_DOUBLE_EQ(rates.at(share_device_key("busy", "GPU-a")).throttled_percent, 50.0);
  EXPECT_DOUBLE_EQ(rates.at(share_device_key("recreated", "GPU-a")).cores_used_percent, 0.0);
  EXPECT_DOUBLE_EQ(rates.at(share_device_key("many-threads", "GPU-a")).throttled_percent, 100.0);
  EXPECT_EQ(rates.count(share_device_key("new", "GPU-a")), 0u);

  apply_rates(before, now);
  EXPECT_NEAR(now.shares(0).devices(0).cores_used_percent(), 30.0, 1e-9);
  // No interval, no rates.
  EXPECT_TRUE(rates_between(now, now).empty());
}

TEST(Rates, NoneForAShareThatCouldNotBeReadInEitherSnapshot) {
  v1::ListSharesResponse first, unread, again;
  first.set_sampled_unix_ms(10'000);
  unread.set_sampled_unix_ms(11'000);
  again.set_sampled_unix_ms(12'000);
  auto add = [](v1::ListSharesResponse& node, double gpu_seconds, const std::string& error) {
    v1::Share& share = *node.add_shares();
    share.set_name("s");
    share.set_read_error(error);
    v1::ShareDevice& device = *share.add_devices();
    device.set_gpu_uuid("GPU-a");
    device.set_gpu_seconds(gpu_seconds);
  };
  add(first, 100.0, "");
  add(unread, 0, "usage page is truncated");
  add(again, 100.5, "");
  // Unknown is not 0: no drop to 0 and no jump from 0 to everything since the share began.
  EXPECT_TRUE(rates_between(first, unread).empty());
  EXPECT_TRUE(rates_between(unread, again).empty());
  apply_rates(unread, again);
  EXPECT_EQ(again.shares(0).devices(0).cores_used_percent(), 0.0);
  EXPECT_NEAR(rates_between(first, again).at(share_device_key("s", "GPU-a")).cores_used_percent,
              25.0, 1e-9);
}

}  // namespace
}  // namespace tessera::cli
