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

#include "kube/kube_client.h"
#include "plugin/claim_preparer.h"
#include "share/cdi.h"
#include "share/checkpoint.h"
#include "share/share_spec.h"

namespace tessera::agent {

struct ShareManagerOptions {
  std::string root = "/var/lib/tessera";  // checkpoint.json and shares/
  std::string cdi_dir = "/var/run/cdi";
  std::string node_name;  // the pool name
  std::string driver = kVgpuDriverName;
  std::string shim_path = "/usr/local/tessera/lib/libvgpu.so";
  std::string container_shares_dir = "/var/run/tessera/shares";
  // Tests only: called after each durable step with its 1-based number (a crash test calls
  // _exit there). Steps count across prepare and unprepare calls of this manager.
  std::function<void(int step)> after_step;
};

class ShareManager final : public ClaimPreparer {
 public:
  ShareManager(ShareManagerOptions options, KubeClient& kube, std::vector<NodeDevice> devices);

  // Loads the checkpoint (a missing one is empty) and removes orphans. Call once before use.
  std::string start();

  PrepareResult prepare(const ClaimRef& claim) override;
  std::string unprepare(const ClaimRef& claim) override;

  Checkpoint checkpoint() const;
  std::string share_dir(const ShareSpec& share) const;
  std::string cdi_spec_path(const std::string& claim_uid) const;

 private:
  std::string save_checkpoint();
  std::string write_share(const ShareSpec& share);
  std::string live_processes(const ShareSpec& share) const;
  void step();
  static PrepareResult result_of(const ClaimEntry& entry);

  ShareManagerOptions options_;
  KubeClient& kube_;
  std::vector<NodeDevice> devices_;
  mutable std::mutex mutex_;
  Checkpoint checkpoint_;
  int steps_ = 0;
};

}  // namespace tessera::agent
