#include "share/share_manager.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "apiserver/claim_fixture.h"
#include "captured_log.h"
#include "share/fake_driver.h"
#include "share/share_test_support.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fake_container_driver;
using testing::FakeKube;
using testing::LimitsView;
using testing::make_claim;
using testing::opaque_config;
using testing::read;
using testing::read_limits;
using testing::snapshot;
using testing::write_fake_shim;

constexpr char kUid[] = "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01";
constexpr char kShareA[] = "5e1f0a2b-0000-4000-8000-00000000000a";
constexpr char kShareB[] = "5e1f0a2b-0000-4000-8000-00000000000b";
constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";
constexpr int64_t kPreparedAt = 1764604800123;  // 2025-12-01T16:00:00.123Z

class ShareManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("agent-share-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    options_.root = (base_ / "state").string();
    options_.cdi_dir = (base_ / "cdi").string();
    options_.node_name = "node-a";
    // The node's shim and driver, beside the state (the crash tests start from an empty base_).
    node_ = base_.string() + "-node";
    fs::remove_all(node_);
    options_.shim_path = write_fake_shim(node_ / "shim/libvgpu.so");
    options_.container_driver = fake_container_driver(node_ / "driver");
    devices_ = {{"gpu-0", kGpu0, 0, 150ull << 30}};
    // A fixed wall clock: the checkpoint a prepare writes is the same in every run.
    options_.wall_clock_unix_ms = [] { return kPreparedAt; };
    json configs = json::array({opaque_config("FromClass",
                                              {{"apiVersion", "vgpu.tessera.dev/v1alpha1"},
                                               {"kind", "VgpuConfig"},
                                               {"compute", {{"burst", 60}, {"priority", "high"}}}},
                                              {"b"})});
    kube_.objects[kube::resource_claim_path("tenants", "train")] =
        make_claim("train", kUid,
                   {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"b", "gpu-0", kShareB, "4Gi", "70"}},
                   configs)
            .dump();
  }
  void TearDown() override {
    fs::remove_all(base_);
    fs::remove_all(node_);
  }

  std::unique_ptr<ShareManager> manager(ShareManagerOptions options) {
    auto m = std::make_unique<ShareManager>(options, kube_, devices_);
    EXPECT_EQ(m->start().message(), "");
    return m;
  }
  std::string share_dir(const char* share) const {
    return options_.root + "/shares/" + kUid + "-gpu-0-" + share;
  }
  // Claims "par-0".."par-<n-1>" (two shares each on gpu-0) in the fake API server.
  std::vector<ClaimRef> add_claims(int n) {
    std::vector<ClaimRef> claims;
    for (int i = 0; i < n; ++i) {
      const std::string uid = "7a000000-0000-4000-8000-00000000000" + std::to_string(i);
      const std::string name = "par-" + std::to_string(i);
      kube_.objects[kube::resource_claim_path("tenants", name)] =
          make_claim(name, uid,
                     {{"a", "gpu-0", "sa" + std::to_string(i), "1Gi", "10"},
                      {"b", "gpu-0", "sb" + std::to_string(i), "2Gi", "20"}})
              .dump();
      claims.push_back({"tenants", uid, name});
    }
    return claims;
  }
  // Calls `call` for every claim, each on its own thread, all started together.
  template <class Call>
  static void on_threads(const std::vector<ClaimRef>& claims, Call call) {
    std::latch go(static_cast<std::ptrdiff_t>(claims.size()));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < claims.size(); ++i)
      threads.emplace_back([&, i] {
        go.arrive_and_wait();
        call(i, claims[i]);
      });
    for (auto& thread : threads) thread.join();
  }

  fs::path base_, node_;
  ShareManagerOptions options_;
  std::vector<NodeDevice> devices_;
  FakeKube kube_;
  const ClaimRef claim_{"tenants", kUid, "train"};
};

TEST_F(ShareManagerTest, PreparesTwoSharesOfOneDevice) {
  auto m = manager(options_);
  const PrepareResult result = m->prepare(claim_);
  ASSERT_EQ(result.status().message(), "");
  ASSERT_EQ(result->size(), 2u);
  EXPECT_EQ((*result)[0].request_names, std::vector<std::string>{"a"});
  EXPECT_EQ((*result)[0].pool_name, "node-a");
  EXPECT_EQ((*result)[0].device_name, "gpu-0");
  EXPECT_EQ((*result)[0].share_id, kShareA);
  EXPECT_EQ((*result)[0].cdi_device_ids,
            std::vector<std::string>{std::string("k8s.vgpu.tessera.dev/claim=") + kUid + "-gpu-0-" +
                                     kShareA});
  EXPECT_EQ((*result)[1].share_id, kShareB);

  const LimitsView a = read_limits(share_dir(kShareA) + "/limits");
  EXPECT_EQ(a.uuid, kGpu0);
  EXPECT_EQ(a.memory, 8ull << 30);
  EXPECT_EQ(a.memory_request, 8ull << 30) << "the consumed capacity is the request";
  EXPECT_EQ(a.cores, 30u);
  EXPECT_EQ(a.cores_limit, 30u) << "no limit of its own: the request";
  EXPECT_EQ(a.priority, share::kPriorityNormal);
  EXPECT_EQ(a.device_count, 1u);
  const LimitsView b = read_limits(share_dir(kShareB) + "/limits");
  EXPECT_EQ(b.memory, 4ull << 30);
  EXPECT_EQ(b.cores, 70u);
  EXPECT_EQ(b.cores_limit, 70u) << "compute.burst 60 at or below the request 70: no bursting";
  EXPECT_EQ(b.priority, share::kPriorityHigh);
  EXPECT_EQ(fs::file_size(share_dir(kShareA) + "/usage"), sizeof(share::UsagePage));
  EXPECT_EQ(fs::status(share_dir(kShareA) + "/limits").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);

  const json spec = json::parse(read(m->cdi_spec_path(kUid)));
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");  // device names start with the claim UID
  EXPECT_EQ(spec["kind"], "k8s.vgpu.tessera.dev/claim");
  ASSERT_EQ(spec["devices"].size(), 2u);
  const json& device = spec["devices"][0];
  EXPECT_EQ(device["name"], std::string(kUid) + "-gpu-0-" + kShareA);
  const json& edits = device["containerEdits"];
  const std::string container_dir =
      std::string("/var/run/tessera/shares/") + kUid + "-gpu-0-" + kShareA;
  EXPECT_EQ(edits["env"][0], "TESSERA_SHARE_DIR=" + container_dir);
  EXPECT_EQ(edits["env"][1], "TESSERA_SHARE_MEMORY_LIMIT=8589934592");
  EXPECT_EQ(edits["env"][2], "TESSERA_SHARE_CORES_LIMIT=30");
  ASSERT_EQ(edits["mounts"].size(), 2u);
  EXPECT_EQ(edits["mounts"][0]["hostPath"], share_dir(kShareA));
  EXPECT_EQ(edits["mounts"][0]["containerPath"], container_dir);
  EXPECT_EQ(edits["mounts"][0]["options"][1], "rw");
  EXPECT_EQ(edits["mounts"][1]["hostPath"], share_dir(kShareA) + "/limits");
  EXPECT_EQ(edits["mounts"][1]["containerPath"], container_dir + "/limits");
  EXPECT_EQ(edits["mounts"][1]["options"][1], "ro");
  // The GPU's node per device; the shim, its ld.so.preload and the driver once for the spec.
  EXPECT_EQ(edits["deviceNodes"][0]["path"], "/dev/nvidia0");
  EXPECT_EQ(edits["deviceNodes"][0]["hostPath"], (node_ / "driver/dev/nvidia0").string());
  const json& common = spec["containerEdits"];
  EXPECT_FALSE(common.contains("env"));  // no LD_PRELOAD: the image's own stays
  EXPECT_EQ(common["mounts"][0]["hostPath"], options_.shim_path);
  EXPECT_EQ(common["mounts"][0]["containerPath"], options_.shim_path);
  EXPECT_EQ(common["mounts"][1]["hostPath"], m->preload_file_path());
  EXPECT_EQ(common["mounts"][1]["containerPath"], "/etc/ld.so.preload");
  EXPECT_EQ(read(m->preload_file_path()), options_.shim_path + "\n");
  EXPECT_EQ(common["deviceNodes"][0]["path"], "/dev/nvidiactl");
  EXPECT_EQ(common["deviceNodes"][1]["path"], "/dev/nvidia-uvm");
  EXPECT_EQ(common["mounts"][3]["containerPath"], "/usr/lib/x86_64-linux-gnu/libcuda.so.1");

  const json checkpoint = json::parse(read(options_.root + "/checkpoint.json"));
  EXPECT_EQ(checkpoint["version"], 1);
  EXPECT_EQ(checkpoint["claims"][kUid]["state"], "PrepareCompleted");
  EXPECT_EQ(checkpoint["claims"][kUid]["shares"].size(), 2u);
}

TEST_F(ShareManagerTest, SecondPrepareReturnsTheSameResultWithoutRewriting) {
  auto m = manager(options_);
  const PrepareResult first = m->prepare(claim_);
  ASSERT_EQ(first.status().message(), "");
  struct stat cdi_before {
  }, checkpoint_before{};
  ASSERT_EQ(stat(m->cdi_spec_path(kUid).c_str(), &cdi_before), 0);
  ASSERT_EQ(stat((options_.root + "/checkpoint.json").c_str(), &checkpoint_before), 0);
  const int requests = kube_.requests;
  const PrepareResult second = m->prepare(claim_);
  EXPECT_EQ(second.status().message(), "");
  ASSERT_EQ(second->size(), first->size());
  for (size_t i = 0; i < first->size(); ++i) {
    EXPECT_EQ((*second)[i].cdi_device_ids, (*first)[i].cdi_device_ids);
    EXPECT_EQ((*second)[i].share_id, (*first)[i].share_id);
  }
  struct stat cdi_after {
  }, checkpoint_after{};
  ASSERT_EQ(stat(m->cdi_spec_path(kUid).c_str(), &cdi_after), 0);
  ASSERT_EQ(stat((options_.root + "/checkpoint.json").c_str(), &checkpoint_after), 0);
  EXPECT_EQ(cdi_after.st_ino, cdi_before.st_ino);
  EXPECT_EQ(checkpoint_after.st_ino, checkpoint_before.st_ino);
  EXPECT_EQ(kube_.requests, requests);
  // And after a restart, from the checkpoint.
  auto restarted = manager(options_);
  EXPECT_EQ(restarted->prepare(claim_)->size(), 2u);
  EXPECT_EQ(kube_.requests, requests);
}

TEST_F(ShareManagerTest, UnprepareWorksFromTheCheckpointWhenTheClaimIsGone) {
  {
    auto m = manager(options_);
    ASSERT_EQ(m->prepare(claim_).status().message(), "");
  }
  kube_.objects.clear();
  auto m = manager(options_);
  EXPECT_EQ(m->unprepare(claim_).message(), "");
  EXPECT_FALSE(fs::exists(share_dir(kShareA)));
  EXPECT_FALSE(fs::exists(share_dir(kShareB)));
  EXPECT_FALSE(fs::exists(m->cdi_spec_path(kUid)));
  EXPECT_TRUE(m->checkpoint().empty());
  EXPECT_EQ(json::parse(read(options_.root + "/checkpoint.json"))["claims"], json::object());
  EXPECT_EQ(m->unprepare(claim_).message(), "");  // twice: nothing to do
}

// The shim is checked before anything is written: a claim whose containers could not load it
// fails with the path and the reason (and succeeds once the shim is fixed).
TEST_F(ShareManagerTest, AnUnusableShimFailsThePrepareBeforeAnyWrite) {
  const std::string shim = (base_ / "broken/libvgpu.so").string();
  options_.shim_path = shim;
  auto m = manager(options_);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "cannot be opened: No such file or directory"},
      {"#!/bin/sh\n", "is not an ELF shared library"},
      {testing::elf_header(ELFCLASS32), "is a 32-bit ELF file"},
      {testing::elf_header(ELFCLASS64, ET_EXEC), "is an ELF file of type 2 (an executable)"}};
  for (const auto& [contents, why] : cases) {
    if (!contents.empty()) testing::write_text(shim, contents);
    const Status refused = m->prepare(claim_).status();
    EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.message().find("shim " + shim + " " + why), std::string::npos)
        << refused.message();
    EXPECT_TRUE(m->checkpoint().empty());
    EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
    EXPECT_TRUE(fs::is_empty(options_.cdi_dir));
  }
  write_fake_shim(shim);
  EXPECT_EQ(m->prepare(claim_).status().message(), "");
}

// No driver for containers (a default ContainerDriver): every claim fails saying so.
TEST_F(ShareManagerTest, NoDriverForContainersFailsThePrepare) {
  options_.container_driver = ContainerDriver{};
  auto m = manager(options_);
  const Status refused = m->prepare(claim_).status();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("no NVIDIA driver for containers"), std::string::npos)
      << refused.message();
  EXPECT_TRUE(fs::is_empty(options_.cdi_dir));
}

// The toolkit's way: the claim returns the toolkit's device of the share's GPU beside ours; a GPU
// its spec lacks fails the claim before anything is written.
TEST_F(ShareManagerTest, ToolkitDevicesAreReturnedBesideOursAndAMissingGpuFails) {
  ContainerDriver toolkit;
  toolkit.toolkit_spec = "/etc/cdi/nvidia.yaml";
  toolkit.toolkit_by_uuid[kGpu0] = std::string("nvidia.com/gpu=") + kGpu0;
  options_.container_driver = toolkit;
  options_.shim_loading = ShimLoading::kLdPreloadEnv;
  auto m = manager(options_);
  const PrepareResult result = m->prepare(claim_);
  ASSERT_EQ(result.status().message(), "");
  EXPECT_EQ((*result)[1].cdi_device_ids,
            (std::vector<std::string>{
                std::string("k8s.vgpu.tessera.dev/claim=") + kUid + "-gpu-0-" + kShareB,
                std::string("nvidia.com/gpu=") + kGpu0}));
  const json spec = json::parse(read(m->cdi_spec_path(kUid)));
  EXPECT_EQ(spec["containerEdits"]["env"], json::array({"LD_PRELOAD=" + options_.shim_path}));
  EXPECT_FALSE(fs::exists(m->preload_file_path()));  // not used in this loading
  EXPECT_TRUE(m->reconcile().clean());
  ASSERT_EQ(m->unprepare(claim_).message(), "");

  options_.container_driver.toolkit_by_uuid.clear();
  auto without = manager(options_);
  const Status refused = without->prepare(claim_).status();
  EXPECT_EQ(refused.code(), StatusCode::kNotFound);
  EXPECT_NE(
      refused.message().find("/etc/cdi/nvidia.yaml) has no device for GPU " + std::string(kGpu0)),
      std::string::npos)
      << refused.message();
  EXPECT_TRUE(without->checkpoint().empty());
}

TEST_F(ShareManagerTest, PrepareErrorsAreReportedPerClaim) {
  auto m = manager(options_);
  const Status missing = m->prepare({"tenants", kUid, "missing"}).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);  // the API's 404, kept through the context
  EXPECT_EQ(
      missing.message(),
      "cannot get ResourceClaim tenants/missing: GET "
      "/apis/resource.k8s.io/v1/namespaces/tenants/resourceclaims/missing: HTTP 404: not found");
  const Status replaced = m->prepare({"tenants", "other-uid", "train"}).status();
  EXPECT_EQ(replaced.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(replaced.message(),
            std::string("ResourceClaim tenants/train: claim was replaced: metadata.uid is ") +
                kUid + ", kubelet asked for other-uid");
  EXPECT_TRUE(m->checkpoint().empty());
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
}

TEST_F(ShareManagerTest, ARefusedClaimIsOneWarnLineNamingTheClaimAndWhy) {
  testing::CapturedLog log;
  auto m = manager(options_);
  const Status replaced = m->prepare({"tenants", "other-uid", "train"}).status();
  ASSERT_EQ(replaced.code(), StatusCode::kFailedPrecondition);
  // Parameters the agent cannot take: the claim's allocation is of another shape.
  json bad = json::parse(kube_.objects[kube::resource_claim_path("tenants", "train")]);
  bad["status"]["allocation"]["devices"]["results"][1]["device"] = 0;
  kube_.objects[kube::resource_claim_path("tenants", "bad")] = bad.dump();
  const Status invalid = m->prepare({"tenants", kUid, "bad"}).status();
  ASSERT_EQ(invalid.code(), StatusCode::kInvalidArgument);

  std::vector<std::string> refused;
  for (const std::string& line : log.lines())
    if (line.find("claim refused: prepare failed") != std::string::npos) refused.push_back(line);
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_NE(refused[0].find(" warn "), std::string::npos) << refused[0];
  EXPECT_NE(refused[0].find("claim=tenants/train claim_uid=other-uid code=FAILED_PRECONDITION "
                            "error=" +
                            log::quote_text(replaced.message())),
            std::string::npos)
      << refused[0];
  EXPECT_NE(refused[1].find("claim=tenants/bad claim_uid=" + std::string(kUid) +
                            " code=INVALID_ARGUMENT error=" + log::quote_text(invalid.message())),
            std::string::npos)
      << refused[1];

  // A claim that is prepared says nothing of the kind.
  ASSERT_EQ(m->prepare(claim_).status().message(), "");
  EXPECT_EQ(log.count("claim refused"), 2u);
}

TEST_F(ShareManagerTest, APreparedClaimKeepsItsPrepareTimeInTheCheckpoint) {
  {
    auto m = manager(options_);
    ASSERT_EQ(m->prepare(claim_).status().message(), "");
    EXPECT_EQ(m->checkpoint().at(kUid).prepared_unix_ms, kPreparedAt);
    const json checkpoint = json::parse(read(options_.root + "/checkpoint.json"));
    EXPECT_EQ(checkpoint["claims"][kUid]["preparedUnixMs"], kPreparedAt);
  }
  // A restarted agent reads it back, and a repeated prepare answers without stamping it again.
  ShareManagerOptions later = options_;
  later.wall_clock_unix_ms = [] { return kPreparedAt + 60'000; };
  auto restarted = manager(later);
  EXPECT_EQ(restarted->checkpoint().at(kUid).prepared_unix_ms, kPreparedAt);
  ASSERT_EQ(restarted->prepare(claim_).status().message(), "");
  EXPECT_EQ(restarted->checkpoint().at(kUid).prepared_unix_ms, kPreparedAt);
}

TEST_F(ShareManagerTest, ShareWithARunningProcessIsReportedAndKept) {
  auto m = manager(options_);
  ASSERT_EQ(m->prepare(claim_).status().message(), "");
  const std::string usage = share_dir(kShareB) + "/usage";
  const int fd = open(usage.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto* page = static_cast<share::UsagePage*>(
      mmap(nullptr, sizeof(share::UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  ASSERT_NE(page, MAP_FAILED);
  // This process, as the shim would register it: pid, pid namespace, start time.
  char link_text[64] = {};
  ASSERT_GT(readlink("/proc/self/ns/pid", link_text, sizeof link_text - 1), 0);
  uint64_t ns = 0;
  for (const char* p = link_text; *p; ++p)
    if (*p >= '0' && *p <= '9') ns = ns * 10 + static_cast<uint64_t>(*p - '0');
  std::istringstream stat(read("/proc/self/stat").substr(read("/proc/self/stat").rfind(')') + 2));
  std::string field;
  uint64_t start_time = 0;
  for (int i = 3; i <= 22 && stat >> field; ++i)
    if (i == 22) start_time = std::stoull(field);
  // A dead process's slot (a pid that cannot exist) does not hold the share back...
  page->slots[0].owner = share::make_owner(4194000, ns, 1);
  page->slots[1].owner = share::make_owner(static_cast<uint32_t>(getpid()), ns, start_time);
  page->slot_high_water = 2;
  const Status error = m->unprepare(claim_);
  EXPECT_EQ(error.code(), StatusCode::kFailedPrecondition);  // kubelet retries later
  EXPECT_EQ(error.message(), std::string("claim ") + kUid +
                                 " still has running processes in share " + kUid + "-gpu-0-" +
                                 kShareB + " (host pids " + std::to_string(getpid()) +
                                 "): kept until they exit");
  EXPECT_TRUE(fs::exists(share_dir(kShareB) + "/limits"));
  EXPECT_TRUE(fs::exists(m->cdi_spec_path(kUid)));
  EXPECT_EQ(m->checkpoint().count(kUid), 1u);
  // ...and once the live one is gone, unprepare completes.
  page->slots[1].owner = 0;
  munmap(page, sizeof(share::UsagePage));
  EXPECT_EQ(m->unprepare(claim_).message(), "");
  EXPECT_FALSE(fs::exists(share_dir(kShareB)));
}

TEST_F(ShareManagerTest, SharesOfTwoGpusLiveInOneFolder) {
  devices_.push_back({"gpu-1", "GPU-11111111-1111-1111-1111-111111111111", 1, 150ull << 30});
  kube_.objects[kube::resource_claim_path("tenants", "multi")] =
      make_claim("multi", "multi-gpu-uid",
                 {{"gpus", "gpu-0", "s0", "8Gi", "30"}, {"gpus", "gpu-1", "s1", "4Gi", "70"}})
          .dump();
  auto m = manager(options_);
  const ClaimRef claim{"tenants", "multi-gpu-uid", "multi"};
  ASSERT_EQ(m->prepare(claim).status().message(), "");
  const std::string folder = options_.root + "/shares/multi-gpu-uid-gpu-0-s0";
  ASSERT_TRUE(fs::exists(folder + "/limits"));
  EXPECT_FALSE(fs::exists(options_.root + "/shares/multi-gpu-uid-gpu-1-s1"));
  const std::string bytes = read(folder + "/limits");
  share::LimitsPage page;
  std::memcpy(static_cast<void*>(&page), bytes.data(), sizeof page);
  ASSERT_EQ(page.device_count.load(), 2u);
  EXPECT_STREQ(page.devices[0].uuid, kGpu0);
  EXPECT_EQ(page.devices[0].memory_limit.load(), 8ull << 30);
  EXPECT_EQ(page.devices[0].cores_request.load(), 30u);
  EXPECT_STREQ(page.devices[1].uuid, "GPU-11111111-1111-1111-1111-111111111111");
  EXPECT_EQ(page.devices[1].memory_limit.load(), 4ull << 30);
  EXPECT_EQ(page.devices[1].cores_request.load(), 70u);

  // Both CDI devices point at the folder; their informational variables agree, per GPU.
  const json spec = json::parse(read(m->cdi_spec_path("multi-gpu-uid")));
  for (const auto& device : spec["devices"]) {
    const json& env = device["containerEdits"]["env"];
    EXPECT_EQ(env[0], "TESSERA_SHARE_DIR=/var/run/tessera/shares/multi-gpu-uid-gpu-0-s0");
    EXPECT_EQ(env[1], std::string("TESSERA_SHARE_MEMORY_LIMIT=") + kGpu0 +
                          "=8589934592,GPU-11111111-1111-1111-1111-111111111111=4294967296");
  }
  // The grouping survives a restart through the checkpoint, and reconcile finds nothing.
  auto restarted = manager(options_);
  EXPECT_EQ(restarted->checkpoint().at("multi-gpu-uid").shares[1].folder, "multi-gpu-uid-gpu-0-s0");
  EXPECT_TRUE(restarted->reconcile().clean()) << restarted->reconcile().to_text();
  ASSERT_EQ(restarted->unprepare(claim).message(), "");
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
}

// A share folder is writable from the share's containers: what a tenant puts there (a symlink to a
// host file at the agent's temporary name, a FIFO or a truncated file as the usage page) neither
// reaches outside the folder, nor blocks, nor crashes the agent.
TEST_F(ShareManagerTest, ATenantsFilesInItsShareFolderCannotHurtTheAgent) {
  auto m = manager(options_);
  ASSERT_EQ(m->prepare(claim_).status().message(), "");
  const fs::path victim = base_ / "host-file";
  std::ofstream(victim) << "host data\n";
  fs::remove(share_dir(kShareA) + "/usage");
  fs::create_symlink(victim, share_dir(kShareA) + "/.usage.agent.tmp");
  const ReconcileReport report = m->reconcile();
  EXPECT_EQ(report.failures(), 0u) << report.to_text();
  EXPECT_EQ(read(victim), "host data\n");
  EXPECT_EQ(fs::file_size(share_dir(kShareA) + "/usage"), sizeof(share::UsagePage));
  EXPECT_FALSE(fs::is_symlink(share_dir(kShareA) + "/usage"));

  fs::remove(share_dir(kShareA) + "/usage");
  ASSERT_EQ(mkfifo((share_dir(kShareA) + "/usage").c_str(), 0666), 0);
  fs::resize_file(share_dir(kShareB) + "/usage", 10);
  EXPECT_EQ(m->unprepare(claim_).message(), "");  // returns (no FIFO wait, no SIGBUS) and cleans up
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
  EXPECT_EQ(read(victim), "host data\n");
}

TEST_F(ShareManagerTest, StartRemovesOrphans) {
  fs::create_directories(options_.root + "/shares/stray-gpu-0-x");
  fs::create_directories(options_.cdi_dir);
  std::ofstream(options_.cdi_dir + "/k8s.vgpu.tessera.dev-claim_stray.json") << "{}";
  std::ofstream(options_.cdi_dir + "/other-vendor.json") << "{}";
  auto m = manager(options_);
  ASSERT_EQ(m->prepare(claim_).status().message(), "");
  auto restarted = manager(options_);  // keeps what the checkpoint names
  EXPECT_FALSE(fs::exists(options_.root + "/shares/stray-gpu-0-x"));
  EXPECT_FALSE(fs::exists(options_.cdi_dir + "/k8s.vgpu.tessera.dev-claim_stray.json"));
  EXPECT_TRUE(fs::exists(options_.cdi_dir + "/other-vendor.json"));
  EXPECT_TRUE(fs::exists(share_dir(kShareA) + "/limits"));
  EXPECT_TRUE(fs::exists(restarted->cdi_spec_path(kUid)));
}

// Temporaries a dead writer left (its pid in the name) go: write_file_atomically's in the state
// root and the CDI folder at reconcile, the limits and usage pages' in a share folder when its
// claim is prepared. This process's own (a write in flight) and another driver's stay.
TEST_F(ShareManagerTest, StaleTemporariesOfADeadWriterGoInFlightOnesStay) {
  const std::string dead = "999999", self = std::to_string(getpid());
  ASSERT_NE(dead, self);
  const std::string spec = cdi_spec_file_name(kUid);
  fs::create_directories(options_.root);
  fs::create_directories(options_.cdi_dir);
  const std::vector<std::string> stale_state{
      options_.root + "/.checkpoint.json.tmp." + dead + ".0",
      options_.root + "/.ld.so.preload.tmp." + dead + ".2",
      options_.cdi_dir + "/." + spec + ".tmp." + dead + ".3"};
  const std::vector<std::string> kept_state{
      options_.root + "/.checkpoint.json.tmp." + self + ".7",
      options_.root + "/.ld.so.preload.tmp." + self + ".99999",
      options_.cdi_dir + "/." + spec + ".tmp." + self + ".8",
      options_.cdi_dir + "/.other-vendor.json.tmp." + dead + ".1"};
  for (const auto& path : stale_state) std::ofstream(path) << "x";
  for (const auto& path : kept_state) std::ofstream(path) << "x";
  auto m = manager(options_);  // start() reconciles
  for (const auto& path : stale_state) EXPECT_FALSE(fs::exists(path)) << path;
  for (const auto& path : kept_state) EXPECT_TRUE(fs::exists(path)) << path;

  // A share folder a crashed prepare left half written, then the claim's prepare again.
  fs::create_directories(share_dir(kShareA));
  const std::vector<std::string> stale_share{share_dir(kShareA) + "/.limits.tmp." + dead + ".1",
                                             share_dir(kShareA) + "/.usage." + dead + ".2.tmp",
                                             share_dir(kShareA) + "/.pending." + dead + ".3.tmp"};
  const std::string own_share = share_dir(kShareA) + "/.limits.tmp." + self + ".9";
  for (const auto& path : stale_share) std::ofstream(path) << "x";
  std::ofstream(own_share) << "x";
  ASSERT_EQ(m->prepare(claim_).status().message(), "");
  for (const auto& path : stale_share) EXPECT_FALSE(fs::exists(path)) << path;
  EXPECT_TRUE(fs::exists(own_share));
  EXPECT_TRUE(fs::exists(share_dir(kShareA) + "/usage"));
  EXPECT_TRUE(m->reconcile().clean());
}

TEST_F(ShareManagerTest, CorruptCheckpointIsAnError) {
  fs::create_directories(options_.root);
  std::ofstream(options_.root + "/checkpoint.json") << R"({"version": 9, "claims": {}})";
  ShareManager m(options_, kube_, devices_);
  const Status started = m.start();
  EXPECT_EQ(started.message(), options_.root + "/checkpoint.json: checkpoint version 9 is not 1");
  EXPECT_EQ(started.code(), StatusCode::kInternal);
}

TEST_F(ShareManagerTest, ACheckpointWithAFieldOfAnotherTypeIsAnErrorAndIsLeftAsItIs) {
  fs::create_directories(options_.root);
  const std::string text = R"({"version": 1, "claims": {"uid-1": {"namespace": "tenants",
      "name": "pair", "state": "PrepareCompleted", "shares": [{"claimUID": "uid-1",
      "pool": "node-a", "device": "gpu-0", "shareID": "s", "uuid": "GPU-1", "minor": "0",
      "requestNames": ["gpu"]}]}}})";
  std::ofstream(options_.root + "/checkpoint.json") << text;
  ShareManager m(options_, kube_, devices_);
  const Status started = m.start();
  EXPECT_EQ(started.message(), options_.root +
                                   "/checkpoint.json: checkpoint: claims.uid-1.shares[0].minor: "
                                   "expected an integer 0..4294967295, got \"0\"");
  EXPECT_EQ(started.code(), StatusCode::kInternal);
  EXPECT_EQ(read(options_.root + "/checkpoint.json"), text);  // kept for a person to look at
  EXPECT_TRUE(m.checkpoint().empty());
}

TEST_F(ShareManagerTest, AClaimOfAnotherShapeFailsThePrepareBeforeAnyWrite) {
  auto m = manager(options_);
  const json good = json::parse(kube_.objects[kube::resource_claim_path("tenants", "train")]);
  struct Case {
    std::function<void(json&)> edit;
    std::string error;
  };
  const Case cases[] = {
      {[](json& c) { c["status"]["reservedFor"] = "pod-train"; },
       "status.reservedFor: expected an array, got \"pod-train\""},
      {[](json& c) { c["status"]["allocation"] = json::array(); },
       "status.allocation: expected an object, got []"},
      {[](json& c) { c["status"]["allocation"]["devices"]["results"][1]["device"] = 0; },
       "status.allocation.devices.results[1].device: expected a string, got 0"},
  };
  for (const Case& c : cases) {
    json claim = good;
    c.edit(claim);
    kube_.objects[kube::resource_claim_path("tenants", "train")] = claim.dump();
    const Status prepared = m->prepare(claim_).status();
    EXPECT_EQ(prepared.code(), StatusCode::kInvalidArgument) << claim.dump();
    EXPECT_EQ(prepared.message(), "ResourceClaim tenants/train: " + c.error) << claim.dump();
    EXPECT_TRUE(m->checkpoint().empty());
    EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
    EXPECT_FALSE(fs::exists(options_.cdi_dir) && !fs::is_empty(options_.cdi_dir));
  }
}

// A crash (the process exits) after each durable step of prepare and unprepare: a restarted agent
// converges to exactly the state of a run without crash, and unprepare then leaves nothing.
TEST_F(ShareManagerTest, CrashAfterAnyStepConverges) {
  // Reference: the files after a clean prepare, and the number of steps of prepare + unprepare.
  std::map<std::string, std::string> prepared;
  int total_steps = 0;
  {
    ShareManagerOptions counting = options_;
    counting.after_step = [&](int step) { total_steps = step; };
    auto m = manager(counting);
    ASSERT_EQ(m->prepare(claim_).status().message(), "");
    prepared = snapshot(base_);
    ASSERT_EQ(m->unprepare(claim_).message(), "");
  }
  const auto empty = snapshot(base_);
  // checkpoint.json with no claims, ld.so.preload, and the state lock file (the claim's lock file
  // went with it).
  std::string names;
  for (const auto& [name, contents] : empty) names += name + " ";
  ASSERT_EQ(empty.size(), 3u) << names;
  EXPECT_EQ(empty.count("state/state.lock"), 1u);
  EXPECT_EQ(empty.count("state/ld.so.preload"), 1u);
  ASSERT_EQ(total_steps, (1 + 2 + 1 + 1) + (1 + 1 + 2 + 1));

  for (int crash_at = 1; crash_at < total_steps; ++crash_at) {
    for (bool then_prepare : {true, false}) {
      SCOPED_TRACE("crash after step " + std::to_string(crash_at) +
                   (then_prepare ? ", then prepare" : ", then unprepare"));
      fs::remove_all(base_);
      ASSERT_EQ(testing::run_agent_crashing_after(options_, kube_, devices_, claim_, crash_at), 42);

      auto m = manager(options_);
      if (then_prepare) {
        const PrepareResult result = m->prepare(claim_);
        ASSERT_EQ(result.status().message(), "");
        ASSERT_EQ(result->size(), 2u);
        EXPECT_EQ(snapshot(base_), prepared);
      }
      ASSERT_EQ(m->unprepare(claim_).message(), "");
      EXPECT_EQ(snapshot(base_), empty);
      // No share folder, spec or temporary file survives anywhere.
      EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
      EXPECT_TRUE(fs::is_empty(options_.cdi_dir));
    }
  }
}

// Prepares and unprepares of different claims on many threads: every one lands, in memory and in
// checkpoint.json (no save wrote an older snapshot over a newer one).
TEST_F(ShareManagerTest, ConcurrentClaimsAllLandInTheCheckpoint) {
  const std::vector<ClaimRef> claims = add_claims(8);
  auto m = manager(options_);
  std::vector<PrepareResult> results(claims.size(), internal_error("not prepared"));
  on_threads(claims, [&](size_t i, const ClaimRef& claim) { results[i] = m->prepare(claim); });
  for (size_t i = 0; i < claims.size(); ++i) {
    EXPECT_EQ(results[i].status().message(), "") << claims[i].name;
    EXPECT_EQ(results[i]->size(), 2u);
  }
  const json saved = json::parse(read(options_.root + "/checkpoint.json"));
  ASSERT_EQ(saved["claims"].size(), claims.size()) << saved.dump(2);
  for (const auto& claim : claims) {
    EXPECT_EQ(saved["claims"][claim.uid]["state"], "PrepareCompleted");
    EXPECT_EQ(m->checkpoint().at(claim.uid).state, ClaimState::kPrepareCompleted);
  }
  EXPECT_TRUE(m->reconcile().clean());

  std::vector<std::string> errors(claims.size());
  on_threads(claims,
             [&](size_t i, const ClaimRef& claim) { errors[i] = m->unprepare(claim).message(); });
  for (const auto& error : errors) EXPECT_EQ(error, "");
  EXPECT_TRUE(m->checkpoint().empty());
  EXPECT_EQ(json::parse(read(options_.root + "/checkpoint.json"))["claims"], json::object());
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
  EXPECT_TRUE(fs::is_empty(options_.cdi_dir));
}

// Kubelet's retries of one claim, all at once: one prepare does the work (one GET), the others wait
// for it and answer from the checkpoint.
TEST_F(ShareManagerTest, ConcurrentPreparesOfOneClaimRunOneAtATime) {
  auto m = manager(options_);
  const std::vector<ClaimRef> same(6, claim_);
  std::vector<PrepareResult> results(same.size(), internal_error("not prepared"));
  on_threads(same, [&](size_t i, const ClaimRef& claim) { results[i] = m->prepare(claim); });
  EXPECT_EQ(kube_.requests, 1);
  for (const auto& result : results) {
    EXPECT_EQ(result.status().message(), "");
    ASSERT_EQ(result->size(), 2u);
    EXPECT_EQ((*result)[1].cdi_device_ids, (*results[0])[1].cdi_device_ids);
  }
  const std::vector<std::string> expected(same.size(), "");
  std::vector<std::string> errors(same.size());
  on_threads(same,
             [&](size_t i, const ClaimRef& claim) { errors[i] = m->unprepare(claim).message(); });
  EXPECT_EQ(errors, expected);
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
}

// Reconcile passes while claims are being prepared: a claim in PrepareStarted is never an orphan
// (its folders and CDI spec survive whatever step it is at), while a stray folder still goes.
TEST_F(ShareManagerTest, ReconcileBesidePreparesRemovesNothingTheyWrite) {
  const std::vector<ClaimRef> claims = add_claims(8);
  auto m = manager(options_);
  fs::create_directories(options_.root + "/shares/stray-gpu-0-x");
  std::atomic<int> running = static_cast<int>(claims.size());
  std::vector<PrepareResult> results(claims.size(), internal_error("not prepared"));
  std::vector<std::string> removed;
  std::thread reconciler([&] {
    while (running > 0)
      for (const auto& item : m->reconcile().items) removed.push_back(item.subject);
  });
  on_threads(claims, [&](size_t i, const ClaimRef& claim) {
    results[i] = m->prepare(claim);
    --running;
  });
  reconciler.join();
  for (const auto& result : results) EXPECT_EQ(result.status().message(), "");
  for (const auto& subject : removed) EXPECT_EQ(subject, "share stray-gpu-0-x");
  const ReconcileReport last = m->reconcile();
  EXPECT_TRUE(last.clean()) << last.to_text();  // every claim's files are in place
  EXPECT_FALSE(fs::exists(options_.root + "/shares/stray-gpu-0-x"));
  for (const auto& claim : claims) EXPECT_TRUE(fs::exists(m->cdi_spec_path(claim.uid)));
}

// As CrashAfterAnyStepConverges, with several claims prepared (then unprepared) on their own
// threads when the process dies: what is on disk is consistent at once (the checkpoint names every
// file, completed claims have all theirs), and a restarted agent converges every claim to fully
// prepared after a retried prepare, to fully absent after unprepare, leaving no orphan file.
TEST_F(ShareManagerTest, CrashDuringConcurrentClaimsConverges) {
  const std::vector<ClaimRef> claims = add_claims(3);
  std::map<std::string, std::string> prepared;
  int total_steps = 0;
  {
    ShareManagerOptions counting = options_;
    counting.after_step = [&](int step) { total_steps = step; };
    auto m = manager(counting);
    for (const auto& claim : claims) ASSERT_EQ(m->prepare(claim).status().message(), "");
    prepared = snapshot(base_);
    for (const auto& claim : claims) ASSERT_EQ(m->unprepare(claim).message(), "");
  }
  const auto empty = snapshot(base_);
  ASSERT_EQ(total_steps, 3 * ((1 + 2 + 1 + 1) + (1 + 1 + 2 + 1)));

  for (int crash_at = 1; crash_at < total_steps; ++crash_at) {
    for (bool then_prepare : {true, false}) {
      SCOPED_TRACE("crash after step " + std::to_string(crash_at) +
                   (then_prepare ? ", then prepare" : ", then unprepare"));
      fs::remove_all(base_);
      ASSERT_EQ(
          testing::run_agent_crashing_after_concurrent(options_, kube_, devices_, claims, crash_at),
          42);
      EXPECT_EQ(testing::crash_state_violations(options_), "");

      auto m = manager(options_);
      if (then_prepare) {
        std::vector<PrepareResult> results(claims.size(), internal_error("not prepared"));
        on_threads(claims,
                   [&](size_t i, const ClaimRef& claim) { results[i] = m->prepare(claim); });
        for (const auto& result : results) {
          ASSERT_EQ(result.status().message(), "");
          ASSERT_EQ(result->size(), 2u);
        }
        EXPECT_EQ(snapshot(base_), prepared);
      }
      std::vector<std::string> errors(claims.size());
      on_threads(claims, [&](size_t i, const ClaimRef& claim) {
        errors[i] = m->unprepare(claim).message();
      });
      EXPECT_EQ(errors, std::vector<std::string>(claims.size(), ""));
      EXPECT_EQ(snapshot(base_), empty);
      EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
      EXPECT_TRUE(fs::is_empty(options_.cdi_dir));
    }
  }
}

// Two agents on one state folder (a rolling update): an old and a new manager, each with its
// own memory, share checkpoint.json through the state and claim lock files.

// The new agent started before the old one prepared: kubelet's retry of that prepare on the new
// agent answers from the checkpoint on disk, with no API GET and no file written again.
TEST_F(ShareManagerTest, PrepareRetriedOnTheOtherAgentAnswersFromTheCheckpointWithoutRedoingIt) {
  auto old_agent = manager(options_);
  auto new_agent = manager(options_);
  const PrepareResult first = old_agent->prepare(claim_);
  ASSERT_EQ(first.status().message(), "");
  const auto prepared = snapshot(base_);
  const auto limits_written = fs::last_write_time(share_dir(kShareA) + "/limits");
  const PrepareResult retried = new_agent->prepare(claim_);
  ASSERT_EQ(retried.status().message(), "");
  EXPECT_EQ(kube_.requests, 1);  // the old agent's GET only
  ASSERT_EQ(retried->size(), first->size());
  for (size_t i = 0; i < first->size(); ++i) {
    EXPECT_EQ((*retried)[i].cdi_device_ids, (*first)[i].cdi_device_ids);
    EXPECT_EQ((*retried)[i].share_id, (*first)[i].share_id);
  }
  EXPECT_EQ(snapshot(base_), prepared);
  EXPECT_EQ(fs::last_write_time(share_dir(kShareA) + "/limits"), limits_written);
  EXPECT_EQ(new_agent->checkpoint().at(kUid).state, ClaimState::kPrepareCompleted);
}

// Claims prepared on one agent are unprepared on the other, both ways; each then sees the claim
// gone (a prepare again redoes it in full) and neither leaves a file behind.
TEST_F(ShareManagerTest, ClaimsPreparedOnOneAgentAreUnpreparedOnTheOther) {
  const std::vector<ClaimRef> claims = add_claims(2);
  auto old_agent = manager(options_);
  auto new_agent = manager(options_);
  ASSERT_EQ(old_agent->prepare(claims[0]).status().message(), "");
  ASSERT_EQ(new_agent->prepare(claims[1]).status().message(), "");
  const json both = json::parse(read(options_.root + "/checkpoint.json"));
  EXPECT_EQ(both["claims"].size(), 2u) << both.dump(2);

  ASSERT_EQ(new_agent->unprepare(claims[0]).message(), "");
  ASSERT_EQ(old_agent->unprepare(claims[1]).message(), "");
  EXPECT_EQ(json::parse(read(options_.root + "/checkpoint.json"))["claims"], json::object());
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
  EXPECT_TRUE(fs::is_empty(options_.cdi_dir));
  for (const auto& left : fs::directory_iterator(options_.root + "/claims"))
    ADD_FAILURE() << "left behind: " << left.path();  // their lock files went with them

  // The old agent's memory still had claims[0] completed: it must not answer from it.
  const int gets = kube_.requests;
  ASSERT_EQ(old_agent->prepare(claims[0]).status().message(), "");
  EXPECT_EQ(kube_.requests, gets + 1);
  EXPECT_TRUE(fs::exists(old_agent->cdi_spec_path(claims[0].uid)));
  EXPECT_TRUE(new_agent->reconcile().clean());
  ASSERT_EQ(new_agent->unprepare(claims[0]).message(), "");
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
}

// The old agent's reconcile decides from the checkpoint on disk: the share folders and CDI spec
// the new agent prepared after the old one last read it are kept (and checked), a stray folder
// still goes.
TEST_F(ShareManagerTest, ReconcileOfTheOldAgentKeepsWhatTheNewOnePrepared) {
  auto old_agent = manager(options_);
  auto new_agent = manager(options_);
  ASSERT_EQ(new_agent->prepare(claim_).status().message(), "");
  const auto prepared = snapshot(base_);
  fs::create_directories(options_.root + "/shares/stray-gpu-0-x");
  const ReconcileReport report = old_agent->reconcile();
  ASSERT_EQ(report.items.size(), 1u) << report.to_text();
  EXPECT_EQ(report.items[0].subject, "share stray-gpu-0-x");
  EXPECT_EQ(snapshot(base_), prepared);
  // ...and repairs it like its own: the new agent's share folder deleted by hand comes back.
  fs::remove_all(share_dir(kShareA));
  const ReconcileReport repaired = old_agent->reconcile();
  ASSERT_EQ(repaired.items.size(), 1u) << repaired.to_text();
  EXPECT_EQ(repaired.items[0].problem, "share folder missing");
  EXPECT_EQ(snapshot(base_), prepared);
}

// Prepares and unprepares of different claims on both agents at once, each unprepared on the
// agent that did not prepare it: every change lands in checkpoint.json (neither agent's save
// writes over the other's entries), and nothing is left.
TEST_F(ShareManagerTest, ConcurrentClaimsOnTwoAgentsAllLandInTheCheckpoint) {
  const std::vector<ClaimRef> claims = add_claims(8);
  auto old_agent = manager(options_);
  auto new_agent = manager(options_);
  ShareManager* agents[] = {old_agent.get(), new_agent.get()};
  std::vector<PrepareResult> results(claims.size(), internal_error("not prepared"));
  on_threads(claims,
             [&](size_t i, const ClaimRef& claim) { results[i] = agents[i % 2]->prepare(claim); });
  for (size_t i = 0; i < claims.size(); ++i) EXPECT_EQ(results[i].status().message(), "");
  EXPECT_EQ(kube_.requests, static_cast<int>(claims.size()));
  const json saved = json::parse(read(options_.root + "/checkpoint.json"));
  ASSERT_EQ(saved["claims"].size(), claims.size()) << saved.dump(2);
  for (const auto& claim : claims)
    EXPECT_EQ(saved["claims"][claim.uid]["state"], "PrepareCompleted");
  EXPECT_TRUE(old_agent->reconcile().clean());
  EXPECT_TRUE(new_agent->reconcile().clean());

  std::vector<std::string> errors(claims.size());
  on_threads(claims, [&](size_t i, const ClaimRef& claim) {
    errors[i] = agents[(i + 1) % 2]->unprepare(claim).message();
  });
  for (const auto& error : errors) EXPECT_EQ(error, "");
  EXPECT_EQ(json::parse(read(options_.root + "/checkpoint.json"))["claims"], json::object());
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
  EXPECT_TRUE(fs::is_empty(options_.cdi_dir));
}

// Kubelet's calls for one claim split between the agents, all at once: one prepare does the work
// (one GET), the others wait for it on the claim's lock file and answer from the checkpoint.
TEST_F(ShareManagerTest, ConcurrentPreparesOfOneClaimOnTwoAgentsRunOneAtATime) {
  auto old_agent = manager(options_);
  auto new_agent = manager(options_);
  ShareManager* agents[] = {old_agent.get(), new_agent.get()};
  const std::vector<ClaimRef> same(6, claim_);
  std::vector<PrepareResult> results(same.size(), internal_error("not prepared"));
  on_threads(same,
             [&](size_t i, const ClaimRef& claim) { results[i] = agents[i % 2]->prepare(claim); });
  EXPECT_EQ(kube_.requests, 1);
  for (const auto& result : results) {
    EXPECT_EQ(result.status().message(), "");
    ASSERT_EQ(result->size(), 2u);
    EXPECT_EQ((*result)[1].cdi_device_ids, (*results[0])[1].cdi_device_ids);
  }
  std::vector<std::string> errors(same.size());
  on_threads(same, [&](size_t i, const ClaimRef& claim) {
    errors[i] = agents[i % 2]->unprepare(claim).message();
  });
  EXPECT_EQ(errors, std::vector<std::string>(same.size(), ""));
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
}

// The checkpoint is read again only when it changed: an agent that alone writes it never
// rereads, and the other agent's write is seen at the next call (a corrupt file then is an error
// of that call, not a silently kept stale view).
TEST_F(ShareManagerTest, TheCheckpointIsReadAgainWhenTheOtherAgentChangedIt) {
  const std::vector<ClaimRef> claims = add_claims(1);
  auto old_agent = manager(options_);
  auto new_agent = manager(options_);
  ASSERT_EQ(new_agent->prepare(claims[0]).status().message(), "");
  EXPECT_EQ(old_agent->checkpoint().count(claims[0].uid), 0u);  // not read yet
  EXPECT_TRUE(old_agent->reconcile().clean());                  // reads it
  EXPECT_EQ(old_agent->checkpoint().at(claims[0].uid).state, ClaimState::kPrepareCompleted);

  std::ofstream(options_.root + "/checkpoint.json") << R"({"version": 9, "claims": {}})";
  const Status refused = old_agent->unprepare(claims[0]);
  EXPECT_EQ(refused.code(), StatusCode::kInternal);
  EXPECT_EQ(refused.message(), options_.root + "/checkpoint.json: checkpoint version 9 is not 1");
  EXPECT_TRUE(fs::exists(old_agent->cdi_spec_path(claims[0].uid)));  // nothing undone blindly
}

}  // namespace
}  // namespace tessera::agent
