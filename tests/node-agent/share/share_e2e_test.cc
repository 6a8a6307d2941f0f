// End to end on the simulated GPU: the share manager prepares a claim with two shares of one
// device (8Gi / 30% and 4Gi / 70%), memory-fill runs under each CDI device's environment
// (TESSERA_SHARE_DIR, the share folder at its host path, and libvgpu preloaded: the spec mounts
// a file naming it at /etc/ld.so.preload, which LD_PRELOAD stands in for, as no container runtime
// applies the mounts here), each stops exactly at its share's limit, and unprepare leaves
// nothing behind. Then a claim for shares of two GPUs, given to one container: both CDI devices'
// environments together (what the runtime merges), and each GPU holds its own limit.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "apiserver/claim_fixture.h"
#include "devices/resource_slices.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "simulated_node.h"
#include "tenant_claims.h"
#include "tessera/gpu_info.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kContextOverhead = 500ull << 20;  // the simulator's default per context

// An empty folder for one test's state (share folders, CDI specs, the simulator's state file).
fs::path fresh_folder(const std::string& name) {
  const fs::path base = fs::temp_directory_path() / (name + "-" + std::to_string(getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  return base;
}

// The share manager's settings for a node whose shim is the one built here.
ShareManagerOptions node_options(const fs::path& base) {
  ShareManagerOptions options;
  options.root = (base / "state").string();
  options.cdi_dir = (base / "cdi").string();
  options.node_name = "node-a";
  options.shim_path = LIBVGPU_SO;
  options.container_driver = testing::fake_container_driver(base / "driver");
  return options;
}

// What the spec preloads: the content of the file it mounts at /etc/ld.so.preload, as the
// LD_PRELOAD that stands in for it here (the default loading sets no LD_PRELOAD itself).
std::string preload_env(const json& spec) {
  for (const auto& mount : spec["containerEdits"]["mounts"])
    if (mount["containerPath"] == "/etc/ld.so.preload") {
      std::ifstream file(mount["hostPath"].get<std::string>());
      std::string shim;
      std::getline(file, shim);
      EXPECT_EQ(shim, LIBVGPU_SO);
      return " 'LD_PRELOAD=" + shim + "'";
    }
  ADD_FAILURE() << "no /etc/ld.so.preload mount in " << spec.dump(2);
  return "";
}

std::string run(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof buffer, pipe)) out += buffer;
  if (pipe) pclose(pipe);
  return out;
}

TEST(ShareEndToEnd, TwoSharesOfOneSimulatedGpuHoldTheirLimits) {
  const fs::path base = fresh_folder("agent-e2e");
  const std::string state = (base / "simgpu.state").string();
  const std::string simgpu_env =
      "SIMGPU_STATE=" + state + " SIMGPU_DEVICES='name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0'";
  setenv("SIMGPU_STATE", state.c_str(), 1);
  setenv("SIMGPU_DEVICES", "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0", 1);
  std::vector<GpuInfo> gpus;
  Result<std::vector<GpuInfo>> listed = list_gpus();
  ASSERT_EQ(listed.status().message(), "");
  gpus = *listed;
  ASSERT_EQ(gpus.size(), 1u);
  const std::string device = "gpu-" + std::to_string(gpus[0].minor);

  testing::TenantClaims kube;
  kube.bodies["pair"] = testing::make_claim("pair", "e2e-claim-uid",
                                            {{"a", device, "share-a", "8Gi", "30"},
                                             {"b", device, "share-b", "4Gi", "70"}})
                            .dump();
  const ShareManagerOptions options = node_options(base);
  ShareManager manager(options, kube, node_devices(gpus));
  ASSERT_EQ(manager.start().message(), "");
  const PrepareResult result = manager.prepare({"tenants", "e2e-claim-uid", "pair"});
  ASSERT_EQ(result.status().message(), "");
  ASSERT_EQ(result->size(), 2u);

  std::ifstream spec_file(manager.cdi_spec_path("e2e-claim-uid"));
  const json spec = json::parse(spec_file);
  const uint64_t limits[] = {8 * kGiB, 4 * kGiB};
  for (size_t i = 0; i < 2; ++i) {
    const json& edits = spec["devices"][i]["containerEdits"];
    std::string env;
    for (const auto& entry : edits["env"]) {
      std::string value = entry.get<std::string>();
      // The runtime would mount the host folder at the container path; here the host path is used.
      if (value.rfind("TESSERA_SHARE_DIR=", 0) == 0)
        value = "TESSERA_SHARE_DIR=" + edits["mounts"][0]["hostPath"].get<std::string>();
      env += " '" + value + "'";
    }
    env += preload_env(spec);
    // ASAN_OPTIONS: in a sanitizer build the shim precedes the ASan runtime in memory-fill.
    const std::string out = run("env" + env + " ASAN_OPTIONS=verify_asan_link_order=0" +
                                " LD_LIBRARY_PATH=" + SIMGPU_LIB_DIR + " " + simgpu_env + " " +
                                MEMORY_FILL + " --chunk 256Mi");
    SCOPED_TRACE(out);
    std::printf("share %zu: %s", i, out.c_str());
    const json report = json::parse(out.substr(0, out.find('\n')), nullptr, false);
    ASSERT_TRUE(report.is_object());
    EXPECT_EQ(report["bytes_obtained"], limits[i] - kContextOverhead);
    EXPECT_EQ(report["stop_reason"], "CUDA_ERROR_OUT_OF_MEMORY");
    EXPECT_EQ(report["mem_get_info_total"], limits[i]);
  }

  ASSERT_EQ(manager.unprepare({"tenants", "e2e-claim-uid", "pair"}).message(), "");
  EXPECT_TRUE(fs::is_empty(options.root + "/shares"));
  EXPECT_TRUE(fs::is_empty(options.cdi_dir));
  fs::remove_all(base);
}

// A program written for the CUDA runtime (built by nvcc, static and shared runtime) in an agent
// share of 4Gi / 30%: the share is its GPU, and cudaMalloc gets the quota less the context.
TEST(ShareEndToEnd, ARuntimeProgramSeesItsShareAsTheGpu) {
  const fs::path base = fresh_folder("agent-e2e-runtime");
  const std::string state = (base / "simgpu.state").string();
  const std::string simgpu_env =
      "SIMGPU_STATE=" + state + " SIMGPU_DEVICES='name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0'";
  setenv("SIMGPU_STATE", state.c_str(), 1);
  setenv("SIMGPU_DEVICES", "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0", 1);
  Result<std::vector<GpuInfo>> listed = list_gpus();
  ASSERT_EQ(listed.status().message(), "");
  ASSERT_EQ(listed->size(), 1u);
  const std::string device = "gpu-" + std::to_string((*listed)[0].minor);

  testing::TenantClaims kube;
  kube.bodies["one"] =
      testing::make_claim("one", "e2e-runtime-uid", {{"a", device, "share-a", "4Gi", "30"}}).dump();
  const ShareManagerOptions options = node_options(base);
  ShareManager manager(options, kube, node_devices(*listed));
  ASSERT_EQ(manager.start().message(), "");
  ASSERT_EQ(manager.prepare({"tenants", "e2e-runtime-uid", "one"}).status().message(), "");
  std::ifstream spec_file(manager.cdi_spec_path("e2e-runtime-uid"));
  const json spec = json::parse(spec_file);
  const json& edits = spec["devices"][0]["containerEdits"];
  std::string env;
  for (const auto& entry : edits["env"]) {
    std::string value = entry.get<std::string>();
    if (value.rfind("TESSERA_SHARE_DIR=", 0) == 0)
      value = "TESSERA_SHARE_DIR=" + edits["mounts"][0]["hostPath"].get<std::string>();
    env += " '" + value + "'";
  }
  env += preload_env(spec);
  const std::string prefix = "env" + env + " ASAN_OPTIONS=verify_asan_link_order=0" +
                             " LD_LIBRARY_PATH=" + SIMGPU_LIB_DIR + ":" + CUDA_LIBRARY_DIR + " " +
                             simgpu_env + " ";
  constexpr uint64_t kChunk = 64ull << 20;
  for (const char* probe : {RUNTIME_PROBE_STATIC, RUNTIME_PROBE_SHARED}) {
    SCOPED_TRACE(probe);
    const std::string query_out = run(prefix + probe + " query");
    std::printf("%s", query_out.c_str());
    const json query = json::parse(query_out, nullptr, false);
    ASSERT_TRUE(query.is_object()) << query_out;
    EXPECT_EQ(query["device_count"], 1);
    EXPECT_EQ(query["total_global_mem"], 4 * kGiB);
    EXPECT_EQ(query["total"], 4 * kGiB);
    EXPECT_EQ(query["free"], 4 * kGiB - kContextOverhead);
    const std::string fill_out = run(prefix + probe + " fill " + std::to_string(kChunk));
    std::printf("%s", fill_out.c_str());
    const json fill = json::parse(fill_out, nullptr, false);
    ASSERT_TRUE(fill.is_object()) << fill_out;
    EXPECT_EQ(fill["refusal"], "cudaErrorMemoryAllocation");
    const uint64_t usable = 4 * kGiB - kContextOverhead;
    EXPECT_LE(fill["obtained"].get<uint64_t>(), usable);
    EXPECT_GT(fill["obtained"].get<uint64_t>(), usable - kChunk);
  }
  ASSERT_EQ(manager.unprepare({"tenants", "e2e-runtime-uid", "one"}).message(), "");
  fs::remove_all(base);
}

TEST(ShareEndToEnd, OneContainerWithSharesOfTwoGpusHoldsEachLimit) {
  const fs::path base = fresh_folder("agent-e2e-two");
  const std::string state = (base / "simgpu.state").string();
  const std::string devices =
      "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0;name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";
  const auto node = testing::simulated_devices(state, devices);
  ASSERT_EQ(node.size(), 2u);

  testing::TenantClaims kube;
  kube.bodies["pair"] = testing::make_claim("pair", "e2e-two-gpus",
                                            {{"gpus", node[0].name, "share-0", "8Gi", "30"},
                                             {"gpus", node[1].name, "share-1", "4Gi", "70"}})
                            .dump();
  const ShareManagerOptions options = node_options(base);
  ShareManager manager(options, kube, node);
  ASSERT_EQ(manager.start().message(), "");
  const ClaimRef claim{"tenants", "e2e-two-gpus", "pair"};
  ASSERT_EQ(manager.prepare(claim).status().message(), "");

  // The container gets both CDI devices: the runtime applies both devices' edits, a variable set
  // by both taking the later value. Both name the same folder, so nothing is lost.
  std::ifstream spec_file(manager.cdi_spec_path("e2e-two-gpus"));
  const json spec = json::parse(spec_file);
  ASSERT_EQ(spec["devices"].size(), 2u);
  std::map<std::string, std::string> merged;
  for (const auto& device : spec["devices"]) {
    const json& edits = device["containerEdits"];
    for (const auto& entry : edits["env"]) {
      std::string value = entry.get<std::string>();
      const std::string name = value.substr(0, value.find('='));
      if (name == "TESSERA_SHARE_DIR")
        value = name + "=" + edits["mounts"][0]["hostPath"].get<std::string>();
      if (merged.count(name)) {
        EXPECT_EQ(merged[name], value) << "devices disagree on " << name;
      }
      merged[name] = value;
    }
  }
  std::string env;
  for (const auto& [name, value] : merged) env += " '" + value + "'";
  env += preload_env(spec);
  const uint64_t limits[] = {8 * kGiB, 4 * kGiB};
  for (int gpu = 0; gpu < 2; ++gpu) {
    const std::string out =
        run("env" + env + " ASAN_OPTIONS=verify_asan_link_order=0" +
            " LD_LIBRARY_PATH=" + SIMGPU_LIB_DIR + " SIMGPU_STATE=" + state + " SIMGPU_DEVICES='" +
            devices + "' " + MEMORY_FILL + " --chunk 256Mi --device " + std::to_string(gpu));
    SCOPED_TRACE(out);
    std::printf("gpu %d: %s", gpu, out.c_str());
    const json report = json::parse(out.substr(0, out.find('\n')), nullptr, false);
    ASSERT_TRUE(report.is_object());
    EXPECT_EQ(report["bytes_obtained"], limits[gpu] - kContextOverhead);
    EXPECT_EQ(report["mem_get_info_total"], limits[gpu]);
  }

  ASSERT_EQ(manager.unprepare(claim).message(), "");
  EXPECT_TRUE(fs::is_empty(options.root + "/shares"));
  EXPECT_TRUE(fs::is_empty(options.cdi_dir));
  fs::remove_all(base);
}

}  // namespace
}  // namespace tessera::agent
