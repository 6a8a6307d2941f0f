// The agent's CDI specs applied by a real container runtime: Debian's podman (runc) starts a
// container from a minimal image with the CDI devices prepare returned, as kubelet would hand
// them to containerd or CRI-O. The driver comes from a fake driver root that holds the simulated
// GPU's libcuda.so.1 / libnvidia-ml.so.1 and real device nodes (made with mknod); the simulator's
// state file is shared into the container (it stands in for the GPU). Inside, memory-fill must
// see its share's memory as the GPU's and stop at the limit, and the image's own LD_PRELOAD and
// LD_LIBRARY_PATH must still work.
//
// Needs root (device nodes, /var/run/cdi) and a podman that can start a container; where either
// is missing every test here is skipped with one line saying why.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "apiserver/claim_fixture.h"
#include "devices/resource_slices.h"
#include "podman.h"
#include "share/share_manager.h"
#include "simulated_node.h"
#include "tenant_claims.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kContextOverhead = 500ull << 20;  // the simulator's default per context
constexpr char kImage[] = "localhost/tessera-cdi-test:1";
constexpr char kImagePreload[] = "/opt/image/lib/libtessera_image_preload.so";
constexpr char kImagePreloadSays[] =
    "image LD_PRELOAD loaded; its dependency was found through the image's LD_LIBRARY_PATH";
constexpr char kOneGpu[] = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";
constexpr char kTwoGpus[] =
    "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0;name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";

Status make_device_node(const fs::path& path, unsigned major, unsigned minor) {
  std::error_code error;
  fs::create_directories(path.parent_path(), error);
  fs::remove(path, error);
  if (mknod(path.c_str(), S_IFCHR | 0666, makedev(major, minor)) != 0)
    return failed_precondition("mknod " + path.string() + ": " + std::strerror(errno));
  return Status::ok();
}

// A driver root as the host (or NVIDIA's driver container) would have it, holding the simulated
// driver: its libraries under their real names and .so.1 links, nvidia-smi, and device nodes.
Status make_driver_root(const fs::path& root, int gpus) {
  const fs::path lib = root / "usr/lib/x86_64-linux-gnu";
  std::error_code error;
  fs::create_directories(lib, error);
  fs::create_directories(root / "usr/bin", error);
  for (const std::string name : {"libcuda.so", "libnvidia-ml.so"}) {
    const std::string versioned = name + ".580.65.06";
    fs::copy_file(std::string(SIMGPU_LIB_DIR) + "/" + name + ".1", lib / versioned,
                  fs::copy_options::overwrite_existing, error);
    if (error) return internal_error("copying the simulated " + name + ": " + error.message());
    fs::remove(lib / (name + ".1"), error);
    fs::create_symlink(versioned, lib / (name + ".1"), error);
    if (error) return internal_error("linking " + name + ".1: " + error.message());
  }
  // nvidia-smi: a program that exits 0 (the container only has to find it).
  fs::copy_file(fs::canonical(NVIDIA_SMI_STANDIN), root / "usr/bin/nvidia-smi",
                fs::copy_options::overwrite_existing, error);
  if (error) return internal_error("copying nvidia-smi: " + error.message());
  for (int minor = 0; minor < gpus; ++minor)
    TESSERA_RETURN_IF_ERROR(
        make_device_node(root / ("dev/nvidia" + std::to_string(minor)), 195, minor));
  TESSERA_RETURN_IF_ERROR(make_device_node(root / "dev/nvidiactl", 195, 255));
  TESSERA_RETURN_IF_ERROR(make_device_node(root / "dev/nvidia-uvm", 510, 0));
  return Status::ok();
}

class ContainerRuntimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) {
      skip_reason_ = "needs root (device nodes in the driver root, specs in /var/run/cdi)";
      return;
    }
    base_ =
        new fs::path(fs::temp_directory_path() / ("tessera-podman-" + std::to_string(getpid())));
    Result<testing::Podman> podman = testing::Podman::start(*base_ / "podman");
    if (!podman.is_ok()) {
      skip_reason_ = podman.status().message();
      return;
    }
    podman_ = new testing::Podman(std::move(*podman));
    // A minimal image: memory-fill with the libraries a C++ program's base image holds (those the
    // shim and the driver need too), and its own LD_PRELOAD library, whose dependency only its
    // LD_LIBRARY_PATH finds.
    const Status imported = podman_->import_image(
        kImage,
        {{MEMORY_FILL, "/usr/local/bin/memory-fill"},
         {"/usr/bin/env", "/usr/bin/env"},
         {IMAGE_PRELOAD_LIB, kImagePreload},
         {IMAGE_DEPENDENCY_LIB, "/opt/image/lib/libtessera_image_dependency.so"}},
        {std::string("LD_PRELOAD=") + kImagePreload, "LD_LIBRARY_PATH=/opt/image/lib"},
        {LIBVGPU_SO, std::string(SIMGPU_LIB_DIR) + "/libcuda.so.1"});
    // Podman works, so a missing image is this test's failure, not a reason to skip.
    if (!imported.is_ok()) image_error_ = "the test image: " + imported.message();
  }
  static void TearDownTestSuite() {
    if (podman_) podman_->remove_storage();
    std::error_code ignored;
    if (base_) fs::remove_all(*base_, ignored);
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << "podman: " << skip_reason_;
    ASSERT_EQ(image_error_, "");
    folder_ = *base_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(folder_);
    fs::create_directories(folder_ / "simgpu");
  }
  void TearDown() override {
    // Whatever a failed test left prepared: its spec must not stay in /var/run/cdi.
    if (manager_) {
      for (const auto& [name, body] : kube_.bodies)
        (void)manager_->unprepare({"tenants", json::parse(body)["metadata"]["uid"], name});
    }
    manager_.reset();
    fs::remove_all(folder_);
  }

  // A node with `devices` (SIMGPU_DEVICES) and its agent's share manager, which writes its specs
  // where podman reads them. With TESSERA_REAL_DRIVER_ROOT set (scripts/gpu-checks/container.sh)
  // the node's own GPUs and driver are used instead of the simulator and the fake driver root.
  void start_node(const std::string& devices, int gpus) {
    DriverOptions driver;
    driver.mode = DriverMode::kDriverRoot;
    if (const char* real_root = std::getenv("TESSERA_REAL_DRIVER_ROOT")) {
      driver.driver_root = real_root;
      Result<std::vector<GpuInfo>> listed = list_gpus();
      ASSERT_EQ(listed.status().message(), "");
      node_ = node_devices(*listed);
      if (node_.size() < static_cast<size_t>(gpus))
        GTEST_SKIP() << "needs " << gpus << " GPUs, this node has " << node_.size();
    } else {
      simgpu_env_ = {"SIMGPU_STATE=" + (folder_ / "simgpu/simgpu.state").string(),
                     "SIMGPU_DEVICES=" + devices};
      ASSERT_EQ(make_driver_root(folder_ / "driver", gpus).message(), "");
      driver.driver_root = (folder_ / "driver").string();
      node_ = testing::simulated_devices((folder_ / "simgpu/simgpu.state").string(), devices);
      ASSERT_EQ(node_.size(), static_cast<size_t>(gpus));
    }
    ShareManagerOptions options;
    options.root = (folder_ / "state").string();
    options.cdi_dir = "/var/run/cdi";
    options.node_name = "node-a";
    options.shim_path = LIBVGPU_SO;
    Result<ContainerDriver> discovered = discover_container_driver(driver);
    ASSERT_EQ(discovered.status().message(), "");
    options.container_driver = *discovered;
    manager_ = std::make_unique<ShareManager>(options, kube_, node_);
    ASSERT_EQ(manager_->start().message(), "");
  }

  // The published name of the node's `index`-th GPU.
  std::string device(size_t index) const { return node_.at(index).name; }

  // podman run's arguments for a container given `device_ids` (and the simulator's state).
  std::vector<std::string> container_args(const std::vector<std::string>& device_ids) const {
    std::vector<std::string> args;
    for (const auto& id : device_ids) args.insert(args.end(), {"--device", id});
    if (!simgpu_env_.empty()) {
      const std::string simgpu = (folder_ / "simgpu").string();
      args.insert(args.end(), {"--volume", simgpu + ":" + simgpu});
      for (const auto& entry : simgpu_env_) args.insert(args.end(), {"--env", entry});
    }
    return args;
  }

  // Prepares claim `name` (its UID unique to this run: specs in /var/run/cdi are shared).
  std::vector<std::string> prepare(const std::string& name,
                                   const std::vector<testing::FixtureShare>& shares) {
    const std::string uid = "c0" + std::to_string(getpid()) + "-" + name;
    kube_.bodies[name] = testing::make_claim(name, uid, shares).dump();
    const PrepareResult prepared = manager_->prepare({"tenants", uid, name});
    EXPECT_EQ(prepared.status().message(), "");
    std::vector<std::string> ids;
    if (!prepared.is_ok()) return ids;
    for (const auto& device : *prepared)
      for (const auto& id : device.cdi_device_ids) ids.push_back(id);
    return ids;
  }

  // memory-fill's JSON report: the line that holds one, wherever the runtime's own lines (podman
  // and runc write to the same output, more of them on a loaded machine) fall; null without one.
  static json fill_report(const std::string& output) {
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      json report = json::parse(line, nullptr, false);
      if (report.is_object() && report.contains("bytes_obtained")) return report;
    }
    return nullptr;
  }

  // memory-fill in a container given `device_ids`; its JSON report, or null with the output.
  json fill(const std::vector<std::string>& device_ids, const std::vector<std::string>& fill_args,
            std::string* output) {
    const std::vector<std::string> args = container_args(device_ids);
    std::vector<std::string> command = {"/usr/local/bin/memory-fill", "--chunk", "256Mi"};
    command.insert(command.end(), fill_args.begin(), fill_args.end());
    const testing::ContainerRun ran = podman_->run(args, kImage, command);
    *output = ran.output;
    std::printf("%s", ran.output.c_str());
    if (ran.exit_code != 0) return nullptr;
    return fill_report(ran.output);
  }

  inline static std::string skip_reason_;
  inline static std::string image_error_;
  inline static fs::path* base_ = nullptr;
  inline static testing::Podman* podman_ = nullptr;
  fs::path folder_;
  std::vector<std::string> simgpu_env_;  // empty on a real GPU
  std::vector<NodeDevice> node_;
  testing::TenantClaims kube_;
  std::unique_ptr<ShareManager> manager_;
};

TEST_F(ContainerRuntimeTest, OneShareHoldsItsLimitAndTheImageKeepsItsLoaderSettings) {
  ASSERT_NO_FATAL_FAILURE(start_node(kOneGpu, 1));
  if (IsSkipped()) return;
  const auto ids = prepare("one", {{"gpu", device(0), "s-a", "4Gi", "50"}});
  ASSERT_FALSE(ids.empty());
  std::string output;
  const json report = fill(ids, {}, &output);
  ASSERT_TRUE(report.is_object()) << output;
  EXPECT_EQ(report["mem_get_info_total"], 4 * kGiB);
  EXPECT_EQ(report["bytes_obtained"], 4 * kGiB - kContextOverhead);
  EXPECT_EQ(report["stop_reason"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_NE(output.find(kImagePreloadSays), std::string::npos) << output;
}

TEST_F(ContainerRuntimeTest, AProgramThatClearsItsEnvironmentIsStillLimited) {
  // The shim comes through the mounted /etc/ld.so.preload and finds its share folder mounted
  // read-only, so `env -i` (which drops LD_PRELOAD and TESSERA_SHARE_DIR) changes nothing. The
  // simulator's own variables are passed again: they stand in for the GPU.
  ASSERT_NO_FATAL_FAILURE(start_node(kOneGpu, 1));
  if (IsSkipped()) return;
  const auto ids = prepare("cleared", {{"gpu", device(0), "s-a", "2Gi", "50"}});
  ASSERT_FALSE(ids.empty());
  const std::vector<std::string> args = container_args(ids);
  std::vector<std::string> command = {"/usr/bin/env", "-i"};
  command.insert(command.end(), simgpu_env_.begin(), simgpu_env_.end());
  command.insert(command.end(), {"/usr/local/bin/memory-fill", "--chunk", "256Mi"});
  const testing::ContainerRun ran = podman_->run(args, kImage, command);
  std::printf("%s", ran.output.c_str());
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  const json report = fill_report(ran.output);
  ASSERT_TRUE(report.is_object()) << ran.output;
  EXPECT_EQ(report["mem_get_info_total"], 2 * kGiB);
  EXPECT_EQ(report["bytes_obtained"], 2 * kGiB - kContextOverhead);
}

TEST_F(ContainerRuntimeTest, TheDriversProgramsAreThereAndUnprepareRemovesTheSpec) {
  ASSERT_NO_FATAL_FAILURE(start_node(kOneGpu, 1));
  if (IsSkipped()) return;
  const auto ids = prepare("programs", {{"gpu", device(0), "s-a", "1Gi", "10"}});
  ASSERT_FALSE(ids.empty());
  const std::vector<std::string> args = container_args(ids);
  const testing::ContainerRun smi = podman_->run(args, kImage, {"/usr/bin/nvidia-smi"});
  EXPECT_EQ(smi.exit_code, 0) << smi.output;
  const std::string uid = json::parse(kube_.bodies["programs"])["metadata"]["uid"];
  ASSERT_EQ(manager_->unprepare({"tenants", uid, "programs"}).message(), "");
  EXPECT_FALSE(fs::exists(manager_->cdi_spec_path(uid)));
  // The runtime no longer resolves the claim's devices: no container can start with them.
  const testing::ContainerRun after = podman_->run(args, kImage, {"/usr/bin/nvidia-smi"});
  EXPECT_NE(after.exit_code, 0);
  EXPECT_NE(after.output.find("unresolvable CDI devices"), std::string::npos) << after.output;
}

// The bytes a share's processes hold on its first device, summed over the usage page's slots.
uint64_t share_usage(const std::string& share_dir) {
  std::ifstream file(share_dir + "/usage", std::ios::binary);
  std::vector<char> bytes(sizeof(share::UsagePage));
  if (!file.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) return 0;
  share::UsagePage page;
  std::memcpy(static_cast<void*>(&page), bytes.data(), sizeof page);
  uint64_t total = 0;
  for (uint32_t slot = 0; slot < std::min(page.slot_high_water.load(), share::kMaxSlots); ++slot)
    total += page.slots[slot].bytes[0].load();
  return total;
}

TEST_F(ContainerRuntimeTest, TwoClaimsOnOneGpuHoldEachLimitAndTheirSum) {
  ASSERT_NO_FATAL_FAILURE(start_node(kOneGpu, 1));
  if (IsSkipped()) return;
  auto ids = prepare("first", {{"gpu", device(0), "s-1", "2Gi", "30"}});
  const auto second = prepare("second", {{"gpu", device(0), "s-2", "1Gi", "20"}});
  ASSERT_EQ(ids.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  ids.insert(ids.end(), second.begin(), second.end());
  // While the filled memory is held, each share's own page stays within its own limit.
  std::string output;
  json report;
  std::atomic<bool> container_done{false};
  std::thread container([&] {
    report = fill(ids, {"--hold-seconds", "4"}, &output);
    container_done = true;
  });
  const Checkpoint checkpoint = manager_->checkpoint();
  std::vector<std::string> folders, share_ids;
  for (const auto& [uid, claim] : checkpoint) {
    for (const auto& share : claim.shares) {
      folders.push_back(manager_->share_dir(share));
      share_ids.push_back(share.share_id);
    }
  }
  ASSERT_EQ(folders.size(), 2u);
  uint64_t most[2] = {0, 0};
  // Polled for as long as the container runs (podman's start takes what the machine gives it):
  // the fill holds its memory 4 s, 40 polls.
  while (!container_done && most[0] + most[1] < 3 * kGiB - kContextOverhead) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int i = 0; i < 2; ++i) most[i] = std::max(most[i], share_usage(folders[i]));
  }
  container.join();
  ASSERT_TRUE(report.is_object()) << output;
  // The container holds both shares: 3 GiB on that GPU, the context charged once.
  EXPECT_EQ(report["mem_get_info_total"], 3 * kGiB);
  EXPECT_EQ(report["bytes_obtained"], 3 * kGiB - kContextOverhead);
  EXPECT_EQ(report["stop_reason"], "CUDA_ERROR_OUT_OF_MEMORY");
  const std::map<std::string, uint64_t> limits = {{"s-1", 2 * kGiB}, {"s-2", 1 * kGiB}};
  uint64_t held = 0;
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(folders[i]);
    ASSERT_TRUE(limits.count(share_ids[i]));
    EXPECT_LE(most[i], limits.at(share_ids[i]));
    held += most[i];
  }
  EXPECT_EQ(held, 3 * kGiB);  // the fill and its context, split between the two pages
}

TEST_F(ContainerRuntimeTest, TwoClaimsOnTwoGpusHoldEachGpusLimit) {
  ASSERT_NO_FATAL_FAILURE(start_node(kTwoGpus, 2));
  if (IsSkipped()) return;
  auto ids = prepare("left", {{"gpu", device(0), "s-l", "2Gi", "30"}});
  const auto right = prepare("right", {{"gpu", device(1), "s-r", "1Gi", "20"}});
  ASSERT_EQ(ids.size(), 1u);
  ASSERT_EQ(right.size(), 1u);
  ids.insert(ids.end(), right.begin(), right.end());
  const uint64_t limits[] = {2 * kGiB, 1 * kGiB};
  for (int device = 0; device < 2; ++device) {
    SCOPED_TRACE("device " + std::to_string(device));
    std::string output;
    const json report = fill(ids, {"--device", std::to_string(device)}, &output);
    ASSERT_TRUE(report.is_object()) << output;
    EXPECT_EQ(report["mem_get_info_total"], limits[device]);
    EXPECT_EQ(report["bytes_obtained"], limits[device] - kContextOverhead);
  }
}

}  // namespace
}  // namespace tessera::agent
