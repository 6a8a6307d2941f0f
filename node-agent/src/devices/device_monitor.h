// DeviceMonitor keeps the node's published GPUs and their health current. Every turn
// (poll_interval, on a PeriodicLoop) it collects the NVML XID events that arrived (marking devices
// Unhealthy on the health board, with the XID and why), re-lists the GPUs (NVML inventory) once
// inventory_interval has passed and hands a changed list to on_devices (the agent republishes
// ResourceSlices), and retries a failed delivery. A device that turns Unhealthy (or gets another
// fault) is delivered again too, after its report is on the board: the agent republishes its slices
// with the device's taint. A device stays Unhealthy until it leaves the inventory (a GPU reset) and
// comes back Healthy. NVML is loaded with dlopen, so the agent starts (and start() says why it
// cannot monitor) on a node without a driver.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "clock/periodic_loop.h"
#include "devices/device_health.h"
#include "tessera/gpu_info.h"
#include "tessera/status.h"
#include "tessera/thread_annotations.h"

namespace tessera::agent {

struct DeviceMonitorOptions {
  std::string pool;                                     // the node name
  std::chrono::milliseconds inventory_interval{30000};  // re-list GPUs this often
  // One turn: collect the XID events NVML holds (never blocking in NVML, so stop() is prompt),
  // re-list when due, retry a failed delivery. Bounds how late an XID reaches the board.
  std::chrono::milliseconds poll_interval{1000};
  // The inventory source. Tests swap it to change the device list.
  std::function<std::string(std::vector<GpuInfo>&)> list = [](std::vector<GpuInfo>& gpus) {
    Result<std::vector<GpuInfo>> listed = tessera::list_gpus();
    gpus = listed.is_ok() ? std::move(listed).value() : std::vector<GpuInfo>{};
    return listed.status().message();
  };
  // The NVML library for events (tests name a missing one).
  std::string nvml_library = "libnvidia-ml.so.1";
  // The devices `gpus` are published as, each of which gets a health report: MIG devices too
  // where the agent publishes a GPU's MIG instances (an XID NVML blames on one instance then
  // marks that device only: devices_hit_by). Empty: each GPU whole (node_devices).
  std::function<std::vector<NodeDevice>(const std::vector<GpuInfo>&)> published;
};

// Where health reports go: the monitor writes through these two functions, so tests can record
// reports without a DeviceHealthBoard.
struct DeviceHealthSink {
  std::function<void(const DeviceHealthReport&)> set;
  std::function<void(const std::string& pool, const std::string& device)> remove;
};

// False for the XIDs the NVIDIA device plugin ignores as application errors (13, 31, 43, 45, 68,
// 109): the GPU is still usable. Every other XID marks the device Unhealthy.
bool xid_marks_unhealthy(unsigned long long xid);
// "XID 79: GPU has fallen off the bus" (NVIDIA's name for the XIDs we know; "XID <n>" otherwise).
std::string describe_xid(unsigned long long xid);

class DeviceMonitor {
 public:
  // on_devices(gpus) is called from start() and then from the monitor's loop whenever the list
  // differs from the last one delivered; an error is retried on the next turn (every
  // poll_interval) until it succeeds, always with the newest list.
  using DevicesCallback = std::function<Status(const std::vector<GpuInfo>&)>;

  // `clock` paces the turns and the inventory (tests pass a SimulatedClock); it outlives the
  // monitor.
  DeviceMonitor(DeviceMonitorOptions options, DeviceHealthSink health, DevicesCallback on_devices,
                Clock& clock = real_clock());
  // Convenience for the agent: reports go to `board`.
  DeviceMonitor(DeviceMonitorOptions options, DeviceHealthBoard& board, DevicesCallback on_devices,
                Clock& clock = real_clock())
      : DeviceMonitor(std::move(options),
                      DeviceHealthSink{[&board](const DeviceHealthReport& r) { board.set(r); },
                                       [&board](const std::string& pool, const std::string& name) {
                                         board.remove(pool, name);
                                       }},
                      std::move(on_devices), clock) {}
  ~DeviceMonitor();
  DeviceMonitor(const DeviceMonitor&) = delete;
  DeviceMonitor& operator=(const DeviceMonitor&) = delete;

  // Loads NVML, lists the GPUs, reports them all Healthy, calls on_devices (an error there is
  // logged and retried by the loop) and starts the loop. Returns ok or why nothing started
  // (NVML missing: unavailable; the first listing failed: unavailable; already running).
  Status start() TESSERA_EXCLUDES(mutex_);
  // Stops the loop (waiting only for a turn in progress) and releases NVML. Safe to call twice.
  void stop();

  // The last successful listing.
  std::vector<GpuInfo> devices() const TESSERA_EXCLUDES(mutex_);
  // Whether NVML events are watched (false: inventory polling only).
  bool events_supported() const TESSERA_EXCLUDES(mutex_);

  // Turns completed since start() (0 when stopped), and a bounded wait for a count of them: tests
  // advance their clock by poll_interval and wait for the turn instead of sleeping.
  std::uint64_t turns() const;
  bool wait_for_turns(std::uint64_t count,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  struct Nvml;  // the NVML session and the event set (the loop's thread after start)

  void turn() TESSERA_EXCLUDES(mutex_);
  void inventory_turn() TESSERA_EXCLUDES(mutex_);
  void deliver() TESSERA_EXCLUDES(mutex_);
  void apply_inventory(const std::vector<GpuInfo>& gpus) TESSERA_EXCLUDES(mutex_);
  void register_events() TESSERA_EXCLUDES(mutex_);
  void collect_events();
  // Why a device is Unhealthy: the health report's message and XID (0: not an XID).
  struct Fault {
    std::string message;
    unsigned long long xid = 0;
    bool operator==(const Fault&) const = default;
  };
  void report(const std::string& name, DeviceHealthState state, const Fault& fault);
  void report(const std::string& name, DeviceHealthState state) { report(name, state, Fault{}); }
  // Marks the device Unhealthy for `fault`; a new or different fault is delivered again.
  void mark_unhealthy(const std::string& name, const std::string& uuid, Fault fault);
  void log_once(std::string& last, const std::string& message);
  std::vector<NodeDevice> published_devices(const std::vector<GpuInfo>& gpus) const;

  DeviceMonitorOptions options_;
  DeviceHealthSink health_;
  DevicesCallback on_devices_;
  Clock& clock_;
  std::unique_ptr<Nvml> nvml_;

  mutable Mutex mutex_;  // devices() and events_supported() read these from any thread
  std::vector<GpuInfo> listed_ TESSERA_GUARDED_BY(mutex_);
  bool events_supported_ TESSERA_GUARDED_BY(mutex_) = false;

  // The loop's thread only (and start() before the loop exists).
  bool pending_ = false;                 // listed_ not yet delivered to on_devices
  std::map<std::string, Fault> faults_;  // by UUID: stays Unhealthy while listed
  Clock::time_point next_inventory_;
  std::string last_list_error_, last_deliver_error_, last_wait_error_;
  bool logged_no_events_ = false;

  std::unique_ptr<PeriodicLoop> loop_;  // last: its turns use everything above
};

}  // namespace tessera::agent
