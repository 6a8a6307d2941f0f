// The node agent assembled: the Kubernetes client, the share manager with its MPS and TimeSlicing
// backends, the device monitor (ResourceSlices republished when the GPUs change, health from NVML
// events), the GPU-time meter (the shares' GPU time from host NVML, for compute quotas in
// containers), the reconcile loop, and the Prometheus endpoint (/metrics, /healthz). main.cc serves
// its preparer and health board over the kubelet plugin sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "clock/clock.h"
#include "clock/periodic_loop.h"
#include "devices/coexistence.h"
#include "devices/device_health.h"
#include "devices/mig_slices.h"
#include "devices/partition_capability.h"
#include "enforcement/partition_check.h"
#include "metrics/request_metrics.h"
#include "mig/mig_driver.h"
#include "mig/mig_instances.h"
#include "mig/mig_layout.h"
#include "model/claim_preparer.h"
#include "share/checkpoint.h"
#include "tessera/gpu_info.h"
#include "tessera/status.h"
#include "tessera/thread_annotations.h"

namespace tessera::kube {
class HttpKubeClient;
class EventRecorder;
}  // namespace tessera::kube

namespace tessera::agent {

class DeviceMonitor;
class EnforcementHandler;
class GpuProcessSource;
class OutOfBandChecker;
class FindingHandler;
class ProcessWatchProgram;
class ProcessWatcher;
class ShareFolderResolver;
class EventFindingHandler;
class EventLog;
class PodEvents;
class NodeApiServer;
class GpuTimeMeter;
class InstrumentedPreparer;
class MetricsServer;
class MpsBackend;
class Observer;
class ContextOverheadMeter;
struct NodeObservation;
struct Judgment;
class ObservationBoard;
struct ShareManagerOptions;
class ShareManager;
class CheckpointView;
class SlicePublisher;
class TimeSliceBackend;
struct ShareManagerOptions;

// The shim and driver flags of `config` applied to `options`: the shim's path and loading, and the
// driver for containers, discovered now (toolkit spec or driver root, per --driver-mode). An error
// names the flag or the path; with `announce`, one log line says which driver was found.
// NodeAgent::start calls it; so does the spec-writing tool of tests/node-agent/tools.
Status apply_container_flags(const AgentConfig& config, ShareManagerOptions& options,
                             bool announce = false);

class NodeAgent {
 public:
  // `clock` paces the device monitor, the GPU-time meter and the reconcile loop (tests pass a
  // SimulatedClock); it outlives the agent.
  explicit NodeAgent(AgentConfig config, Clock& clock = real_clock());
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Takes the state folder (one agent per folder, unless every agent on it has a pod UID: then
  // the old and the new pod of a rolling update share it), connects to the API server, loads the
  // checkpoint and reconciles the host with it, lists the GPUs and publishes them, then starts the
  // monitor, the GPU-time meter, the reconcile loop and the metrics endpoint (unless its address
  // is empty). Ok or why not.
  Status start();
  // Stops the loops (the share state stays on disk for the next start).
  void stop();

  // The share manager's, counted for the metrics (prepare/unprepare results and durations).
  ClaimPreparer& preparer();
  const DeviceHealthProvider& health() const { return health_; }
  ShareManager& shares() { return *shares_; }
  // The policy every finding goes through (log, count, kill): the out-of-band checker's, and the
  // one to hand to the process watcher. Valid after start().
  EnforcementHandler& findings() { return *findings_; }
  // The out-of-band checks (null when --check-interval is 0 or NVML is missing).
  OutOfBandChecker* checker() { return checker_.get(); }
  // The local API's events (null before start()): an EventFindingHandler on it puts findings on
  // the stream. The API server's socket, empty when it is off.
  EventLog* events() { return events_.get(); }
  std::string api_socket() const;
  const PartitionCapability& partition_capability() const { return partition_capability_; }
  // How many times the MIG state of a GPU was read from NVML (each an NVML session); 0 without
  // --mig-strategy.
  uint64_t mig_inspections() const { return mig_driver_ ? mig_driver_->inspections() : 0; }
  // The managed GPUs not published because another allocator hands them out (docs/coexistence.md),
  // as of the last publish.
  std::vector<WithheldGpu> withheld_gpus() const;

  // Reconcile passes completed since start() (0 without the loop), and a bounded wait for a count
  // of them: tests advance their clock by the interval and wait for the pass.
  std::uint64_t reconcile_passes() const;
  bool wait_for_reconcile_passes(
      std::uint64_t count, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  // The same for the device monitor's turns.
  bool wait_for_device_turns(std::uint64_t count,
                             std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

  // What /healthz answers: ok once start() succeeded, while the device monitor turns and the
  // reconcile loop passes (a loop that has not moved for much longer than its interval, by the
  // agent's clock, is reported), until stop().
  Status liveness() TESSERA_EXCLUDES(liveness_mutex_);
  // The metrics endpoint's port (0 when it is off), and one scrape's text.
  int metrics_port() const;
  std::string scrape_metrics() const;

 private:
  Status lock_state_dir();
  Status on_devices(const std::vector<GpuInfo>& gpus);
  Status publish(const std::vector<GpuInfo>& gpus) TESSERA_EXCLUDES(slices_mutex_);
  // --mig-strategy: each managed GPU's MIG view from NVML, and the slice shape (auto: asked of
  // the API server once). Null when the strategy is none. The view last read is kept for the same
  // GPUs until the MIG layout can have changed (the driver made or destroyed an instance or
  // changed a mode; a device event; the periodic republish): the device monitor asks at every
  // turn.
  Result<std::optional<MigPublication>> mig_publication(const std::vector<GpuInfo>& gpus);
  void reconcile_pass();
  // The finding policy, and the out-of-band checks unless --check-interval is 0 (without NVML
  // they are off, and said so).
  Status start_enforcement();
  // The one NVML session (none without NVML: said in a warn line), the observer of the node and
  // the board its passes go on.
  void start_observation();
  // After each pass (the checks' loop, or the observation loop without checks): the context cost
  // of its observation measured and published, then the observation and its judgment on the board.
  void after_pass(std::shared_ptr<const NodeObservation> observation,
                  std::shared_ptr<const Judgment> judgment);
  Status start_process_watch();  // per --process-watch
  // --driver-partitions: detects the capability per GPU and, where found, gives the share manager
  // the CDI hook and the clearing of partitions at unprepare.
  void detect_partitions(ShareManagerOptions& options);
  Status start_partition_check();
  Status start_api();
  // The node's claims as checkpoint.json holds them now, the other agent's of a rolling update
  // too (the share manager's memory learns them at its next reconcile pass); the share manager's
  // own copy when the file cannot be read (said in a warn line). The observer reads it, once per
  // pass (and the board, to see whether the claims changed since).
  Checkpoint node_checkpoint() const;

  AgentConfig config_;
  Clock& clock_;
  int lock_fd_ = -1;  // <state-dir>/agent.lock, held (flock: exclusive, shared with a pod UID)
  std::unique_ptr<kube::HttpKubeClient> kube_;
  Mutex slices_mutex_;  // the monitor's thread and the reconcile loop both publish
  std::unique_ptr<SlicePublisher> slices_ TESSERA_PT_GUARDED_BY(slices_mutex_);
  // Coexistence (devices/coexistence.h): --gpus, and the other allocators checked at each publish.
  std::unique_ptr<GpuSelection> gpu_selection_;
  std::unique_ptr<NvmlComputeModes> compute_modes_;
  std::unique_ptr<CoexistenceCheck> coexistence_;
  std::unique_ptr<NodeEventWriter> node_events_;
  std::unique_ptr<WithheldGpus> withheld_;
  // --gpus entries that named no GPU, as last logged.
  std::string last_unmatched_gpus_ TESSERA_GUARDED_BY(slices_mutex_);
  std::unique_ptr<MpsBackend> mps_;
  std::unique_ptr<TimeSliceBackend> time_slice_;
  // MIG (--mig-strategy): the NVML seam, and dynamic MIG's instances (before the share manager,
  // which calls them).
  MigStrategy mig_strategy_ = MigStrategy::kNone;
  std::mutex mig_mutex_;                        // slice_shape_, mig_view_
  SliceShape slice_shape_ = SliceShape::kAuto;  // resolved at the first publish that needs it
  std::unique_ptr<MigDriver> mig_nvml_;
  std::unique_ptr<LayoutTrackingMigDriver> mig_driver_;  // mig_nvml_, counted
  // The MIG view last read: for these GPUs, at this count of the driver's layout changes.
  struct MigView {
    std::vector<std::string> gpus;
    uint64_t layout = 0;
    MigPublication publication;
  };
  std::optional<MigView> mig_view_;
  std::unique_ptr<MigInstances> mig_instances_;
  std::unique_ptr<ShareManager> shares_;
  std::unique_ptr<CheckpointView> shared_checkpoint_;  // <state-dir>/checkpoint.json
  DeviceHealthBoard health_;
  std::unique_ptr<DeviceMonitor> monitor_;
  std::unique_ptr<GpuTimeMeter> meter_;
  // The local API's events, before everything that reports into them (the findings' policy).
  std::unique_ptr<EventLog> events_;
  std::unique_ptr<EventFindingHandler> event_findings_;
  // Kills, evictions and refusals as Kubernetes Events on the pods (the log's observer).
  std::unique_ptr<kube::EventRecorder> kube_events_;
  std::unique_ptr<PodEvents> pod_events_;
  std::unique_ptr<EnforcementHandler> findings_;
  // The one NVML session of the observer (null without NVML, and why), the observer, and the
  // latest observation with its judgment.
  std::unique_ptr<GpuProcessSource> gpu_processes_;
  std::string gpu_processes_error_;
  std::unique_ptr<Observer> observer_;
  std::unique_ptr<ObservationBoard> board_;
  std::unique_ptr<ContextOverheadMeter> context_costs_;  // the pass loop's thread only
  std::string last_context_problem_;                     // the pass loop's thread only
  std::unique_ptr<OutOfBandChecker> checker_;            // after what its passes use
  std::unique_ptr<PeriodicLoop> reconciler_;             // after what its passes use
  // Without the checks: a pass a second (after_pass), after what it uses.
  std::unique_ptr<PeriodicLoop> observe_loop_;
  // The eBPF process watcher (watcher/), when loaded: the program's poll thread calls the
  // watcher, the refresher both, so each is declared after what it uses.
  std::unique_ptr<ShareFolderResolver> watch_resolver_;
  std::unique_ptr<ProcessWatcher> watcher_;
  std::unique_ptr<ProcessWatchProgram> watch_program_;
  std::unique_ptr<PeriodicLoop> watch_refresher_;

  RequestMetrics requests_;
  std::unique_ptr<InstrumentedPreparer> preparer_;  // counts into requests_
  // The driver's partitions (docs/driver-partitions.md): detected at start; the session the
  // check and unprepare use, the check and its loop where any GPU has the capability.
  PartitionCapability partition_capability_;
  std::optional<nvml::Session> partition_session_;
  std::unique_ptr<PartitionCheck> partition_check_;
  std::unique_ptr<PeriodicLoop> partition_loop_;
  Mutex liveness_mutex_;  // what liveness() last saw
  bool started_ TESSERA_GUARDED_BY(liveness_mutex_) = false;
  bool stopped_ TESSERA_GUARDED_BY(liveness_mutex_) = false;
  std::uint64_t monitor_turns_seen_ TESSERA_GUARDED_BY(liveness_mutex_) = 0;
  std::uint64_t reconcile_passes_seen_ TESSERA_GUARDED_BY(liveness_mutex_) = 0;
  Clock::time_point monitor_moved_at_ TESSERA_GUARDED_BY(liveness_mutex_){};
  Clock::time_point reconcile_moved_at_ TESSERA_GUARDED_BY(liveness_mutex_){};
  std::unique_ptr<NodeApiServer> api_;      // its snapshots use everything above
  std::unique_ptr<MetricsServer> metrics_;  // last: its scrapes use everything above
};

}  // namespace tessera::agent
