#include "enforcement/enforcement_handler.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "captured_log.h"
#include "tessera/share_contract.h"

namespace tessera::agent {
namespace {

Finding over_limit(int pid, uint64_t start_time, const std::string& share = "claim-gpu-0-a") {
  Finding f;
  f.kind = FindingKind::kOverMemoryLimit;
  f.host_pid = pid;
  f.host_pid_start_time = start_time;
  f.share = share;
  f.claim_namespace = "tenants";
  f.claim_name = "pair";
  f.claim_uid = "uid-1";
  f.pod = "tenants/trainer";
  f.gpu_uuid = "GPU-1";
  f.detail = "the share holds 7680 MiB (NVML) of its 4096 MiB";
  return f;
}

// A child that sleeps until killed; its start time from /proc.
struct Sleeper {
  pid_t pid = 0;
  uint64_t start_time = 0;
  Sleeper() {
    pid = fork();
    if (pid == 0) {
      pause();
      _exit(0);
    }
    share::read_process_start_time("/proc", pid, start_time);
  }
  // True when the child was killed by SIGKILL (reaped); false when it is still running after
  // `polls` of 5 ms: 60 (0.3 s) where it must not die, more where it must (a SIGKILLed process
  // on a loaded machine waits for a CPU to die on).
  bool killed(int polls = 60) {
    int status = 0;
    for (int i = 0; i < polls; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = 0;
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      }
      usleep(5000);
    }
    return false;
  }
  ~Sleeper() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

TEST(EnforcementHandler, LogsCountsAndReportsUnderTheDefaultPolicy) {
  std::vector<std::string> lines;
  EnforcementHandlerOptions options;
  options.log = [&](const std::string& line) { lines.push_back(line); };
  options.belongs = [](int, uint64_t, const std::string&) { return true; };
  int signals = 0;
  options.send_kill = [&](int) { return ++signals, 0; };
  EnforcementHandler handler(options);
  handler.handle(over_limit(4242, 99));
  Finding unshimmed = over_limit(4243, 100);
  unshimmed.kind = FindingKind::kUnshimmedProcess;
  handler.handle(unshimmed);
  EXPECT_EQ(handler.counters().count(FindingKind::kOverMemoryLimit), 1u);
  EXPECT_EQ(handler.counters().count(FindingKind::kUnshimmedProcess), 1u);
  EXPECT_EQ(handler.counters().count(FindingKind::kCorruptUsagePage), 0u);
  EXPECT_EQ(signals, 0);  // report: nothing killed
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "finding over_memory_limit: pid 4242, share claim-gpu-0-a, claim tenants/pair "
            "(uid-1), pod tenants/trainer, gpu GPU-1: the share holds 7680 MiB (NVML) of its "
            "4096 MiB; policy report: reported");
}

// A process of no share: its line names the pid, the pod its cgroup names (a host process has
// none), the GPU and the bytes, and no empty share or claim; it is reported even under kill.
TEST(EnforcementHandler, AnUnaccountedProcessIsLoggedWithWhatTheCheckSaw) {
  Finding in_pod;
  in_pod.kind = FindingKind::kUnaccountedProcess;
  in_pod.host_pid = 4300;
  in_pod.host_pid_start_time = 77;
  in_pod.pod_uid = "cccccccc-0000-0000-0000-000000000003";
  in_pod.gpu_uuid = "GPU-1";
  in_pod.bytes = 2147483648;
  in_pod.detail = "holds 2048 MiB on the GPU and belongs to no share of it";
  Finding host = in_pod;
  host.host_pid = 4301;
  host.pod_uid = "";
  {
    testing::CapturedLog log;
    EnforcementHandlerOptions options;
    options.default_policy = vgpu_config::EnforcementPolicy::kKill;
    options.belongs = [](int, uint64_t, const std::string&) { return true; };
    int signals = 0;
    options.send_kill = [&](int) { return ++signals, 0; };
    EnforcementHandler handler(options);
    handler.handle(in_pod);
    handler.handle(host);
    EXPECT_EQ(signals, 0);
    const std::vector<std::string> lines = log.lines();
    ASSERT_EQ(lines.size(), 2u);
    for (const char* field :
         {"kind=unaccounted_process", "pid=4300", "pod_uid=cccccccc-0000-0000-0000-000000000003",
          "gpu=GPU-1", "bytes=2147483648", "policy=kill", "action=reported"})
      EXPECT_NE(lines[0].find(field), std::string::npos) << field << " not in " << lines[0];
    EXPECT_NE(lines[1].find("pid=4301"), std::string::npos) << lines[1];
    EXPECT_NE(lines[1].find("bytes=2147483648"), std::string::npos) << lines[1];
    for (const std::string& line : lines)
      for (const char* empty : {"share=", "claim=", "claim_uid=", " pod="})
        EXPECT_EQ(line.find(empty), std::string::npos) << empty << " in " << line;
    EXPECT_EQ(lines[1].find("pod_uid="), std::string::npos) << lines[1];
  }
  std::vector<std::string> lines;
  EnforcementHandlerOptions options;
  options.log = [&](const std::string& line) { lines.push_back(line); };
  EnforcementHandler handler(options);
  handler.handle(in_pod);
  handler.handle(host);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "finding unaccounted_process: pid 4300, pod uid cccccccc-0000-0000-0000-000000000003, "
            "gpu GPU-1, bytes 2147483648: holds 2048 MiB on the GPU and belongs to no share of it; "
            "policy report: reported");
  EXPECT_EQ(lines[1],
            "finding unaccounted_process: pid 4301, gpu GPU-1, bytes 2147483648: holds 2048 MiB "
            "on the GPU and belongs to no share of it; policy report: reported");
}

// One pass finds an unshimmed process and, the share being over its limit, the same process as
// over_memory_limit's offender: the log says once that it was killed, under the finding that did
// it.
TEST(EnforcementHandler, AProcessKilledUnderOneFindingIsNotTriedAgainUnderTheNext) {
  testing::CapturedLog log;
  Sleeper offender;
  EnforcementHandlerOptions options;
  options.default_policy = vgpu_config::EnforcementPolicy::kKill;
  options.belongs = [&](int pid, uint64_t start_time, const std::string&) {
    uint64_t now = 0;
    return share::read_process_start_time("/proc", pid, now) == 0 && now == start_time &&
           pid == offender.pid;
  };
  EnforcementHandler handler(options);
  Finding unshimmed = over_limit(offender.pid, offender.start_time, "a");
  unshimmed.kind = FindingKind::kUnshimmedProcess;
  handler.handle(unshimmed);
  ASSERT_TRUE(offender.killed(2000));  // reaped: its pid is gone, as in the agent
  handler.handle(over_limit(unshimmed.host_pid, unshimmed.host_pid_start_time, "a"));
  EXPECT_EQ(handler.kills(), 1u);
  EXPECT_EQ(log.count("not proven"), 0u);
  EXPECT_EQ(log.count("killed (SIGKILL)"), 1u);
  ASSERT_EQ(log.count("over_memory_limit"), 1u);
  for (const std::string& line : log.lines()) {
    if (line.find("over_memory_limit") != std::string::npos) {
      EXPECT_NE(line.find("not signalled again: killed under unshimmed_process"), std::string::npos)
          << line;
    }
  }
  // Another process (another start time) with the same pid is judged afresh.
  handler.handle(over_limit(unshimmed.host_pid, unshimmed.host_pid_start_time + 1, "a"));
  EXPECT_EQ(log.count("not proven"), 1u);
}

TEST(EnforcementHandler, KillsOnlyAProvenProcessOfTheShareWithTheStartTimeSeen) {
  std::vector<std::string> lines;
  Sleeper offender, other_share, reused;
  EnforcementHandlerOptions options;
  options.default_policy = vgpu_config::EnforcementPolicy::kKill;
  options.log = [&](const std::string& line) { lines.push_back(line); };
  // The offender is share a's; the other sleeper is share b's.
  options.belongs = [&](int pid, uint64_t start_time, const std::string& share) {
    uint64_t now = 0;
    if (share::read_process_start_time("/proc", pid, now) != 0 || now != start_time) return false;
    return (share == "a" && pid == offender.pid) || (share == "b" && pid == other_share.pid);
  };
  options.share_policy =
      [](const std::string& share) -> std::optional<vgpu_config::EnforcementPolicy> {
    if (share == "reporting") return vgpu_config::EnforcementPolicy::kReport;
    return std::nullopt;
  };
  EnforcementHandler handler(options);

  // A finding in share a naming share b's process: not killed.
  handler.handle(over_limit(other_share.pid, other_share.start_time, "a"));
  EXPECT_NE(lines.back().find("is not proven to be this share's process"), std::string::npos)
      << lines.back();
  // The right share, a wrong start time (the pid was reused since the finding): not killed.
  handler.handle(over_limit(reused.pid, reused.start_time + 1, "a"));
  // A share whose own policy is report: not killed.
  handler.handle(over_limit(offender.pid, offender.start_time, "reporting"));
  // A corrupt page is repaired, not a kill.
  Finding corrupt = over_limit(offender.pid, offender.start_time, "a");
  corrupt.kind = FindingKind::kUsageDisagrees;
  handler.handle(corrupt);
  EXPECT_NE(lines.back().find("policy kill: reported"), std::string::npos) << lines.back();
  EXPECT_EQ(handler.kills(), 0u);
  EXPECT_FALSE(other_share.killed());
  EXPECT_FALSE(reused.killed());
  EXPECT_FALSE(offender.killed());

  // The offender of share a, as seen: SIGKILL.
  handler.handle(over_limit(offender.pid, offender.start_time, "a"));
  EXPECT_NE(lines.back().find("policy kill: killed (SIGKILL)"), std::string::npos) << lines.back();
  EXPECT_TRUE(offender.killed(6000));  // liveness: 30 s
  EXPECT_EQ(handler.kills(), 1u);
  EXPECT_FALSE(other_share.killed());
  // Never the agent itself, never without a start time.
  handler.handle(over_limit(getpid(), 1, "a"));
  handler.handle(over_limit(other_share.pid, 0, "b"));
  EXPECT_EQ(handler.kills(), 1u);
  EXPECT_EQ(handler.counters().count(FindingKind::kOverMemoryLimit), 6u);
}

}  // namespace
}  // namespace tessera::agent
