// A process given several shares (libvgpu/src/state.cc; docs/libvgpu.md, "Several shares"):
// vgpu_probe under the shim against the simulated driver, with share folders named in
// TESSERA_SHARE_DIR or mounted under the fixed share root /var/run/tessera/shares. The share-root
// tests run the probe in a private user and mount namespace (unshare -rm) with a tmpfs over /run,
// so they can bind-mount limits files read-only as the container runtime does, without touching
// the machine's /run; where such namespaces are not allowed they are skipped and say so.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "shim_test_support.h"
#include "sim_mig.h"
#include "sim_test_support.h"

namespace {

using tessera::vgpu::testing::Env;
using tessera::vgpu::testing::Probe;
using tessera::vgpu::testing::ProbeRun;
using tessera::vgpu::testing::run_probe;
using tessera::vgpu::testing::ShareDir;
using tessera::vgpu::testing::sim_uuid;
using tessera::vgpu::testing::words;
namespace share = tessera::share;

constexpr uint64_t kMi = 1ull << 20;
constexpr uint64_t kGi = 1ull << 30;
constexpr uint64_t kContext = 500 * kMi;
constexpr char kUnshare[] = "/usr/bin/unshare";
constexpr char kOneGpu[] = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";
constexpr char kTwoGpus[] =
    "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0;name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";

uint64_t field(const std::string& line, size_t index) {
  const auto w = words(line);
  return index < w.size() ? std::stoull(w[index]) : ~0ull;
}

// A folder under the share root inside the namespace: a share folder bind-mounted as the CDI spec
// mounts it (limits read-only over itself), or, for a tenant's fake, a plain folder with a copy of
// a limits page.
struct Folder {
  std::string name;
  const ShareDir* share;
  bool read_only_limits;
};

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs vgpu_probe under the shim in a new user + mount namespace whose /run is a private tmpfs
// holding `folders` under /run/tessera/shares. The probe's environment is cleared (env -i), as a
// program that empties its environment would have it, except for the simulator's settings, the
// preload, ASAN_OPTIONS and `env`.
ProbeRun run_in_share_root(const std::vector<Folder>& folders, const Env& env,
                           const std::vector<std::string>& args) {
  std::string script = "set -e; mount -t tmpfs tessera-test /run; mkdir -p /run/tessera/shares; ";
  for (const Folder& folder : folders) {
    const std::string target = "/run/tessera/shares/" + folder.name;
    script += "mkdir " + quoted(target) + "; ";
    if (folder.read_only_limits) {
      script += "mount --bind " + quoted(folder.share->path()) + " " + quoted(target) + "; ";
      script += "mount --bind " + quoted(folder.share->path() + "/limits") + " " +
                quoted(target + "/limits") + "; ";
      script += "mount -o remount,bind,ro " + quoted(target + "/limits") + "; ";
    } else {
      script += "cp " + quoted(folder.share->path() + "/limits") + " " + quoted(target) + "/; ";
    }
  }
  script += "exec env -i";
  for (const char* name : {"SIMGPU_STATE", "SIMGPU_DEVICES", "SIMGPU_CONTEXT_OVERHEAD"}) {
    script += std::string(" ") + name + "=" + quoted(std::getenv(name) ? std::getenv(name) : "");
  }
  script += " LD_LIBRARY_PATH=" + quoted(SIMGPU_LIB_DIR) + " LD_PRELOAD=" + quoted(LIBVGPU_SO);
  // Kept for sanitized probes (Probe sets it: the preloaded shim precedes the ASan runtime).
  script += " ${ASAN_OPTIONS:+\"ASAN_OPTIONS=$ASAN_OPTIONS\"}";
  for (const auto& [name, value] : env) script += " " + name + "=" + quoted(value);
  script += " " + quoted(VGPU_PROBE);
  for (const std::string& arg : args) script += " " + quoted(arg);
  return run_probe({}, {"-rm", "/bin/sh", "-c", script}, /*with_shim=*/false, kUnshare);
}

// Whether this machine lets the tests make user + mount namespaces with read-only bind mounts.
std::string namespaces_unavailable() {
  struct stat status {};
  if (stat(kUnshare, &status) != 0) return std::string(kUnshare) + " is not installed";
  ProbeRun run = run_probe({},
                           {"-rm", "/bin/sh", "-c",
                            "mount -t tmpfs t /run && touch /run/f && mount --bind /run/f /run/f "
                            "&& mount -o remount,bind,ro /run/f && ! touch /run/f 2>/dev/null"},
                           /*with_shim=*/false, kUnshare);
  if (run.status != 0) {
    return "unshare -rm cannot make a read-only bind mount here (user namespaces disallowed?): " +
           run.err;
  }
  return "";
}

class SharesTest : public ::testing::Test {
 protected:
  simgpu::testing::SimEnvironment sim_{kOneGpu};
};

std::string create_mig_instance(const std::string& profile) {
  return simgpu::testing::create_mig_instance(SIMGPU_CTL, profile);
}

// `simgpu-ctl mig list 0`'s `key` of the compute instance whose MIG UUID is `uuid` (the simulated
// NVML's view of the instance, apart from any shim), or ~0 when it is not listed.
uint64_t mig_instance_figure(const std::string& uuid, const std::string& key) {
  FILE* pipe = popen((std::string(SIMGPU_CTL) + " mig list 0").c_str(), "r");
  if (!pipe) return ~0ull;
  std::string out;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
  pclose(pipe);
  const nlohmann::json gpu = nlohmann::json::parse(out, nullptr, false);
  if (!gpu.is_object()) return ~0ull;
  for (const auto& instance : gpu.value("gpu_instances", nlohmann::json::array()))
    for (const auto& compute : instance.value("compute_instances", nlohmann::json::array()))
      if (compute.value("uuid", "") == uuid) return compute.value(key, ~0ull);
  return ~0ull;
}

// An H100 80GB in MIG mode on the simulated GPU, with instances made by simgpu-ctl: a process given
// CUDA_VISIBLE_DEVICES=MIG-<uuid> sees the instance alone, as the agent's CDI spec hands it out
// (named "<parent> MIG <profile>", the instance's memory and SMs; mig-facts.md section 3), and the
// agent keys the share's limits page to the MIG UUID.
class SharesInMigInstanceTest : public ::testing::Test {
 protected:
  simgpu::testing::SimEnvironment sim_{
      "name=NVIDIA H100 80GB HBM3,memory=81559Mi,sms=132,cc=9.0,mig=on"};
};

// The same machine, for NVML's view of an instance.
class SharesOnSimulatedMigTest : public SharesInMigInstanceTest {};

class SharesOnTwoGpusTest : public ::testing::Test {
 protected:
  simgpu::testing::SimEnvironment sim_{kTwoGpus};
};

// Inside a share the context costs what the limits page says (the built-in 500Mi here:
// TESSERA_CONTEXT_OVERHEAD is ignored there), charged to the first share with room: `a` has room
// for it on top of its 1 GiB.
TEST_F(SharesTest, TwoSharesOfOneGpuHoldTheirSumAndEachStaysWithinItsLimit) {
  ShareDir a({{sim_uuid(0), kGi + kContext}});
  ShareDir b({{sim_uuid(0), 512 * kMi}});
  Probe probe({{"TESSERA_SHARE_DIR", a.path() + ":" + b.path()}},
              {"init", "info", "nvml", "fill:mem:64Mi", "info", "ready", "hold"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  const std::string info = probe.read_line().value_or("");
  EXPECT_EQ(field(info, 3), kGi + 512 * kMi + kContext) << info;  // total: the sum of the limits
  EXPECT_EQ(field(info, 2), kGi + 512 * kMi) << info;             // free: the context only held
  const std::string nvml = probe.read_line().value_or("");
  EXPECT_EQ(field(nvml, 2), kGi + 512 * kMi + kContext) << nvml;
  const std::string fill = probe.read_line().value_or("");
  EXPECT_EQ(field(fill, 2), 24u) << fill;  // 1.5Gi in 64Mi allocations
  EXPECT_EQ(field(fill, 3), kGi + 512 * kMi) << fill;
  EXPECT_EQ(words(fill).back(), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(field(probe.read_line().value_or(""), 2), 0u);  // free: none left
  EXPECT_EQ(probe.read_line(), "ready");
  // Each share's usage page holds its own part, never more than its own limit.
  EXPECT_EQ(a.used(), kGi + kContext);
  EXPECT_EQ(b.used(), 512 * kMi);
}

TEST_F(SharesTest, AnAllocationLargerThanAnyOneShareIsSplitAndGivenBackInFull) {
  ShareDir a({{sim_uuid(0), kGi + kContext}});  // room for the context besides 1 GiB
  ShareDir b({{sim_uuid(0), 512 * kMi}});
  const std::string go = a.path() + "/go";
  Probe probe({{"TESSERA_SHARE_DIR", a.path() + ":" + b.path()}},
              {"init", "alloc:mem:1280Mi", "ready", "waitfile:" + go, "free", "ready", "hold"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "alloc mem CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(a.used(), kGi + kContext);
  EXPECT_EQ(b.used(), 256 * kMi);
  const int fd = open(go.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_EQ(probe.read_line(), "free CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(a.used(), kContext) << "the context is still held";
  EXPECT_EQ(b.used(), 0u);
  unlink(go.c_str());
}

// Two processes in one 3g.40gb instance (40448 MiB of the H100's 81559), each with its own share
// keyed to the MIG UUID: each sees its quota as the device's memory and allocates exactly up to it;
// what they hold is the instance's own memory, as the simulated NVML counts it for the instance.
TEST_F(SharesInMigInstanceTest, TwoSharesOfOneInstanceEachHoldTheirQuotaExactly) {
  const std::string uuid = create_mig_instance("3g.40gb");
  ASSERT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
  ASSERT_EQ(mig_instance_figure(uuid, "memory_total_bytes"), 40448 * kMi);
  ShareDir a({{uuid, 4 * kGi + kContext}});
  ShareDir b({{uuid, 2 * kGi + kContext}});
  Probe first({{"TESSERA_SHARE_DIR", a.path()}, {"CUDA_VISIBLE_DEVICES", uuid}},
              {"init", "info", "total", "fill:mem:64Mi", "info", "ready", "hold"});
  Probe second({{"TESSERA_SHARE_DIR", b.path()}, {"CUDA_VISIBLE_DEVICES", uuid}},
               {"init", "info", "total", "fill:mem:64Mi", "info", "ready", "hold"});
  for (auto [probe, quota] : {std::pair{&first, 4 * kGi}, std::pair{&second, 2 * kGi}}) {
    EXPECT_EQ(probe->read_line(), "init CUDA_SUCCESS");
    const std::string info = probe->read_line().value_or("");
    EXPECT_EQ(field(info, 3), quota + kContext) << info;  // total: the share's quota
    EXPECT_EQ(field(info, 2), quota) << info;             // free: all but the context
    EXPECT_EQ(field(probe->read_line().value_or(""), 2), quota + kContext);
    const std::string fill = probe->read_line().value_or("");
    EXPECT_EQ(field(fill, 3), quota) << fill;  // exactly the quota, in 64Mi allocations
    EXPECT_EQ(words(fill).back(), "CUDA_ERROR_OUT_OF_MEMORY");
    EXPECT_EQ(field(probe->read_line().value_or(""), 2), 0u);
    EXPECT_EQ(probe->read_line(), "ready");
  }
  EXPECT_EQ(a.used(), 4 * kGi + kContext);
  EXPECT_EQ(b.used(), 2 * kGi + kContext);
  // Both processes' memory is on the instance: the driver's count of it is the shares' sum.
  EXPECT_EQ(mig_instance_figure(uuid, "memory_used_bytes"), 6 * kGi + 2 * kContext);
}

// A share whose quota is larger than its instance (16 GiB on a 1g.10gb instance of 9984 MiB, on an
// 80 GB GPU) is held by the instance: the process sees and gets the instance's memory, never the
// parent GPU's; and a second share beside it gets only what the first left of the instance.
TEST_F(SharesInMigInstanceTest, TheInstancesOwnMemoryBoundsItsShares) {
  const std::string uuid = create_mig_instance("1g.10gb");
  ASSERT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
  const uint64_t instance = 9984 * kMi;
  ASSERT_EQ(mig_instance_figure(uuid, "memory_total_bytes"), instance);
  ShareDir big({{uuid, 16 * kGi}});
  ShareDir small({{uuid, 4 * kGi}});
  Probe first({{"TESSERA_SHARE_DIR", big.path()}, {"CUDA_VISIBLE_DEVICES", uuid}},
              {"init", "total", "fill:mem:64Mi", "ready", "hold"});
  EXPECT_EQ(first.read_line(), "init CUDA_SUCCESS");
  EXPECT_EQ(first.read_line(), "total CUDA_SUCCESS " + std::to_string(instance));
  const std::string filled = first.read_line().value_or("");
  // 64Mi allocations up to the instance's memory, its context (500Mi) taken out.
  EXPECT_EQ(field(filled, 3), (instance - kContext) / (64 * kMi) * (64 * kMi)) << filled;
  EXPECT_EQ(words(filled).back(), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(first.read_line(), "ready");
  const uint64_t left = instance - mig_instance_figure(uuid, "memory_used_bytes");
  ASSERT_LT(left, 64 * kMi);
  // The second share's process: within its 4 GiB quota, but the instance has no room for its
  // context.
  ProbeRun second = run_probe({{"TESSERA_SHARE_DIR", small.path()}, {"CUDA_VISIBLE_DEVICES", uuid}},
                              {"init", "alloc:mem:1Gi"});
  ASSERT_GE(second.lines.size(), 1u) << second.err;
  EXPECT_EQ(second.lines[0], "init CUDA_ERROR_OUT_OF_MEMORY") << "left in the instance: " << left;
  EXPECT_EQ(small.used(), 0u);
}

// A share whose limits page names the device "GPU-<uuid>" where CUDA presents the MIG device with
// the same 16 bytes still holds it: the same bytes are the same device, whichever prefix.
TEST_F(SharesInMigInstanceTest, TheOtherPrefixOfTheSameUuidIsTheSameDevice) {
  const std::string uuid = create_mig_instance("3g.40gb");
  ASSERT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
  ShareDir a({{"GPU-" + uuid.substr(4), kGi + kContext}});
  ProbeRun run = run_probe({{"TESSERA_SHARE_DIR", a.path()}, {"CUDA_VISIBLE_DEVICES", uuid}},
                           {"init", "info"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(field(run.lines[1], 3), kGi + kContext) << run.lines[1];
}

// NVML on a MIG device's handle (nvmlDeviceGetHandleByUUID("MIG-...")) shows each share its own
// quota of the instance; the parent GPU is not part of such a share (a view of 0).
TEST_F(SharesOnSimulatedMigTest, NvmlOnTheMigHandleShowsEachShareItsQuota) {
  const std::string uuid = create_mig_instance("3g.40gb");
  ASSERT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
  ShareDir a({{uuid, 4 * kGi}});
  ShareDir b({{uuid, 2 * kGi}});
  for (auto [share, quota] : {std::pair{&a, 4 * kGi}, std::pair{&b, 2 * kGi}}) {
    ProbeRun run =
        run_probe({{"TESSERA_SHARE_DIR", share->path()}}, {"nvmluuid:" + uuid, "nvml:0"});
    ASSERT_EQ(run.status, 0) << run.err;
    ASSERT_EQ(run.lines.size(), 2u) << run.err;
    EXPECT_EQ(field(run.lines[0], 1), 0u) << run.lines[0];  // NVML_SUCCESS
    EXPECT_EQ(field(run.lines[0], 2), quota) << run.lines[0];
    EXPECT_EQ(field(run.lines[0], 3), quota) << run.lines[0];  // nothing allocated: all free
    EXPECT_EQ(field(run.lines[1], 2), 0u) << run.lines[1];     // the parent: not the share's
  }
}

TEST_F(SharesOnTwoGpusTest, EachGpuIsHeldToItsOwnShare) {
  ShareDir a({{sim_uuid(0), kGi + kContext}});  // each with room for its GPU's context
  ShareDir b({{sim_uuid(1), 512 * kMi + kContext}});
  ProbeRun run =
      run_probe({{"TESSERA_SHARE_DIR", a.path() + ":" + b.path()}},
                {"init:0", "total:0", "fill:mem:64Mi", "init:1", "total:1", "fill:mem:64Mi"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 6u) << run.err;
  EXPECT_EQ(run.lines[1], "total CUDA_SUCCESS " + std::to_string(kGi + kContext));
  EXPECT_EQ(field(run.lines[2], 3), kGi) << run.lines[2];
  EXPECT_EQ(run.lines[3], "init CUDA_SUCCESS");
  EXPECT_EQ(run.lines[4], "total CUDA_SUCCESS " + std::to_string(512 * kMi + kContext));
  EXPECT_EQ(field(run.lines[5], 3), 512 * kMi) << run.lines[5];
  // Each share's page counts its own GPU only (device 0 of each limits page).
  EXPECT_EQ(a.used(), kGi + kContext);
  EXPECT_EQ(b.used(), 512 * kMi + kContext);
}

TEST_F(SharesTest, SharesUnderTheShareRootAreEnforcedWithAClearedEnvironment) {
  if (const std::string why = namespaces_unavailable(); !why.empty()) GTEST_SKIP() << why;
  ShareDir a({{sim_uuid(0), kGi}});
  ShareDir b({{sim_uuid(0), 512 * kMi}});
  // No TESSERA_* variable at all: the shares are found under the root.
  ProbeRun run =
      run_in_share_root({{"a", &a, true}, {"b", &b, true}}, {}, {"init", "total", "fill:mem:64Mi"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 3u) << run.err;
  EXPECT_EQ(run.lines[0], "init CUDA_SUCCESS");
  EXPECT_EQ(run.lines[1], "total CUDA_SUCCESS " + std::to_string(kGi + 512 * kMi));
  // The context (500Mi) and 64Mi allocations fill both shares up to what is left in each.
  EXPECT_EQ(field(run.lines[2], 2), 16u) << run.lines[2];
  EXPECT_LE(a.used(), kGi);
  EXPECT_LE(b.used(), 512 * kMi);
  EXPECT_EQ(a.used() + b.used(), kContext + 16 * 64 * kMi);

  // A limit in the environment raises nothing beside them, and the shim says it is ignored.
  run = run_in_share_root({{"a", &a, true}, {"b", &b, true}}, {{"TESSERA_MEMORY_LIMIT", "8Gi"}},
                          {"init", "total"});
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(run.lines[1], "total CUDA_SUCCESS " + std::to_string(kGi + 512 * kMi));
  EXPECT_NE(run.err.find("TESSERA_MEMORY_LIMIT='8Gi' is ignored"), std::string::npos) << run.err;
}

TEST_F(SharesTest, AFolderWhoseLimitsAreNotOnAReadOnlyMountIsIgnored) {
  if (const std::string why = namespaces_unavailable(); !why.empty()) GTEST_SKIP() << why;
  ShareDir real({{sim_uuid(0), kGi}});
  ShareDir fake({{sim_uuid(0), 8 * kGi}});   // a tenant's own folder under the root
  ShareDir named({{sim_uuid(0), 4 * kGi}});  // a tenant's folder named in TESSERA_SHARE_DIR
  ProbeRun run = run_in_share_root(
      {{"a", &real, true}, {"b-fake", &fake, false}},
      {{"TESSERA_LOG_LEVEL", "warn"}, {"TESSERA_SHARE_DIR", named.path()}}, {"init", "total"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(run.lines[1], "total CUDA_SUCCESS " + std::to_string(kGi)) << run.err;
  EXPECT_NE(run.err.find("/run/tessera/shares/b-fake/limits is not on a read-only mount"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("TESSERA_SHARE_DIR names " + named.path()), std::string::npos) << run.err;
  EXPECT_EQ(named.usage(), nullptr);  // never opened

  // Only a fake under the root: it raises nothing (no share: the device passes through as it
  // would with no Tessera share at all).
  run = run_in_share_root({{"b-fake", &fake, false}}, {{"TESSERA_LOG_LEVEL", "warn"}},
                          {"init", "total"});
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(run.lines[1], "total CUDA_SUCCESS " + std::to_string(16 * kGi)) << run.err;
  EXPECT_NE(run.err.find("not on a read-only mount"), std::string::npos) << run.err;
}

TEST_F(SharesTest, TheEnvironmentNamingAShareUnderTheRootCountsItOnce) {
  if (const std::string why = namespaces_unavailable(); !why.empty()) GTEST_SKIP() << why;
  ShareDir a({{sim_uuid(0), kGi}});
  // As the CDI spec sets it: TESSERA_SHARE_DIR names the same folder the root holds.
  ProbeRun run = run_in_share_root(
      {{"a", &a, true}}, {{"TESSERA_SHARE_DIR", "/var/run/tessera/shares/a"}}, {"init", "total"});
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(run.lines[1], "total CUDA_SUCCESS " + std::to_string(kGi)) << run.err;
}

TEST_F(SharesTest, TwoMpsSharesAreRefusedAndOneBesideAQuotaShareIsFine) {
  ShareDir a({{sim_uuid(0), kGi}});
  ShareDir b({{sim_uuid(0), 512 * kMi}});
  ShareDir quota({{sim_uuid(0), 256 * kMi}});
  a.set_limit(0, kGi + kContext);  // room for the context
  a.mark_mps();
  b.mark_mps();
  ProbeRun run =
      run_probe({{"TESSERA_SHARE_DIR", a.path() + ":" + b.path()}}, {"init", "alloc:mem:1Mi"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.lines.at(0), "init CUDA_ERROR_MPS_CONNECTION_FAILED");
  EXPECT_NE(run.lines.at(1).find("alloc mem CUDA_ERROR"), std::string::npos) << run.lines.at(1);
  EXPECT_NE(run.err.find("given 2 MPS shares"), std::string::npos) << run.err;

  run = run_probe({{"TESSERA_SHARE_DIR", a.path() + ":" + quota.path()}}, {"init", "total"});
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(run.lines[0], "init CUDA_SUCCESS");
  EXPECT_EQ(run.lines[1], "total CUDA_SUCCESS " + std::to_string(kGi + kContext + 256 * kMi));
}

TEST_F(SharesTest, EachShareWithAComputeSettingRunsItsOwnMeter) {
  ShareDir a({{sim_uuid(0), kGi}});
  ShareDir b({{sim_uuid(0), kGi}});
  ShareDir none({{sim_uuid(0), kGi}});
  a.set_cores(0, 50);
  b.set_cores(0, 40);
  Probe probe({{"TESSERA_SHARE_DIR", a.path() + ":" + b.path() + ":" + none.path()},
               {"TESSERA_LOG_LEVEL", "info"}},
              {"init", "sleepms:100", "ready", "hold"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  // The probe leads the meter of each share with a compute setting (its launches wait at both
  // gates) and of no other.
  ASSERT_NE(a.usage(), nullptr);
  ASSERT_NE(b.usage(), nullptr);
  ASSERT_NE(none.usage(), nullptr);
  // Each meter takes its share's lead on its own thread, soon after init: waited for (liveness: it
  // takes microseconds), not taken as done after the probe's pause.
  for (const int64_t deadline = tessera::vgpu::testing::monotonic_ms() + 30000;
       tessera::vgpu::testing::monotonic_ms() < deadline &&
       (a.usage()->compute.meter_owner.load() == 0 || b.usage()->compute.meter_owner.load() == 0);)
    usleep(1000);
  const uint64_t owner = a.usage()->compute.meter_owner.load();
  EXPECT_NE(owner, 0u);
  EXPECT_EQ(b.usage()->compute.meter_owner.load(), owner);
  EXPECT_EQ(none.usage()->compute.meter_owner.load(), 0u);
  probe.kill_now();
  probe.wait_exit();
  const std::string err = probe.stderr_text();
  EXPECT_NE(err.find("compute meter of share " + a.path() + " started"), std::string::npos) << err;
  EXPECT_NE(err.find("compute meter of share " + b.path() + " started"), std::string::npos) << err;
  EXPECT_EQ(err.find("compute meter of share " + none.path()), std::string::npos) << err;
}

// Inside a share the environment's limits are ignored, one line each naming the variable and its
// value, even those that would fail closed without a share: the limits page alone decides.
TEST_F(SharesTest, InsideAShareEnvironmentLimitsAreIgnoredWithOneLineEach) {
  ShareDir a({{sim_uuid(0), kGi + kContext}});
  ProbeRun run = run_probe({{"TESSERA_SHARE_DIR", a.path()},
                            {"TESSERA_MEMORY_LIMIT", ""},
                            {"CUDA_DEVICE_MEMORY_LIMIT_00", "1Gi"}},
                           {"init", "total"});
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(run.lines[0], "init CUDA_SUCCESS");
  EXPECT_EQ(run.lines[1], "total CUDA_SUCCESS " + std::to_string(kGi + kContext));
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 2) << run.err;
  EXPECT_NE(run.err.find("TESSERA_MEMORY_LIMIT='' is ignored"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("CUDA_DEVICE_MEMORY_LIMIT_00='1Gi' is ignored"), std::string::npos)
      << run.err;
}

void touch(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) close(fd);
}

// Inside a share the context costs what the agent measured (the limits page), never
// TESSERA_CONTEXT_OVERHEAD; when the figure changes, the live context is charged the difference at
// the next reservation; a rise that no longer fits makes new allocations fail.
TEST_F(SharesTest, TheContextChargeIsTheMeasuredCostAndFollowsIt) {
  ShareDir a({{sim_uuid(0), 2 * kGi}});
  a.set_context_overhead(0, 520 * kMi);
  const std::string go = a.path() + "/go";
  Probe probe(
      {{"TESSERA_SHARE_DIR", a.path()}, {"TESSERA_CONTEXT_OVERHEAD", "1Mi"}},
      {"init", "ready", "waitfile:" + go + "1", "alloc:mem:64Mi", "ready", "waitfile:" + go + "2",
       "alloc:mem:64Mi", "ready", "waitfile:" + go + "3", "alloc:mem:64Mi", "info", "ready",
       "waitfile:" + go + "4", "release", "ready", "hold"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(a.used(), 520 * kMi);
  EXPECT_EQ(a.contexts_word(), share::pack_contexts(0, 1, 520 * kMi)) << "told to the agent";

  a.set_context_overhead(0, 600 * kMi);  // a rise: charged at the next reservation
  touch(go + "1");
  EXPECT_EQ(probe.read_line(), "alloc mem CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(a.used(), 600 * kMi + 64 * kMi);
  EXPECT_EQ(a.contexts_word(), share::pack_contexts(0, 1, 600 * kMi));

  a.set_context_overhead(0, 0);  // not measured: the built-in default
  touch(go + "2");
  EXPECT_EQ(probe.read_line(), "alloc mem CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(a.used(), kContext + 128 * kMi);

  a.set_context_overhead(0, 2 * kGi);  // a rise beyond the limit: charged, and nothing more fits
  touch(go + "3");
  EXPECT_EQ(probe.read_line(), "alloc mem CUDA_ERROR_OUT_OF_MEMORY");
  const std::string info = probe.read_line().value_or("");
  EXPECT_EQ(field(info, 2), 0u) << "free: none (never negative) " << info;
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(a.used(), 2 * kGi + 128 * kMi);

  touch(go + "4");  // the context goes: its charge (at what it is now) and its memory come back
  EXPECT_EQ(probe.read_line(), "release CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.contexts_word(), 0u);
  probe.kill_now();
  probe.wait_exit();
  const std::string err = probe.stderr_text();
  EXPECT_NE(err.find("TESSERA_CONTEXT_OVERHEAD='1Mi' is ignored"), std::string::npos) << err;
  for (int i = 1; i <= 4; ++i) unlink((go + std::to_string(i)).c_str());
}

TEST_F(SharesTest, ABrokenShareBlocksTheProcessAndSaysWhich) {
  ShareDir a({{sim_uuid(0), kGi}});
  ProbeRun run = run_probe({{"TESSERA_SHARE_DIR", a.path() + ":/nonexistent/share"}}, {"init"});
  EXPECT_EQ(run.lines.at(0), "init CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_NE(run.err.find("/nonexistent/share/limits"), std::string::npos) << run.err;
}

}  // namespace
