// The driver's wall under the agent (docs/driver-partitions.md): the CDI hook's arguments and the
// OCI state it reads, the CDI spec carrying the hook only on GPUs with the capability, and, on the
// simulated R615 driver with a cgroup2 hierarchy this test mounts (root only, else skipped with
// the reason), the hook run as a runtime runs it (the OCI state on stdin) against a container
// cgroup the test creates: the partition set and recorded, a process in that cgroup without the
// shim refused at the hard limit while cuMemGetInfo shows it, a failure that names the GPU, the
// cgroup and the value and leaves nothing set, and drift repaired by the partition check.
//
// podman cannot stand in for the runtime here: this machine mounts cgroup v1, and podman (runc,
// --cgroup-manager cgroupfs) places a container's cgroup in the v1 hierarchies; a cgroup2 mount
// made beside them is not where runc creates the container's leaf, so the container would have no
// cgroup v2 leaf to wall (see docs/driver-partitions.md, "Tests").
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "enforcement/partition_check.h"
#include "share/cdi.h"
#include "share/partition_hook.h"
#include "tessera/cgroup/driver_partition.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMi = 1ull << 20;
constexpr uint64_t kGi = 1ull << 30;
constexpr char kDevices[] = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";

TEST(PartitionHookArguments, RoundTripAndRefusals) {
  const PartitionRecord wanted{"claim-gpu-0-s1", "", "", "GPU-abc", 1 * kGi, 2 * kGi};
  Result<HookRequest> parsed = parse_hook_arguments(hook_arguments(wanted, "/var/lib/x/uid"));
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed->partition, wanted);
  EXPECT_EQ(parsed->record_dir, "/var/lib/x/uid");

  auto refused = [](std::vector<std::string> args) {
    Result<HookRequest> request = parse_hook_arguments(args);
    return request.is_ok() ? std::string("accepted") : request.status().message();
  };
  EXPECT_NE(refused({"apply-memory-limits", "--share", "s", "--gpu", "G", "--soft", "3", "--hard",
                     "2", "--record", "/r"})
                .find("--soft 3 bytes (0 MiB) is above --hard"),
            std::string::npos);
  EXPECT_NE(refused({"apply-memory-limits", "--share", "s", "--gpu", "G", "--soft", "1x", "--hard",
                     "2", "--record", "/r"})
                .find("--soft \"1x\""),
            std::string::npos);
  EXPECT_NE(refused({"apply-memory-limits", "--share", "s", "--gpu", "G", "--soft", "1"})
                .find("--hard is missing"),
            std::string::npos);
  EXPECT_NE(refused({"apply-cuda-memory-limits"}).find("first argument"), std::string::npos);
}

TEST(PartitionHookState, NeedsAPid) {
  Result<OciState> state = parse_oci_state(
      R"({"ociVersion":"1.2.0","id":"abc","status":"creating","bundle":"/b","annotations":{}})");
  ASSERT_FALSE(state.is_ok());
  EXPECT_NE(state.status().message().find("createRuntime"), std::string::npos);
  state = parse_oci_state(R"({"ociVersion":"1.2.0","id":"abc","status":"created","pid":42,)"
                          R"("bundle":"/b","annotations":{"k":"v"}})");
  ASSERT_TRUE(state.is_ok()) << state.status().message();
  EXPECT_EQ(state->pid, 42);
  EXPECT_EQ(state->id, "abc");
  EXPECT_FALSE(parse_oci_state(R"({"id":"../x","pid":1})").is_ok());
}

ShareSpec memory_share(const std::string& uuid, uint64_t request, uint64_t limit) {
  ShareSpec share;
  share.claim_uid = "0d4b3c2a-uid";
  share.pool = "node";
  share.device = "gpu-0";
  share.share_id = "s1";
  share.uuid = uuid;
  share.memory_bytes = request;
  share.config.memory_limit = limit;
  return share;
}

nlohmann::json spec_with(const std::optional<PartitionHookConfig>& hook,
                         const std::vector<ShareSpec>& shares) {
  CdiPaths paths{"/var/lib/tessera/shares",
                 "/var/run/tessera/shares",
                 "/usr/local/tessera/lib/libvgpu.so",
                 "",
                 "",
                 ShimLoading::kLdSoPreload,
                 "/var/lib/tessera/ld.so.preload",
                 hook};
  ContainerDriver driver;
  driver.host_dev_dir = "/dev";
  return nlohmann::json::parse(build_cdi_spec(shares, paths, driver));
}

TEST(PartitionHookCdi, HookOnlyWhereTheCapabilityWasDetected) {
  const ShareSpec share = memory_share("GPU-a", 2 * kGi, 4 * kGi);
  // No capability: no hook anywhere.
  EXPECT_FALSE(spec_with(std::nullopt, {share})["devices"][0]["containerEdits"].contains("hooks"));
  // The capability on another GPU only: none either.
  const PartitionHookConfig hook{
      "/usr/local/tessera/lib/tessera-cdi-hook", "/var/lib/tessera/partitions", {"GPU-b"}};
  EXPECT_FALSE(spec_with(hook, {share})["devices"][0]["containerEdits"].contains("hooks"));
  // On the share's GPU: a createRuntime hook with the share's request and limit.
  PartitionHookConfig here = hook;
  here.gpus = {"GPU-a"};
  const nlohmann::json edits = spec_with(here, {share})["devices"][0]["containerEdits"];
  ASSERT_TRUE(edits.contains("hooks"));
  ASSERT_EQ(edits["hooks"].size(), 1u);
  const nlohmann::json& entry = edits["hooks"][0];
  EXPECT_EQ(entry["hookName"], "createRuntime");
  EXPECT_EQ(entry["path"], "/usr/local/tessera/lib/tessera-cdi-hook");
  std::vector<std::string> args = entry["args"];
  ASSERT_FALSE(args.empty());
  EXPECT_EQ(args[0], kCdiHookName);
  args.erase(args.begin());
  Result<HookRequest> request = parse_hook_arguments(args);
  ASSERT_TRUE(request.is_ok()) << request.status().message();
  EXPECT_EQ(request->partition.gpu, "GPU-a");
  EXPECT_EQ(request->partition.soft, share.limits().memory_request);
  EXPECT_EQ(request->partition.hard, share.limits().memory_limit);
  EXPECT_EQ(request->record_dir, "/var/lib/tessera/partitions/" + share.claim_uid);
  // A share without a memory limit has nothing to wall.
  ShareSpec whole = share;
  whole.memory_bytes.reset();
  whole.config.memory_limit.reset();
  EXPECT_FALSE(spec_with(here, {whole})["devices"][0]["containerEdits"].contains("hooks"));
}

// ---- on the simulated R615, as root, with a cgroup2 mount ---------------------------------------

std::string run_capture(const std::vector<std::string>& args, const std::vector<std::string>& env,
                        const std::string& input, int* status, const std::string& cgroup = "") {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) return "pipe";
  const pid_t pid = fork();
  if (pid == 0) {
    if (!cgroup.empty()) {
      std::ofstream procs(cgroup + "/cgroup.procs");
      procs << getpid() << std::flush;
      if (!procs) _exit(90);
    }
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(in[1]);
    close(out[0]);
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  (void)!write(in[1], input.data(), input.size());
  close(in[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(out[0], buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  waitpid(pid, status, 0);
  return text;
}

class DriverWallUnderAgent : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mounting cgroup2 needs root; running as uid " << geteuid();
    base_ = fs::temp_directory_path() / ("agent-wall-" + std::to_string(getpid()));
    fs::create_directories(base_ / "cgroup2");
    if (mount("none", (base_ / "cgroup2").c_str(), "cgroup2", 0, nullptr) != 0) {
      const int error = errno;
      fs::remove_all(base_);
      GTEST_SKIP() << "cannot mount cgroup2 (mount -t cgroup2 needs CAP_SYS_ADMIN in the initial "
                      "namespaces): "
                   << std::strerror(error);
    }
    mounted_ = true;
    container_ = (base_ / "cgroup2" / ("ctr-" + std::to_string(getpid()))).string();
    ASSERT_EQ(mkdir(container_.c_str(), 0755), 0) << std::strerror(errno);
    state_ = (base_ / "sim.state").string();
    setenv("SIMGPU_STATE", state_.c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
    setenv("SIMGPU_DRIVER_VERSION", "615.40.01", 1);
    // The container's init process: in the container's cgroup, waiting for the test to end.
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(release_), 0);
    init_ = fork();
    if (init_ == 0) {
      std::ofstream procs(container_ + "/cgroup.procs");
      procs << getpid() << std::flush;
      (void)!write(ready[1], procs ? "y" : "n", 1);
      char byte;
      (void)!read(release_[0], &byte, 1);
      _exit(0);
    }
    char byte = 0;
    ASSERT_EQ(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    close(ready[1]);
    ASSERT_EQ(byte, 'y') << "the init process could not join " << container_;
  }

  void TearDown() override {
    if (init_ > 0) {
      (void)!write(release_[1], "x", 1);
      waitpid(init_, nullptr, 0);
    }
    if (!container_.empty()) rmdir(container_.c_str());
    if (mounted_) umount2((base_ / "cgroup2").c_str(), MNT_DETACH);
    if (!base_.empty()) fs::remove_all(base_);
    unsetenv("SIMGPU_DRIVER_VERSION");
  }

  std::vector<std::string> sim_env() const {
    return {"SIMGPU_STATE=" + state_, std::string("SIMGPU_DEVICES=") + kDevices,
            "SIMGPU_DRIVER_VERSION=615.40.01", std::string("LD_LIBRARY_PATH=") + SIMGPU_LIB_DIR,
            std::string("TESSERA_HOOK_NVML_LIBRARY=") + SIMGPU_LIB_DIR + "/libnvidia-ml.so.1"};
  }
  std::string gpu_uuid() {
    Result<nvml::Session> session =
        nvml::Session::open(std::string(SIMGPU_LIB_DIR) + "/libnvidia-ml.so.1");
    if (!session.is_ok()) return "";
    Result<nvmlDevice_t> device = session->device_by_index(0);
    if (!device.is_ok()) return "";
    Result<std::string> uuid = session->uuid(*device);
    return uuid.is_ok() ? *uuid : "";
  }
  // The OCI state runc writes on a createRuntime hook's stdin.
  std::string oci_state() const {
    return nlohmann::json{{"ociVersion", "1.2.0"},
                          {"id", "ctr" + std::to_string(getpid())},
                          {"status", "created"},
                          {"pid", init_pid_override_ ? init_pid_override_ : init_},
                          {"bundle", "/run/containerd/bundle"},
                          {"annotations", nlohmann::json::object()}}
        .dump();
  }
  int hook(const PartitionRecord& wanted, std::string* output) {
    std::vector<std::string> args = {CDI_HOOK};
    for (std::string& arg : hook_arguments(wanted, (base_ / "records").string()))
      args.push_back(arg);
    int status = 0;
    *output = run_capture(args, sim_env(), oci_state(), &status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  fs::path base_;
  bool mounted_ = false;
  std::string container_, state_;
  pid_t init_ = -1;
  pid_t init_pid_override_ = 0;
  std::string container_path_;  // as the hook resolved it
  int release_[2] = {-1, -1};
};

TEST_F(DriverWallUnderAgent, HookSetsThePartitionAndTheDriverRefusesAnUnshimmedProcess) {
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  std::string output;
  ASSERT_EQ(hook({"share-a", "", "", uuid, 1 * kGi, 2 * kGi}, &output), 0) << output;
  // Recorded for the agent's check and unprepare.
  const std::vector<PartitionRecord> records = read_partition_records((base_ / "records").string());
  ASSERT_EQ(records.size(), 1u);
  // The hook resolves the pid's cgroup under the first cgroup2 mount of its mountinfo (this
  // machine may mount the hierarchy at /sys/fs/cgroup/unified too): the same cgroup.
  EXPECT_TRUE(fs::equivalent(records[0].cgroup, container_)) << records[0].cgroup;
  container_path_ = records[0].cgroup;
  EXPECT_EQ(records[0].gpu, uuid);
  EXPECT_EQ(records[0].hard, 2 * kGi);
  // Read back as the agent reads it.
  Result<nvml::Session> session =
      nvml::Session::open(std::string(SIMGPU_LIB_DIR) + "/libnvidia-ml.so.1");
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  Result<nvml::MemoryLimits> limits = cgroup::read_partition(*session, container_path_, uuid);
  ASSERT_TRUE(limits.is_ok()) << limits.status().message();
  EXPECT_EQ(limits->soft_limit, 1 * kGi);
  EXPECT_EQ(limits->hard_limit, 2 * kGi);

#ifdef MEMORY_FILL
  // A process of the container without the shim (nothing preloaded, as `env -i` would leave it):
  // the driver refuses it at 2 GiB, context included, and cuMemGetInfo shows the 2 GiB.
  int status = 0;
  std::vector<std::string> env = sim_env();
  env.push_back("PATH=/usr/bin:/bin");
  const std::string report =
      run_capture({MEMORY_FILL, "--chunk", "64Mi"}, env, "", &status, container_);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << report;
  const nlohmann::json filled =
      nlohmann::json::parse(report.substr(report.find('{')), nullptr, false);
  ASSERT_TRUE(filled.is_object()) << report;
  EXPECT_EQ(filled["mem_get_info_total"].get<uint64_t>(), 2 * kGi) << report;
  EXPECT_LE(filled["bytes_obtained"].get<uint64_t>(), 2 * kGi) << report;
  EXPECT_GT(filled["bytes_obtained"].get<uint64_t>(), 1 * kGi) << report;
  EXPECT_LT(filled["mem_get_info_free"].get<uint64_t>(), 64 * kMi) << report;
#else
  GTEST_SKIP() << "the partition is set; memory-fill is not built here (TESSERA_BUILD_SAMPLES "
                  "off), so the refusal of an unshimmed process is not shown";
#endif
}

TEST_F(DriverWallUnderAgent, HookFailsClosedNamingTheGpuTheCgroupAndTheValue) {
  std::string output;
  EXPECT_EQ(hook({"share-a", "", "", "GPU-00000000-dead-beef-0000-000000000000", 1 * kGi, 2 * kGi},
                 &output),
            1);
  EXPECT_NE(output.find("GPU-00000000-dead-beef-0000-000000000000"), std::string::npos) << output;
  EXPECT_NE(output.find("cgroup /"), std::string::npos) << output;
  EXPECT_NE(output.find(fs::path(container_).filename().string()), std::string::npos) << output;
  EXPECT_NE(output.find("hard 2147483648 bytes"), std::string::npos) << output;
  EXPECT_TRUE(read_partition_records((base_ / "records").string()).empty());
  // A hard limit past the GPU: refused by the driver, and the cgroup holds no partition after.
  const std::string uuid = gpu_uuid();
  // A pid that is gone (the container died before its hook): refused, naming the GPU.
  init_pid_override_ = 999999999;
  EXPECT_EQ(hook({"share-a", "", "", uuid, 1 * kGi, 2 * kGi}, &output), 1);
  EXPECT_NE(output.find(uuid), std::string::npos) << output;
  EXPECT_NE(output.find("the container's cgroup"), std::string::npos) << output;
  EXPECT_TRUE(read_partition_records((base_ / "records").string()).empty());
}

class RecordingHandler : public FindingHandler {
 public:
  void handle(const Finding& finding) override { findings.push_back(finding); }
  std::vector<Finding> findings;
};

TEST_F(DriverWallUnderAgent, CheckPassRepairsDrift) {
  const std::string uuid = gpu_uuid();
  ASSERT_FALSE(uuid.empty());
  ShareSpec share = memory_share(uuid, 1 * kGi, 2 * kGi);
  std::string output;
  ASSERT_EQ(hook({share.name(), "", "", uuid, 1 * kGi, 2 * kGi}, &output), 0) << output;
  const std::vector<PartitionRecord> records = read_partition_records((base_ / "records").string());
  ASSERT_EQ(records.size(), 1u);
  const std::string cgroup_dir = records[0].cgroup;
  // The records of the claim: the check reads <record dir>/<claim UID>.
  fs::create_directories(base_ / "partitions");
  fs::rename(base_ / "records", base_ / "partitions" / share.claim_uid);
  Checkpoint checkpoint;
  ClaimEntry entry;
  entry.state = ClaimState::kPrepareCompleted;
  entry.namespace_name = "team";
  entry.name = "claim";
  entry.shares = {share};
  checkpoint[share.claim_uid] = entry;
  Result<nvml::Session> session =
      nvml::Session::open(std::string(SIMGPU_LIB_DIR) + "/libnvidia-ml.so.1");
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  RecordingHandler handler;
  PartitionCheckOptions options;
  options.record_dir = (base_ / "partitions").string();
  options.shares_dir = (base_ / "shares").string();
  options.gpus = {uuid};
  PartitionCheck check(
      options, [&] { return checkpoint; }, *session, handler);

  EXPECT_TRUE(check.check_once().empty());
  EXPECT_EQ(check.views().at({share.name(), uuid}).cgroups, 1u);
  EXPECT_STREQ(memory_layer_name(check.views().at({share.name(), uuid}).driver), "both");

  // Someone raised the wall: a finding, and the share's limits are set again.
  ASSERT_TRUE(
      session->set_memory_limits(*session->device_by_uuid(uuid), cgroup_dir, 0, 8 * kGi).is_ok());
  {
    Result<nvml::MemoryLimits> raised = cgroup::read_partition(*session, cgroup_dir, uuid);
    ASSERT_TRUE(raised.is_ok()) << raised.status().message();
    ASSERT_EQ(raised->hard_limit, 8 * kGi);
  }
  std::vector<Finding> found = check.check_once();
  ASSERT_EQ(found.size(), 1u) << "repairs " << check.stats().repairs << ", findings "
                              << check.stats().findings << ", handled " << handler.findings.size()
                              << ", cgroups " << check.views().at({share.name(), uuid}).cgroups;
  EXPECT_EQ(found[0].kind, FindingKind::kPartitionDrift);
  EXPECT_NE(found[0].detail.find("hard 8192 MiB"), std::string::npos) << found[0].detail;
  EXPECT_NE(found[0].detail.find("set again"), std::string::npos) << found[0].detail;
  Result<nvml::MemoryLimits> limits = cgroup::read_partition(*session, cgroup_dir, uuid);
  ASSERT_TRUE(limits.is_ok());
  EXPECT_EQ(limits->soft_limit, 1 * kGi);
  EXPECT_EQ(limits->hard_limit, 2 * kGi);
  EXPECT_EQ(check.stats().repairs, 1u);

  // A pass with the partition sound ends the episode.
  EXPECT_TRUE(check.check_once().empty());
  // Cleared altogether: found and repaired again (a new episode).
  ASSERT_TRUE(session->clear_memory_limits(*session->device_by_uuid(uuid), cgroup_dir).is_ok());
  found = check.check_once();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].detail.find("no partition"), std::string::npos) << found[0].detail;
  EXPECT_TRUE(cgroup::read_partition(*session, cgroup_dir, uuid).is_ok());
  EXPECT_TRUE(check.check_once().empty());
}

}  // namespace
}  // namespace tessera::agent
