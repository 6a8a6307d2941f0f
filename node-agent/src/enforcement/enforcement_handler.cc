#include "enforcement/enforcement_handler.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/log.h"
#include "tessera/share_contract.h"
#include "tessera/unique_fd.h"

namespace tessera::agent {
namespace {

// SIGKILL through a pidfd opened before the start time is checked again, so the process signalled
// is the one checked even if it exits and its pid is reused in between; `kill` where the kernel
// has no pidfds (before 5.3). 0 or an errno.
int signal_checked(const std::string& proc_root, int pid, uint64_t start_time) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
  const long opened = syscall(SYS_pidfd_open, pid, 0);
  if (opened >= 0) {
    const UniqueFd pidfd(static_cast<int>(opened));
    uint64_t now = 0;
    if (share::read_process_start_time(proc_root, pid, now) != 0 || now != start_time) return ESRCH;
    return syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0) == 0 ? 0 : errno;
  }
  if (errno != ENOSYS) return errno;
#endif
  uint64_t now = 0;
  if (share::read_process_start_time(proc_root, pid, now) != 0 || now != start_time) return ESRCH;
  return ::kill(pid, SIGKILL) == 0 ? 0 : errno;
}

}  // namespace

EnforcementHandler::EnforcementHandler(EnforcementHandlerOptions options)
    : options_(std::move(options)) {}

vgpu_config::EnforcementPolicy EnforcementHandler::policy_of(const std::string& share) const {
  if (options_.share_policy)
    if (const auto policy = options_.share_policy(share)) return *policy;
  return options_.default_policy;
}

std::string EnforcementHandler::kill_offender(const Finding& finding) {
  if (finding.host_pid <= 0 || finding.host_pid_start_time == 0)
    return "no process to kill (the share as a whole)";
  if (finding.host_pid == getpid()) return "not killed: the agent itself";
  MutexLock lock(kill_mutex_);
  for (const Killed& done : killed_)
    if (done.pid == finding.host_pid && done.start_time == finding.host_pid_start_time)
      return "not signalled again: killed under " + std::string(finding_kind_name(done.kind));
  if (!options_.belongs ||
      !options_.belongs(finding.host_pid, finding.host_pid_start_time, finding.share))
    return "not killed: pid " + std::to_string(finding.host_pid) +
           " is not proven to be this share's process";
  int error = 0;
  if (options_.send_kill) {
    error = options_.send_kill(finding.host_pid);
  } else {
    error = signal_checked(options_.proc_root, finding.host_pid, finding.host_pid_start_time);
  }
  if (error != 0) return "kill failed: " + std::string(std::strerror(error));
  kills_.fetch_add(1, std::memory_order_relaxed);
  if (finding.kind == FindingKind::kReclaimEviction) ++evictions_[finding.gpu_uuid];
  constexpr size_t kKilledKept = 256;  // far more than one pass kills
  if (killed_.size() == kKilledKept) killed_.pop_front();
  killed_.push_back({finding.host_pid, finding.host_pid_start_time, finding.kind});
  return "killed (SIGKILL)";
}

std::map<std::string, uint64_t> EnforcementHandler::reclaim_evictions() const {
  MutexLock lock(kill_mutex_);
  return evictions_;
}

void EnforcementHandler::handle(const Finding& finding) {
  counters_.add(finding.kind);
  const vgpu_config::EnforcementPolicy policy = policy_of(finding.share);
  std::string action = "reported";
  if ((policy == vgpu_config::EnforcementPolicy::kKill && kill_worthy(finding.kind)) ||
      killed_regardless(finding.kind))
    action = kill_offender(finding);
  // What decided the action: the share's policy, or reclaim (whatever the policy).
  const std::string by =
      killed_regardless(finding.kind)
          ? std::string("reclaim")
          : "policy " + std::string(vgpu_config::enforcement_policy_name(policy));
  if (options_.then) {
    Finding handled = finding;
    handled.detail += "; " + by + ": " + action;
    options_.then->handle(handled);
  }
  // A finding about a share names it and its claim; one of no share (unaccounted_process) names
  // what the check saw instead: the pid, the pod its cgroup names (if any), the GPU and the bytes.
  const bool of_share = !finding.share.empty();
  const std::string pod_uid = of_share ? "" : finding.pod_uid;
  if (options_.log) {  // tests read the whole finding as one line
    std::string line = "finding " + std::string(finding_kind_name(finding.kind)) + ": pid " +
                       std::to_string(finding.host_pid);
    if (of_share)
      line += ", share " + finding.share + ", claim " + finding.claim_namespace + "/" +
              finding.claim_name + " (" + finding.claim_uid + "), pod " +
              (finding.pod.empty() ? "-" : finding.pod);
    if (!pod_uid.empty())
      line += ", pod uid " + pod_uid + (finding.pod.empty() ? "" : " (" + finding.pod + ")");
    if (!finding.gpu_uuid.empty()) line += ", gpu " + finding.gpu_uuid;
    if (!of_share) line += ", bytes " + std::to_string(finding.bytes);
    options_.log(line + ": " + finding.detail + "; " + by + ": " + action);
    return;
  }
  const std::string_view kind = finding_kind_name(finding.kind);
  const std::string_view policy_name =
      killed_regardless(finding.kind) ? "reclaim" : vgpu_config::enforcement_policy_name(policy);
  if (of_share) {
    log::warn("finding", {{"kind", kind},
                          {"pid", finding.host_pid},
                          {"share", finding.share},
                          {"claim", finding.claim_namespace + "/" + finding.claim_name},
                          {"claim_uid", finding.claim_uid},
                          {"pod", finding.pod},
                          {"gpu", finding.gpu_uuid},
                          {"detail", finding.detail},
                          {"policy", policy_name},
                          {"action", action}});
  } else if (pod_uid.empty()) {  // a host process: no pod to name
    log::warn("finding", {{"kind", kind},
                          {"pid", finding.host_pid},
                          {"gpu", finding.gpu_uuid},
                          {"bytes", finding.bytes},
                          {"detail", finding.detail},
                          {"policy", policy_name},
                          {"action", action}});
  } else if (finding.pod.empty()) {
    log::warn("finding", {{"kind", kind},
                          {"pid", finding.host_pid},
                          {"pod_uid", pod_uid},
                          {"gpu", finding.gpu_uuid},
                          {"bytes", finding.bytes},
                          {"detail", finding.detail},
                          {"policy", policy_name},
                          {"action", action}});
  } else {
    log::warn("finding", {{"kind", kind},
                          {"pid", finding.host_pid},
                          {"pod_uid", pod_uid},
                          {"pod", finding.pod},
                          {"gpu", finding.gpu_uuid},
                          {"bytes", finding.bytes},
                          {"detail", finding.detail},
                          {"policy", policy_name},
                          {"action", action}});
  }
}

}  // namespace tessera::agent
