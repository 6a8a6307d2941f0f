// Hostile tenants on the simulated GPU with the agent's out-of-band checker running (1 s passes,
// NVML through the simulator, the finding policy of enforcement_handler.h): a share prepared by the
// share manager, a tenant process started in it (the shim preloaded as the CDI spec does, or not)
// and, where the host lets the test make cgroups (root), moved into its pod's cgroup
// (<cgroup root>/tessera-e2e-<pid>/kubepods/besteffort/pod<uid>/ctr; TESSERA_TEST_CGROUP_ROOT
// picks the root, default the v1 pids hierarchy). Each test prints how long detection took and
// requires it by the second check pass after the attack at the latest (counted in passes, not
// seconds: a loaded machine makes passes late, not fewer).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

#include "api/event_log.h"
#include "apiserver/claim_fixture.h"
#include "captured_log.h"
#include "clock/clock.h"
#include "devices/resource_slices.h"
#include "enforcement/checker.h"
#include "enforcement/enforcement_handler.h"
#include "enforcement/fake_node.h"
#include "enforcement/tenant_process.h"
#include "metrics/collector.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "tenant_claims.h"
#include "tessera/gpu_info.h"
#include "tessera/share_folder/snapshot.h"
#include "usage/context_overhead.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Steady = std::chrono::steady_clock;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;
constexpr char kDevices[] = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";
constexpr char kPodUid[] = "5e1f0c2a-7b3d-4e5f-8a9b-0c1d2e3f4a5b";
constexpr char kClaimUid[] = "hostile-claim-uid";

// Findings with the time they came and the check pass that found them, forwarded to the agent's
// policy.
class TimedHandler final : public FindingHandler {
 public:
  struct Seen {
    Finding finding;
    Steady::time_point at;
    uint64_t pass;  // CheckerStats::passes when it was handed on: the pass that found it
  };
  explicit TimedHandler(FindingHandler& policy) : policy_(policy) {}
  // The checker whose findings these are (its passes are read at each finding).
  void watch(const OutOfBandChecker& checker) { checker_ = &checker; }
  void handle(const Finding& finding) override {
    // Called outside the checker's lock, after the pass that found it began (and counted itself).
    const uint64_t pass = checker_ ? checker_->stats().passes : 0;
    {
      std::lock_guard lock(mutex_);
      seen_.push_back({finding, Steady::now(), pass});
    }
    policy_.handle(finding);
  }
  // How many findings came so far (the `from` of a later wait_for).
  size_t count() {
    std::lock_guard lock(mutex_);
    return seen_.size();
  }
  // The first finding of `kind` about `pid` (0: any) from the `from`th on, waiting up to `timeout`.
  std::optional<Seen> wait_for(FindingKind kind, int pid, std::chrono::seconds timeout,
                               size_t from = 0) {
    for (const auto deadline = Steady::now() + timeout;;) {
      {
        std::lock_guard lock(mutex_);
        for (size_t i = from; i < seen_.size(); ++i)
          if (seen_[i].finding.kind == kind && (pid == 0 || seen_[i].finding.host_pid == pid))
            return seen_[i];
      }
      if (Steady::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  FindingHandler& policy_;
  const OutOfBandChecker* checker_ = nullptr;
  std::mutex mutex_;
  std::vector<Seen> seen_;
};

// A finding is due in the first pass that reads the attack's effect: the pass under way at the
// attack may have read NVML and the page before it, the next one cannot have. One more pass of
// slack, as the former 2 s bound gave at 1 s passes.
constexpr uint64_t kPassesToDetect = 2;
// How long a test waits for a finding or a death: liveness only (passes come every second).
constexpr std::chrono::seconds kLiveness{30};

// A pod's cgroup for the test (removed again), or why there is none.
class PodCgroup {
 public:
  PodCgroup() {
    const char* root = std::getenv("TESSERA_TEST_CGROUP_ROOT");
    const fs::path base = root ? root : "/sys/fs/cgroup/pids";
    if (geteuid() != 0) {
      why_not_ = "not root: cannot create cgroups";
      return;
    }
    top_ = base / ("tessera-e2e-" + std::to_string(getpid()));
    leaf_ = top_ / "kubepods" / "besteffort" / (std::string("pod") + kPodUid) / "ctr";
    std::error_code ec;
    fs::create_directories(leaf_, ec);
    if (ec || !fs::exists(leaf_ / "cgroup.procs")) {
      why_not_ = "cannot create a cgroup under " + base.string() + ": " + ec.message();
      leaf_.clear();
    }
  }
  ~PodCgroup() {
    if (top_.empty()) return;
    // Deepest first; the tenants are gone (killed and reaped) by now.
    for (fs::path dir = leaf_; !dir.empty() && dir != top_.parent_path(); dir = dir.parent_path())
      rmdir(dir.c_str());
  }
  bool usable() const { return !leaf_.empty(); }
  const std::string& why_not() const { return why_not_; }
  bool move(pid_t pid) const {
    std::ofstream procs(leaf_ / "cgroup.procs");
    procs << pid << std::flush;
    return static_cast<bool>(procs);
  }

 private:
  fs::path top_, leaf_;
  std::string why_not_;
};

// A tenant process (tenant_process.h).
using Tenant = ::tessera::agent::testing::TenantProcess;

// One simulated GPU for the whole test program: the simulated NVML reads its state file's name
// once per process, so tests run one after another in one process share it (each with its own
// share; a tenant's memory is free again once it is killed).
const std::string& simulator_state() {
  // Never destroyed: the exit handler that removes the file runs after static destructors would.
  static const std::string& path = *[] {
    auto* name = new std::string(
        (fs::temp_directory_path() / ("hostile-simgpu-" + std::to_string(getpid()) + ".state"))
            .string());
    fs::remove(*name);
    std::atexit([] { fs::remove(simulator_state()); });
    return name;
  }();
  return path;
}

class HostileTenant : public ::testing::Test {
 protected:
  // `policy`: the share's VgpuConfig enforcement; `loop`: the checker's own loop on the real
  // clock, as the agent runs it; without, the test calls check_once() and the checker times its
  // graces on sim_clock_; `fallback`: --enforcement-default.
  void prepare(const std::string& policy, bool loop = true,
               vgpu_config::EnforcementPolicy fallback = vgpu_config::EnforcementPolicy::kReport) {
    base_ = testing::fresh_folder(
        "hostile-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    state_ = simulator_state();
    setenv("SIMGPU_STATE", state_.c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
    Result<std::vector<GpuInfo>> gpus = list_gpus();
    ASSERT_EQ(gpus.status().message(), "");
    ASSERT_EQ(gpus->size(), 1u);
    uuid_ = (*gpus)[0].uuid;
    devices_ = node_devices(*gpus);
    const std::string device = "gpu-" + std::to_string((*gpus)[0].minor);
    json config = {{"apiVersion", "vgpu.tessera.dev/v1alpha1"},
                   {"kind", "VgpuConfig"},
                   {"enforcement", policy}};
    json claim = testing::make_claim("hostile", kClaimUid, {{"gpu", device, "s", "4Gi", ""}},
                                     json::array({testing::opaque_config("FromClaim", config)}));
    claim["status"]["reservedFor"][0]["uid"] = kPodUid;
    kube_.bodies["hostile"] = claim.dump();
    ShareManagerOptions options;
    options.root = (base_ / "state").string();
    options.cdi_dir = (base_ / "cdi").string();
    options.node_name = "node-a";
    options.shim_path = LIBVGPU_SO;
    options.container_driver = testing::fake_container_driver(base_ / "driver");
    manager_ = std::make_unique<ShareManager>(options, kube_, node_devices(*gpus));
    ASSERT_EQ(manager_->start().message(), "");
    ASSERT_EQ(manager_->prepare({"tenants", kClaimUid, "hostile"}).status().message(), "");
    share_dir_ = (base_ / "state" / "shares").string() + "/" +
                 manager_->checkpoint().begin()->second.shares[0].name();
    ASSERT_TRUE(fs::exists(share_dir_ + "/usage"));

    // The agent's checks, as NodeAgent wires them.
    EnforcementHandlerOptions handling;
    handling.default_policy = fallback;
    handling.share_policy =
        [this](const std::string& name) -> std::optional<vgpu_config::EnforcementPolicy> {
      for (const auto& [uid, entry] : manager_->checkpoint())
        for (const ShareSpec& share : entry.shares)
          if (share.name() == name) return share.config.enforcement;
      return std::nullopt;
    };
    handling.belongs = [this](int pid, uint64_t start, const std::string& share) {
      return checker_ && checker_->belongs(pid, start, share);
    };
    handling.then = &event_findings_;  // the local API's event stream, as NodeAgent chains it
    policy_ = std::make_unique<EnforcementHandler>(handling);
    timed_ = std::make_unique<TimedHandler>(*policy_);
    Result<std::unique_ptr<GpuProcessSource>> nvml = nvml_process_source();
    ASSERT_EQ(nvml.status().message(), "");
    nvml_ = std::move(nvml).value();
    const std::string shares_dir = (base_ / "state" / "shares").string();
    CheckerOptions checking;
    checking.node_gpus = [this] { return std::vector<std::string>{uuid_}; };
    checking.mps_daemons = [this] {
      std::lock_guard lock(mps_mutex_);
      return mps_daemons_;
    };
    checker_ = std::make_unique<OutOfBandChecker>(
        checking, [this, shares_dir] { return checked_shares(manager_->checkpoint(), shares_dir); },
        *nvml_, *timed_, loop ? real_clock() : static_cast<Clock&>(sim_clock_));
    timed_->watch(*checker_);
    if (loop) {
      ASSERT_EQ(checker_->start().message(), "");
    }
  }
  void TearDown() override {
    checker_.reset();
    if (!base_.empty()) fs::remove_all(base_);
  }

  // hostile-tenant's argv and environment (the shim preloaded or not), built before any fork: the
  // checker's thread runs meanwhile, and a lock it held at the fork (the sanitizer's allocator,
  // glibc's) stays held in the child, so a child only calls async-signal-safe functions (read,
  // write, fork, dup2, execve) and never allocates.
  struct TenantExec {
    std::vector<std::string> environment, args;
    std::vector<char*> envp, argv;
  };
  void prepare_exec(TenantExec& exec, const std::vector<std::string>& args, bool shim) const {
    std::vector<std::string> overrides{"TESSERA_SHARE_DIR=" + share_dir_,
                                       std::string("LD_LIBRARY_PATH=") + SIMGPU_LIB_DIR,
                                       "ASAN_OPTIONS=verify_asan_link_order=0"};
    if (shim) overrides.push_back(std::string("LD_PRELOAD=") + LIBVGPU_SO);
    for (char** entry = environ; *entry; ++entry) {
      const std::string_view text(*entry);
      const bool replaced = std::any_of(overrides.begin(), overrides.end(), [&](const auto& o) {
        return text.substr(0, text.find('=') + 1) == std::string_view(o).substr(0, o.find('=') + 1);
      });
      if (!replaced) exec.environment.emplace_back(text);
    }
    exec.environment.insert(exec.environment.end(), overrides.begin(), overrides.end());
    for (std::string& entry : exec.environment) exec.envp.push_back(entry.data());
    exec.envp.push_back(nullptr);
    exec.args = args;
    exec.argv.push_back(const_cast<char*>(HOSTILE_TENANT));
    for (std::string& arg : exec.args) exec.argv.push_back(arg.data());
    exec.argv.push_back(nullptr);
  }
  // In a forked child: waits for the go byte, then becomes hostile-tenant writing to `out`.
  [[noreturn]] static void exec_tenant(TenantExec& exec, int go, int out) {
    char byte;
    if (read(go, &byte, 1) != 1) _exit(90);
    dup2(out, 1);  // the copy on 1 is not close-on-exec
    execve(HOSTILE_TENANT, exec.argv.data(), exec.envp.data());
    _exit(91);
  }

  // Starts hostile-tenant with `args` in the share, with the shim or without, in the pod's
  // cgroup when there is one (unless `in_pod` is false: a host process). The pipes are
  // close-on-exec: no other child holds them open.
  void start(Tenant& tenant, const std::vector<std::string>& args, bool shim, bool in_pod = true) {
    TenantExec exec;
    prepare_exec(exec, args, shim);
    int out[2], go[2];
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
    tenant.pid = fork();
    if (tenant.pid == 0) exec_tenant(exec, go[0], out[1]);
    ASSERT_GT(tenant.pid, 0);
    close(out[1]);
    close(go[0]);
    tenant.out = out[0];
    if (cgroup_.usable() && in_pod) {
      ASSERT_TRUE(cgroup_.move(tenant.pid));
    }
    ASSERT_EQ(write(go[1], "g", 1), 1);
    close(go[1]);
  }

  // An MPS share's daemon and server as the driver makes them: `daemon` stands for
  // nvidia-cuda-mps-control -d (a host process in no pod: a shell that waits), `server` for the
  // nvidia-cuda-mps-server it spawns, its child, holding `bytes` on the GPU without the shim. The
  // daemon is named to the checks (mps_daemons) before the server starts. The daemon execs at
  // once (a second fork in a child of this multithreaded process could meet a lock held at the
  // first); the shell reports the server's pid on fd 3.
  void start_mps_server(Tenant& daemon, Tenant& server, uint64_t bytes) {
    TenantExec exec;
    prepare_exec(exec, {"--attack", "none", "--bytes", std::to_string(bytes)}, /*shim=*/false);
    std::vector<char*> shell{
        const_cast<char*>("sh"), const_cast<char*>("-c"),
        const_cast<char*>("\"$0\" \"$@\" 3>&- & echo $! >&3; exec 3>&-; wait")};
    shell.insert(shell.end(), exec.argv.begin(), exec.argv.end());  // HOSTILE_TENANT, args, null
    int out[2], go[2], told[2];
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(told, O_CLOEXEC), 0);
    daemon.pid = fork();
    if (daemon.pid == 0) {
      char byte;
      if (read(go[0], &byte, 1) != 1) _exit(90);
      dup2(out[1], 1);
      dup2(told[1], 3);
      execve("/bin/sh", shell.data(), exec.envp.data());
      _exit(91);
    }
    ASSERT_GT(daemon.pid, 0);
    close(out[1]);
    close(go[0]);
    close(told[1]);
    server.out = out[0];
    Tenant channel;  // only its reader: the server's pid as the shell wrote it
    channel.out = told[0];
    {
      std::lock_guard lock(mps_mutex_);
      mps_daemons_ = {{manager_->checkpoint().begin()->second.shares[0].name(), uuid_,
                       static_cast<int>(daemon.pid)}};
    }
    ASSERT_EQ(write(go[1], "g", 1), 1);
    close(go[1]);
    const std::string pid = channel.line(std::chrono::seconds(60));
    server.pid = std::atoi(pid.c_str());
    ASSERT_GT(server.pid, 0) << "the shell said: " << pid;
  }

  // Waits for the tenant's "held" line, then for a finding of `kind` about it; the detection
  // time (from the line) is printed, and the finding must come by the kPassesToDetect-th pass
  // after the one under way when the line was read.
  void expect_detected(Tenant& tenant, FindingKind kind, const char* what) {
    const std::string held = tenant.line(std::chrono::seconds(60));
    ASSERT_EQ(held.rfind("held ", 0), 0u) << "tenant said: " << held;
    const auto attacked = Steady::now();
    const uint64_t pass_at_attack = checker_->stats().passes;
    const auto found = timed_->wait_for(kind, tenant.pid, kLiveness);
    ASSERT_TRUE(found) << what << ": no " << finding_kind_name(kind) << " finding";
    const double seconds = std::chrono::duration<double>(found->at - attacked).count();
    std::printf("%s (%s): %s, detected after %.3f s, in pass %llu (pass %llu at the attack)\n",
                what, held.c_str(), std::string(finding_kind_name(kind)).c_str(), seconds,
                static_cast<unsigned long long>(found->pass),
                static_cast<unsigned long long>(pass_at_attack));
    EXPECT_LE(found->pass, pass_at_attack + kPassesToDetect);
  }

  SimulatedClock sim_clock_;  // first: outlives the checker
  fs::path base_;
  std::string state_, uuid_, share_dir_;
  std::vector<NodeDevice> devices_;
  SimulatedClock events_clock_;
  EventLog events_{events_clock_};
  EventFindingHandler event_findings_{events_};
  testing::TenantClaims kube_;
  std::unique_ptr<ShareManager> manager_;
  PodCgroup cgroup_;
  std::unique_ptr<EnforcementHandler> policy_;
  std::unique_ptr<TimedHandler> timed_;
  std::unique_ptr<GpuProcessSource> nvml_;
  std::mutex mps_mutex_;
  std::vector<MpsDaemon> mps_daemons_;  // what the checks' mps_daemons answers
  std::unique_ptr<OutOfBandChecker> checker_;
};

TEST_F(HostileTenant, ASlotZeroingTenantIsReportedWithinTwoPassesAndKilledUnderKill) {
  ASSERT_NO_FATAL_FAILURE(prepare("kill"));
  Tenant tenant;
  ASSERT_NO_FATAL_FAILURE(
      start(tenant, {"--attack", "zero-slot", "--bytes", std::to_string(7 * kGiB)}, true));
  expect_detected(tenant, FindingKind::kOverMemoryLimit, "slot-zeroing tenant in a 4 GiB share");
  EXPECT_TRUE(tenant.killed_within(kLiveness));
  EXPECT_EQ(policy_->kills(), 1u);
  EXPECT_GE(policy_->counters().count(FindingKind::kUsageDisagrees), 1u);
}

TEST_F(HostileTenant, UnderReportTheZeroedSlotIsRepairedAndTheTenantLives) {
  ASSERT_NO_FATAL_FAILURE(prepare("report"));
  Tenant tenant;
  ASSERT_NO_FATAL_FAILURE(
      start(tenant, {"--attack", "zero-slot", "--bytes", std::to_string(7 * kGiB)}, true));
  expect_detected(tenant, FindingKind::kUsageDisagrees, "slot-zeroing tenant, report");
  EXPECT_FALSE(tenant.killed_within(std::chrono::seconds(1)));
  EXPECT_EQ(policy_->kills(), 0u);
  // The slot says again what the process holds (NVML's figure): the shim refuses more.
  const share_folder::UsagePageCopy page = share_folder::read_usage_page(share_dir_ + "/usage");
  uint64_t sum = 0;
  for (const share_folder::SlotCopy& slot : page.slots) sum += slot.bytes[0];
  EXPECT_GT(sum, 4 * kGiB);
}

TEST_F(HostileTenant, AHighWaterResettingTenantIsKilledUnderKill) {
  ASSERT_NO_FATAL_FAILURE(prepare("kill"));
  Tenant tenant;
  ASSERT_NO_FATAL_FAILURE(
      start(tenant, {"--attack", "reset-high-water", "--bytes", std::to_string(12 * kGiB)}, true));
  expect_detected(tenant, FindingKind::kOverMemoryLimit, "high-water-resetting tenant");
  EXPECT_TRUE(tenant.killed_within(kLiveness));
  // The same pass found the page corrupt; its finding is handed on after the kill's, so the test
  // may see the death first: waited for, not counted at once.
  EXPECT_TRUE(timed_->wait_for(FindingKind::kCorruptUsagePage, 0, kLiveness));
}

TEST_F(HostileTenant, AnUnshimmedProcessInTheSharesPodIsReportedAndKilled) {
  if (!cgroup_.usable()) GTEST_SKIP() << cgroup_.why_not();
  testing::CapturedLog log;
  ASSERT_NO_FATAL_FAILURE(prepare("kill"));
  Tenant tenant;
  ASSERT_NO_FATAL_FAILURE(
      start(tenant, {"--attack", "none", "--bytes", std::to_string(6 * kGiB)}, false));
  expect_detected(tenant, FindingKind::kUnshimmedProcess, "unshimmed process in the pod");
  EXPECT_TRUE(tenant.killed_within(kLiveness));
  // Handed on after the kill in the same pass: waited for, not counted at once.
  EXPECT_TRUE(timed_->wait_for(FindingKind::kOverMemoryLimit, 0, kLiveness));
  // The same pass named it as over_memory_limit's offender: its line says the kill was the
  // other finding's, once (the policy counts a finding before it logs it: wait for the line).
  for (int i = 0; i < 500 && log.count("kind=over_memory_limit") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(log.count("killed (SIGKILL)"), 1u);
  EXPECT_EQ(log.count("not signalled again: killed under unshimmed_process"), 1u);
  EXPECT_EQ(log.count("not proven"), 0u);
}

TEST_F(HostileTenant, ASecondDriverCopyIsReportedAndKilled) {
  ASSERT_NO_FATAL_FAILURE(prepare("kill"));
  const fs::path copy = base_ / "copy" / "libcuda-copy.so.1";
  fs::create_directories(copy.parent_path());
  fs::copy_file(fs::path(SIMGPU_LIB_DIR) / "libcuda.so.1", copy);
  Tenant tenant;
  ASSERT_NO_FATAL_FAILURE(start(
      tenant,
      {"--attack", "second-driver", "--bytes", std::to_string(8 * kGiB), "--copy", copy.string()},
      true));
  expect_detected(tenant, FindingKind::kOverMemoryLimit, "second libcuda copy");
  EXPECT_TRUE(tenant.killed_within(kLiveness));
}

// A process on the GPU outside every share (here a host process: no pod's cgroup, no shim, no
// slot) holding 2 GiB: reported as unaccounted_process with its pid and bytes, on the event
// stream, in tessera_gpu_unaccounted_memory_bytes, and never killed although the share's policy
// and the agent's default are kill.
TEST_F(HostileTenant, AProcessOfNoShareIsReportedAndCountedButNeverKilledEvenUnderKill) {
  ASSERT_NO_FATAL_FAILURE(prepare("kill", true, vgpu_config::EnforcementPolicy::kKill));
  const EventLog::Cursor cursor = events_.cursor(/*include_recent=*/true);
  Tenant tenant;
  ASSERT_NO_FATAL_FAILURE(start(tenant, {"--attack", "none", "--bytes", std::to_string(2 * kGiB)},
                                /*shim=*/false, /*in_pod=*/false));
  expect_detected(tenant, FindingKind::kUnaccountedProcess, "a host process outside every share");
  const auto found = timed_->wait_for(FindingKind::kUnaccountedProcess, tenant.pid, kLiveness);
  ASSERT_TRUE(found);
  const Finding& finding = found->finding;
  EXPECT_EQ(finding.gpu_uuid, uuid_);
  EXPECT_EQ(finding.share, "");
  EXPECT_EQ(finding.pod_uid, "");  // a host process: no pod in its cgroup
  // NVML's figure: the 2 GiB and the context the simulator charges (500 MiB here).
  EXPECT_GE(finding.bytes, 2 * kGiB);
  EXPECT_LT(finding.bytes, 3 * kGiB);
  // Not killed, whatever the policy: passes after the finding leave it running, nothing is
  // killed, and it stays out of the share's own checks.
  const uint64_t after = checker_->loop_passes() + 2;
  ASSERT_TRUE(checker_->wait_for_loop_passes(after, kLiveness));
  int status = 0;
  EXPECT_EQ(waitpid(tenant.pid, &status, WNOHANG), 0) << "the process outside every share died";
  EXPECT_EQ(policy_->kills(), 0u);
  EXPECT_EQ(policy_->counters().count(FindingKind::kUnaccountedProcess), 1u);  // once an episode
  EXPECT_EQ(policy_->counters().count(FindingKind::kUnshimmedProcess), 0u);
  EXPECT_EQ(policy_->counters().count(FindingKind::kOverMemoryLimit), 0u);

  // The metric: the GPU's unaccounted memory is that process's.
  const std::map<std::string, uint64_t> unaccounted = checker_->unaccounted_memory();
  ASSERT_EQ(unaccounted.count(uuid_), 1u);
  EXPECT_EQ(unaccounted.at(uuid_), finding.bytes);
  // The scrape of that observation, beside the checks' judgment.
  ObserverOptions observing;
  observing.devices = [this] { return devices_; };
  Observer observer(observing, nullptr);
  MetricsSources sources;
  sources.node_name = "node-a";
  sources.observed = [&] { return ObservedNode{observer.observe(), checker_->last_judgment()}; };
  const std::string text = collect_metrics(sources);
  const std::string series = "tessera_gpu_unaccounted_memory_bytes{uuid=\"" + uuid_ +
                             "\",device=\"" + devices_[0].name + "\",node=\"node-a\"} " +
                             std::to_string(finding.bytes) + "\n";
  EXPECT_NE(text.find(series), std::string::npos) << series << " not in:\n" << text;

  // The event on the local API: a FINDING naming the pid, the GPU and the bytes.
  EventLog::Cursor reading = cursor;
  std::optional<tessera::node::v1::Event> event;
  for (const auto& e : events_.read(reading, std::chrono::milliseconds(0), 1024))
    if (e.fields().count("finding") && e.fields().at("finding") == "unaccounted_process") event = e;
  ASSERT_TRUE(event) << "no unaccounted_process event";
  EXPECT_EQ(event->kind(), tessera::node::v1::Event::FINDING);
  EXPECT_EQ(event->host_pid(), tenant.pid);
  EXPECT_EQ(event->gpu_uuid(), uuid_);
  EXPECT_EQ(event->fields().at("bytes"), std::to_string(finding.bytes));
  EXPECT_NE(event->message().find("policy kill: reported"), std::string::npos) << event->message();
  std::printf("unaccounted: pid %d holds %llu B on %s (metric and event agree)\n", tenant.pid,
              static_cast<unsigned long long>(finding.bytes), uuid_.c_str());
}

// memory-fill in the share: what it obtained ("" when it did not report).
std::string fill_report(const std::string& share_dir, const std::string& state) {
  const std::string command =
      "env TESSERA_SHARE_DIR=" + share_dir + " LD_PRELOAD=" + LIBVGPU_SO +
      " ASAN_OPTIONS=verify_asan_link_order=0 LD_LIBRARY_PATH=" + SIMGPU_LIB_DIR +
      " SIMGPU_STATE=" + state + " 'SIMGPU_DEVICES=" + kDevices + "' " + MEMORY_FILL +
      " --chunk 256Mi 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof buffer, pipe)) out += buffer;
  if (pipe) pclose(pipe);
  return out;
}

// An MPS share's server on the simulated GPU: a child of the share's control daemon holding 1 GiB
// (and its context) is the share's infrastructure, counted in mps_server_memory() and in no
// finding; once the daemon is no longer the share's, the same process is unaccounted (and still
// never killed).
TEST_F(HostileTenant, AnMpsSharesServerIsItsInfrastructureNotUnaccounted) {
  ASSERT_NO_FATAL_FAILURE(prepare("kill", true, vgpu_config::EnforcementPolicy::kKill));
  Tenant daemon, server;  // the server is killed first, then its parent
  ASSERT_NO_FATAL_FAILURE(start_mps_server(daemon, server, kGiB));
  const std::string held = server.line(std::chrono::seconds(60));
  ASSERT_EQ(held.rfind("held ", 0), 0u) << "server said: " << held;
  // Two passes after it held the memory (the second cannot have read NVML before it).
  ASSERT_TRUE(checker_->wait_for_loop_passes(checker_->loop_passes() + 2, kLiveness));
  EXPECT_EQ(policy_->counters().count(FindingKind::kUnaccountedProcess), 0u);
  EXPECT_EQ(timed_->count(), 0u) << "no finding at all";
  const std::map<std::string, uint64_t> mps = checker_->mps_server_memory();
  ASSERT_EQ(mps.count(uuid_), 1u);
  EXPECT_GE(mps.at(uuid_), kGiB);  // NVML's figure: the 1 GiB and its context
  EXPECT_LT(mps.at(uuid_), 2 * kGiB);
  EXPECT_EQ(checker_->unaccounted_memory().at(uuid_), 0u);
  std::printf("MPS server: pid %d (daemon %d) holds %llu B on %s, not unaccounted\n", server.pid,
              daemon.pid, static_cast<unsigned long long>(mps.at(uuid_)), uuid_.c_str());
  {
    std::lock_guard lock(mps_mutex_);
    mps_daemons_.clear();
  }
  const auto found = timed_->wait_for(FindingKind::kUnaccountedProcess, server.pid, kLiveness);
  ASSERT_TRUE(found) << "the server of no share's daemon is unaccounted";
  EXPECT_EQ(found->finding.bytes, mps.at(uuid_));
  EXPECT_EQ(policy_->kills(), 0u);
}

// A share's process that only its page names (a host process: no pod) stays the share's while
// its page is wiped: the page is corrupt_usage_page (repaired), the process is never unaccounted
// nor unshimmed, and under kill it lives (it holds what its slot said).
TEST_F(HostileTenant, AWipedPageLeavesItsProcessTheShares) {
  ASSERT_NO_FATAL_FAILURE(prepare("kill", true, vgpu_config::EnforcementPolicy::kKill));
  Tenant tenant;
  ASSERT_NO_FATAL_FAILURE(start(tenant, {"--attack", "none", "--bytes", std::to_string(kGiB)},
                                /*shim=*/true, /*in_pod=*/false));
  const std::string held = tenant.line(std::chrono::seconds(60));
  ASSERT_EQ(held.rfind("held ", 0), 0u) << "tenant said: " << held;
  ASSERT_TRUE(checker_->wait_for_loop_passes(checker_->loop_passes() + 2, kLiveness));
  ASSERT_EQ(timed_->count(), 0u) << "an honest share: no finding";
  {
    // Zeroes over the whole page, in place (the tenant's mapping stays valid).
    std::fstream page(share_dir_ + "/usage", std::ios::in | std::ios::out | std::ios::binary);
    const std::string zeros(sizeof(share::UsagePage), '\0');
    page.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    ASSERT_TRUE(page.good());
  }
  ASSERT_TRUE(timed_->wait_for(FindingKind::kCorruptUsagePage, 0, kLiveness));
  ASSERT_TRUE(checker_->wait_for_loop_passes(checker_->loop_passes() + 2, kLiveness));
  EXPECT_EQ(policy_->counters().count(FindingKind::kUnaccountedProcess), 0u);
  EXPECT_EQ(policy_->counters().count(FindingKind::kUnshimmedProcess), 0u);
  EXPECT_EQ(policy_->counters().count(FindingKind::kOverMemoryLimit), 0u);
  EXPECT_EQ(checker_->unaccounted_memory().at(uuid_), 0u);
  int status = 0;
  EXPECT_EQ(waitpid(tenant.pid, &status, WNOHANG), 0) << "the share's process died";
  EXPECT_EQ(policy_->kills(), 0u);
}

TEST_F(HostileTenant, ATruncatedOrGarbagePageNeitherCrashesTheAgentNorBlocksTheShare) {
  ASSERT_NO_FATAL_FAILURE(prepare("kill"));
  const std::string usage = share_dir_ + "/usage";
  for (const char* attack : {"truncated", "garbage"}) {
    const uint64_t before = policy_->counters().count(FindingKind::kCorruptUsagePage);
    const size_t findings_before = timed_->count();
    const uint64_t pass_at_attack = checker_->stats().passes;
    if (std::string(attack) == "truncated") {
      ASSERT_EQ(truncate(usage.c_str(), 0), 0);
    } else {
      std::ofstream garbage(usage, std::ios::binary | std::ios::in | std::ios::out);
      for (size_t i = 0; i < sizeof(share::UsagePage); ++i)
        garbage.put(static_cast<char>(0x5a ^ (i * 7)));
    }
    const auto attacked = Steady::now();
    const auto deadline = attacked + kLiveness;
    while (policy_->counters().count(FindingKind::kCorruptUsagePage) == before &&
           Steady::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double seconds = std::chrono::duration<double>(Steady::now() - attacked).count();
    ASSERT_GT(policy_->counters().count(FindingKind::kCorruptUsagePage), before)
        << "passes " << checker_->stats().passes << ", problem: " << checker_->stats().last_problem
        << ", page state "
        << share_folder::usage_problem_name(
               share_folder::read_usage_page(share_dir_ + "/usage").problem);
    // The policy counts a finding after this handler saw it: it is there already.
    const auto found = timed_->wait_for(FindingKind::kCorruptUsagePage, 0, std::chrono::seconds(0),
                                        findings_before);
    ASSERT_TRUE(found);
    std::printf(
        "%s usage page: corrupt_usage_page after %.3f s, in pass %llu (pass %llu at the "
        "attack)\n",
        attack, seconds, static_cast<unsigned long long>(found->pass),
        static_cast<unsigned long long>(pass_at_attack));
    EXPECT_LE(found->pass, pass_at_attack + kPassesToDetect);
    // Repaired before the finding was handed on: the shim of a new process uses the share.
    for (int i = 0; i < 100 && share_folder::read_usage_page(share_dir_ + "/usage").problem !=
                                   share_folder::UsageProblem::kNone;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(share_folder::read_usage_page(share_dir_ + "/usage").problem,
              share_folder::UsageProblem::kNone);
    const std::string out = fill_report(share_dir_, state_);
    const json report = json::parse(out.substr(0, out.find('\n')), nullptr, false);
    ASSERT_TRUE(report.is_object()) << out;
    EXPECT_EQ(report["bytes_obtained"], 4 * kGiB - 500 * kMiB) << out;
  }
  EXPECT_EQ(checker_->stats().passes > 0, true);
}

// memory-fill's bytes_obtained in the share (0 when it did not report).
uint64_t filled(const std::string& share_dir, const std::string& state) {
  const std::string out = fill_report(share_dir, state);
  const json report = json::parse(out.substr(0, out.find('\n')), nullptr, false);
  EXPECT_TRUE(report.is_object()) << out;
  return report.is_object() ? report.value("bytes_obtained", uint64_t{0}) : 0;
}

// The liar of issue 22: a tenant zeroes its slot and holds 8 GiB in its 4 GiB share, and the
// context-cost meter measures before the check does (the order that let it publish 4096 MiB per
// context and leave the share at 0 bytes for good). Both run here in that order, one pass each per
// simulated second, with the agent's real checks and policy: the meter takes nothing from the
// liar, the check kills it, and a fresh process gets the limit less the context's cost (the
// simulator's 500 MiB, the shim's default) right after the kill and 8 s later.
TEST_F(HostileTenant, ALiarMeasuredBeforeTheCheckLeavesItsShareUsable) {
  ASSERT_NO_FATAL_FAILURE(prepare("kill", false));
  testing::CapturedLog log;
  // The meter measures an observation of the node made before the check's (the agent's Observer
  // with its own NVML session here), as the agent's pass would if it measured first.
  Result<std::unique_ptr<GpuProcessSource>> nvml = nvml_process_source();
  ASSERT_EQ(nvml.status().message(), "");
  ObserverOptions observing;
  observing.shares_dir = (base_ / "state" / "shares").string();
  observing.checkpoint = [this] { return manager_->checkpoint(); };
  Observer observer(observing, nvml->get());
  ContextOverheadMeter meter(ContextOverheadOptions{});
  auto measure = [&] { return meter.measure(context_cost_inputs(*observer.observe())); };
  auto page_figure = [this] {
    const share_folder::LimitsPageCopy limits =
        share_folder::read_limits_page(share_dir_ + "/limits");
    return limits.devices.empty() ? ~0ull : limits.devices[0].context_overhead;
  };
  Tenant tenant;
  ASSERT_NO_FATAL_FAILURE(
      start(tenant, {"--attack", "zero-slot", "--bytes", std::to_string(8 * kGiB)}, true));
  const std::string held = tenant.line(std::chrono::seconds(60));
  ASSERT_EQ(held.rfind("held ", 0), 0u) << "tenant said: " << held;
  EXPECT_GT(std::stoull(held.substr(5)), 7 * kGiB) << "the liar got past its share's limit";

  EXPECT_EQ(join_problems(measure()), "");
  EXPECT_EQ(page_figure(), 0u) << "nothing taken from the liar";
  EXPECT_EQ(log.count("mib_per_context=4096"), 0u);
  const std::vector<Finding> found = checker_->check_once();
  std::string lines;
  for (const std::string& line : log.lines()) lines += line + "\n";
  ASSERT_TRUE(tenant.killed_within(kLiveness))
      << found.size() << " findings, passes " << checker_->stats().passes << ", problem "
      << checker_->stats().last_problem << ", log:\n"
      << lines;
  EXPECT_EQ(policy_->kills(), 1u);
  EXPECT_EQ(filled(share_dir_, state_), 4 * kGiB - 500 * kMiB) << "right after the kill";

  for (int second = 1; second <= 8; ++second) {
    sim_clock_.advance(std::chrono::seconds(1));
    EXPECT_EQ(join_problems(measure()), "");
    checker_->check_once();
  }
  EXPECT_EQ(meter.stats().passes, 9u);
  EXPECT_EQ(page_figure(), 0u);
  EXPECT_EQ(filled(share_dir_, state_), 4 * kGiB - 500 * kMiB) << "8 s later";
  EXPECT_EQ(log.count("not proven"), 0u);
}

}  // namespace
}  // namespace tessera::agent
