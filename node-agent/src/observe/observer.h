// Builds the NodeObservation of a pass (node_observation.h): the one place the agent reads the
// node for its checks and its reports. Per pass: the checkpoint copied once, each share folder's
// pages read once (tessera/share_folder/snapshot.h: pread copies), each GPU's processes, their
// utilisation and the GPU's figures asked of the one NVML session (GpuProcessSource), and /proc
// walked once (ProcessMap: a known pid costs one stat read, a new one is read in full).
//
// Not here, by design: the GPU-time meter's 20 ms control loop (usage/gpu_time_meter.h) reads
// NVML's utilisation and the pages' owner words fifty times a second to pace kernel launches, and
// the device monitor (devices/device_monitor.h) waits on NVML's events to see a GPU fail within
// its own loop; a 1 s observation would be too late for either.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "devices/device_health.h"
#include "model/node_device.h"
#include "observe/node_observation.h"
#include "observe/process_map.h"
#include "share/checkpoint.h"
#include "tessera/thread_annotations.h"
#include "usage/gpu_processes.h"

namespace tessera::agent {

struct ObserverOptions {
  std::string shares_dir;           // "<state>/shares"
  std::string proc_root = "/proc";  // the host's (hostPID)
  // The node's claims (checkpoint.json). Null: none, unless `shares` is given.
  std::function<Checkpoint()> checkpoint;
  // The prepared shares when there is no checkpoint to derive them from (the checks' tests).
  // Null: checked_shares(checkpoint, shares_dir).
  std::function<std::vector<CheckedShare>()> shares;
  std::function<std::vector<NodeDevice>()> devices;  // the published GPUs; null: none
  std::function<DeviceHealthSnapshot()> health;      // null: every GPU's health unknown
  // The wall time in ms (the local API's stamps); null: the system clock.
  std::function<std::int64_t()> unix_ms;
};

class Observer {
 public:
  // `gpus` (null: no NVML, no GPU is observed) and `clock` outlive the observer.
  Observer(ObserverOptions options, GpuProcessSource* gpus, Clock& clock = real_clock());
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // One pass: a new observation. `checkpoint` given: the claims as the caller just read them
  // (not read again). Passes run one at a time.
  std::shared_ptr<const NodeObservation> observe(const Checkpoint* checkpoint = nullptr)
      TESSERA_EXCLUDES(mutex_);

  // The node's claims now (ObserverOptions::checkpoint; empty without one).
  Checkpoint checkpoint() const;

  const ObserverOptions& options() const { return options_; }

 private:
  void observe_gpus(NodeObservation& observation) TESSERA_REQUIRES(mutex_);

  const ObserverOptions options_;
  GpuProcessSource* const gpus_;
  Clock& clock_;
  Mutex mutex_;  // one pass at a time
  ProcessMap processes_ TESSERA_GUARDED_BY(mutex_);
  std::set<int> on_gpus_ TESSERA_GUARDED_BY(mutex_);  // host pids NVML listed at the last pass
};

}  // namespace tessera::agent
