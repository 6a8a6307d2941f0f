// The MPS backend: one MPS control daemon per share, so shares never see each other's MPS server
// and each gets its own limits. Per share, under <root>/<share name>/: pipe/ (the daemon's pipe
// folder, mounted into the claim's containers with CUDA_MPS_PIPE_DIRECTORY), log/, and shm/
// (bind-mounted over /dev/shm for the daemon and, through the CDI spec, for the containers).
// Each daemon starts in its own session and, with MpsOptions::daemon_cgroup, in a cgroup of its
// own outside the agent's container (<daemon_cgroup>/<share>), so it outlives the agent; the agent
// records it in <root>/<share>/daemon (pid, start time, boot id: a reused pid is not taken for it)
// and adopts it after a restart instead of starting a second one.
// Limits are set on the daemon before any client connects:
//   set_default_active_thread_percentage <cores>
//   set_default_device_pinned_mem_limit <uuid> <memory in MiB>M
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "model/share_spec.h"

namespace tessera::agent {

struct MpsOptions {
  std::string control = "nvidia-cuda-mps-control";  // a path, or looked up in PATH
  std::string root = "/var/lib/tessera/mps";
  // Give each daemon a private /dev/shm (the share's shm/ folder). Needs CAP_SYS_ADMIN.
  bool private_dev_shm = true;
  std::chrono::milliseconds timeout{10000};  // per control command, and for the daemon to appear
  // A cgroup v2 folder outside the agent container's cgroup (the host's /sys/fs/cgroup mounted into
  // the agent): each share's daemon, and the MPS server it spawns, runs in <daemon_cgroup>/<share>,
  // which the container runtime does not kill with the agent's container. Empty: the daemons stay
  // in the agent's cgroup (in their own session all the same).
  std::string daemon_cgroup;
};

struct MpsDaemonState {
  bool running = false;
  int pid = 0;
  std::optional<double> active_thread_percentage;  // as the daemon reports it
  Status error;                                    // why the state could not be read
};

class MpsBackend final : public ShareBackend {
 public:
  explicit MpsBackend(MpsOptions options) : options_(std::move(options)) {}

  // ShareBackend: start / stop the share's daemon; reconcile restarts it or sets its limits
  // again; orphans are daemons (and folders) of shares no checkpoint entry names, by share name.
  vgpu_config::SharingStrategy strategy() const override {
    return vgpu_config::SharingStrategy::kMps;
  }
  std::string orphan_name(const ShareSpec& share) const override { return share.name(); }
  Status prepare(const ShareSpec& share, const HolderLookup& holder) override;
  Status unprepare(const ShareSpec& share, const HolderLookup& holder) override;
  std::vector<DriftItem> reconcile(const std::string& claim_uid, const ShareSpec& share) override;
  std::vector<DriftItem> remove_orphans(const std::vector<ShareSpec>& named,
                                        const ReserveOrphan& reserve) override;

  const std::string& root() const { return options_.root; }
  std::string folder(const std::string& share_name) const;
  std::string pipe_dir(const std::string& share_name) const { return folder(share_name) + "/pipe"; }
  std::string log_dir(const std::string& share_name) const { return folder(share_name) + "/log"; }
  std::string shm_dir(const std::string& share_name) const { return folder(share_name) + "/shm"; }

  // Starts the share's daemon unless it runs, then sets and checks its limits. Idempotent.
  // kUnavailable when the daemon does not come up or answer in time, kFailedPrecondition when
  // the control program cannot run, kInternal otherwise.
  Status start(const ShareSpec& share);
  // Asks the daemon to quit (killing it after the timeout) and removes the share's folder.
  Status stop(const std::string& share_name);
  MpsDaemonState inspect(const std::string& share_name) const;
  // The share's running control daemon, 0 when none runs. With a record (<folder>/daemon), the
  // recorded process if it is still that one (same start time and boot, the control program with
  // this share's pipe folder in its environment), else 0: its pid may be another program's now.
  // Without one (a start the agent did not see through, or an agent that kept none), the control
  // program with this share's pipe folder in its environment, whatever the tenant-writable pid
  // file says. No command is run: the out-of-band checks ask every pass (the MPS server is the
  // daemon's child).
  int daemon_pid(const std::string& share_name) const;
  // <folder>/daemon: "<pid> <start time in clock ticks after boot> <boot id>".
  std::string record_path(const std::string& share_name) const {
    return folder(share_name) + "/daemon";
  }
  // <daemon_cgroup>/<share>, "" without daemon_cgroup.
  std::string cgroup(const std::string& share_name) const;
  // Names of the share folders under root (to find daemons no checkpoint entry names).
  std::vector<std::string> share_folders() const;

  // What the daemon's limits must read for `share`.
  static uint32_t thread_percentage(const ShareSpec& share);

 private:
  std::vector<std::string> environment(const std::string& share_name,
                                       const std::string& uuid) const;
  Status set_limits(const ShareSpec& share) const;
  struct Found {
    enum Source { kNone, kRecord, kPidFile, kScan };
    int pid = 0;
    Source source = kNone;  // its record, its pid file (checked), or its name and environment
  };
  Found find_daemon(const std::string& share_name) const;
  Status record_daemon(const std::string& share_name, int pid) const;
  // Makes the running daemon the share's for good: with daemon_cgroup, moves it (and the MPS
  // servers it spawned) into its cgroup when it is not there (true: it moved it); records the one
  // its pid file names. Nothing for a process found by its name and environment alone.
  Result<bool> adopt(const std::string& share_name);
  // Every running control program started with a pipe folder under root, by share name.
  std::vector<std::pair<std::string, int>> running_daemons() const;

  MpsOptions options_;
};

}  // namespace tessera::agent
