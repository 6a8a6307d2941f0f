// DeviceMonitor keeps the node's published GPUs and their health current: it re-lists the GPUs
// (NVML inventory) every inventory_interval and hands a changed list to on_devices (the agent
// republishes ResourceSlices), and it waits on NVML XID events to mark devices Unhealthy on the
// health board. NVML is loaded with dlopen, so the agent starts (and start() says why it cannot
// monitor) on a node without a driver.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "devices/device_health.h"
#include "tessera/gpu_info.h"

namespace tessera::agent {

struct DeviceMonitorOptions {
  std::string pool;                                     // the node name
  std::chrono::milliseconds inventory_interval{30000};  // re-list GPUs this often
  std::chrono::milliseconds event_wait{1000};  // NVML event wait per loop turn; bounds stop()
  // The inventory source. Tests swap it to change the device list.
  std::function<std::string(std::vector<GpuInfo>&)> list = [](std::vector<GpuInfo>& gpus) {
    Result<std::vector<GpuInfo>> listed = tessera::list_gpus();
    gpus = listed.is_ok() ? std::move(listed).value() : std::vector<GpuInfo>{};
    return listed.status().message();
  };
  // The NVML library for events (tests name a missing one).
  std::string nvml_library = "libnvidia-ml.so.1";
};

// Where health reports go. DeviceHealthBoard lives in the kubelet plugin's library (gRPC), which
// tessera_agent_core does not link: the monitor writes through these two functions.
struct DeviceHealthSink {
  std::function<void(const DeviceHealthReport&)> set;
  std::function<void(const std::string& pool, const std::string& device)> remove;
};

// False for the XIDs the NVIDIA device plugin ignores as application errors (13, 31, 43, 45, 68,
// 109): the GPU is still usable. Every other XID marks the device Unhealthy.
bool xid_marks_unhealthy(unsigned long long xid);

class DeviceMonitor {
 public:
  // on_devices(gpus) is called from start() and then from the monitor thread whenever the list
  // differs from the last one delivered; an error is retried on the next turn (every event_wait)
  // until it succeeds, always with the newest list.
  using DevicesCallback = std::function<std::string(const std::vector<GpuInfo>&)>;

  DeviceMonitor(DeviceMonitorOptions options, DeviceHealthSink health, DevicesCallback on_devices);
  // Convenience for the agent, which links the board's library.
  DeviceMonitor(DeviceMonitorOptions options, DeviceHealthBoard& board, DevicesCallback on_devices)
      : DeviceMonitor(std::move(options),
                      DeviceHealthSink{[&board](const DeviceHealthReport& r) { board.set(r); },
                                       [&board](const std::string& pool, const std::string& name) {
                                         board.remove(pool, name);
                                       }},
                      std::move(on_devices)) {}
  ~DeviceMonitor();
  DeviceMonitor(const DeviceMonitor&) = delete;
  DeviceMonitor& operator=(const DeviceMonitor&) = delete;

  // Loads NVML, lists the GPUs, reports them all Healthy, calls on_devices (an error there is
  // logged and retried by the thread) and starts the thread. Returns "" or why nothing started
  // (NVML missing, the first listing failed).
  std::string start();
  // Stops the thread (within about event_wait) and releases NVML. Safe to call twice.
  void stop();

  // The last successful listing.
  std::vector<GpuInfo> devices() const;
  // Whether NVML events are watched (false: inventory polling only).
  bool events_supported() const;

 private:
  struct Nvml;  // the dlopen'ed entry points and the event set (monitor thread only after start)

  void run();
  void inventory_turn();
  void deliver();
  void apply_inventory(const std::vector<GpuInfo>& gpus);
  void register_events();
  void handle_event_turn();
  void report(const std::string& name, DeviceHealthState state);
  void log_once(std::string& last, const std::string& message);

  DeviceMonitorOptions options_;
  DeviceHealthSink health_;
  DevicesCallback on_devices_;
  std::unique_ptr<Nvml> nvml_;

  mutable std::mutex mutex_;  // guards listed_, events_supported_, stopping_
  std::condition_variable wake_;
  std::vector<GpuInfo> listed_;
  bool events_supported_ = false;
  bool stopping_ = false;
  std::thread thread_;

  // Monitor thread only (and start() before the thread exists).
  bool pending_ = false;                   // listed_ not yet delivered to on_devices
  std::set<std::string> unhealthy_uuids_;  // stays Unhealthy while listed
  std::chrono::steady_clock::time_point next_inventory_;
  std::string last_list_error_, last_deliver_error_, last_wait_error_;
  bool logged_no_events_ = false;
};

}  // namespace tessera::agent
