// The share lifecycle behind the kubelet plugin: prepare = GET the claim, compute its shares (the
// pure step, share_spec.h), then write, in this order, the checkpoint entry (PrepareStarted), each
// share folder (usage page, limits page), the claim's CDI spec, and the checkpoint entry
// (PrepareCompleted). unprepare undoes it from the checkpoint alone. Every step is idempotent, so
// a crash between any two converges on the next prepare or unprepare, and start() removes share
// folders and CDI specs that no checkpoint entry names.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "backends/quota_backend.h"
#include "kube/kube_client.h"
#include "model/claim_preparer.h"
#include "model/share_spec.h"
#include "share/cdi.h"
#include "share/checkpoint.h"
#include "share/reconcile.h"
#include "tessera/share_files.h"

namespace tessera::agent {

class MpsBackend;
class TimeSliceBackend;

struct ShareManagerOptions {
  std::string root = "/var/lib/tessera";  // checkpoint.json and shares/
  std::string cdi_dir = "/var/run/cdi";
  std::string node_name;  // the pool name
  std::string driver = kDriverName;
  std::string shim_path = "/usr/local/tessera/lib/libvgpu.so";
  std::string container_shares_dir = "/var/run/tessera/shares";
  std::string container_mps_dir = "/var/run/tessera/mps";
  // Backends for shares that ask for them (not owned; the manager calls them as ShareBackends).
  // Null: such a claim gets an error saying the strategy is not enabled on this node.
  MpsBackend* mps = nullptr;
  TimeSliceBackend* time_slice = nullptr;
  // Who measures a share's GPU time (LimitsPage::measure_source): kMeasureAgent when the agent's
  // GpuTimeMeter runs (containers: the shim cannot see its host pids in NVML).
  uint32_t measure_source = share::kMeasureNvml;
  // Tests only: called after each durable step with its 1-based number (a crash test calls
  // _exit there). Steps count across prepare and unprepare calls of this manager.
  std::function<void(int step)> after_step;
};

// The limits a share's folder holds for it (what write_share_folder writes and reconcile
// expects). A folder's shares have one config, so its first share's priority is the page's.
share::DeviceLimit share_limits(const ShareSpec& share);
uint32_t share_priority(const ShareSpec& share);

class ShareManager final : public ClaimPreparer {
 public:
  ShareManager(ShareManagerOptions options, KubeClient& kube, std::vector<NodeDevice> devices);

  // Loads the checkpoint (a missing one is empty) and reconciles (the report goes to `report`
  // when given). Call once before use.
  std::string start(ReconcileReport* report = nullptr);
  // Makes the host match the checkpoint (share folders and limits, CDI specs, MPS daemons,
  // time-slice settings) and removes what no entry names; says what differed (reconcile.cc).
  ReconcileReport reconcile();

  PrepareResult prepare(const ClaimRef& claim) override;
  Status unprepare(const ClaimRef& claim) override;

  // The GPUs claims are checked against; the device monitor replaces them when the node's GPUs
  // change (prepared shares keep working from the checkpoint).
  std::vector<NodeDevice> devices() const;
  void set_devices(std::vector<NodeDevice> devices);

  Checkpoint checkpoint() const;
  std::string share_dir(const ShareSpec& share) const;  // its folder (shared when grouped)
  std::string cdi_spec_path(const std::string& claim_uid) const;

 private:
  std::string save_checkpoint();
  // Writes one share folder: the usage page and the limits page of all its shares.
  std::string write_share_folder(const std::vector<ShareSpec>& members);
  std::string write_cdi_spec(const std::string& claim_uid, const std::vector<ShareSpec>& shares);
  std::string expected_cdi_spec(const std::vector<ShareSpec>& shares) const;
  // The backend of the share's strategy, or null when it is not enabled on this node.
  ShareBackend* backend_for(SharingStrategy strategy);
  // A share of another prepared claim on the GPU of `share` with its strategy (it holds a
  // GPU-wide setting such as the time-slice interval), or null.
  const ShareSpec* held_elsewhere(const std::string& claim_uid, const ShareSpec& share) const;
  void reconcile_entry(const std::string& claim_uid, const ClaimEntry& entry,
                       ReconcileReport& report);
  void remove_orphans(ReconcileReport& report);
  std::string live_processes(const std::string& folder) const;
  void step();
  static PrepareResult result_of(const ClaimEntry& entry);

  ShareManagerOptions options_;
  QuotaBackend quota_;
  KubeClient& kube_;
  mutable std::mutex devices_mutex_;  // devices_ only: prepare reads them before taking mutex_
  std::vector<NodeDevice> devices_;
  mutable std::mutex mutex_;
  Checkpoint checkpoint_;
  int steps_ = 0;
};

}  // namespace tessera::agent
