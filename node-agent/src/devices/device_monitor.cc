#include "devices/device_monitor.h"

#include <algorithm>
#include <ctime>

#include "devices/resource_slices.h"
#include "tessera/log.h"
#include "tessera/nvml.h"

namespace tessera::agent {
namespace {

// Events taken per turn: a device raising XIDs in a storm cannot keep the turn from the inventory.
constexpr int kMaxEventsPerTurn = 64;

// Application errors (docs.nvidia.com/deploy/xid-errors): the GPU itself is fine. The same list
// as the NVIDIA device plugin's ignoredXids (internal/rm/health.go).
constexpr unsigned long long kApplicationXids[] = {
    13,   // graphics engine exception
    31,   // GPU memory page fault
    43,   // GPU stopped processing
    45,   // preemptive cleanup, due to previous errors
    68,   // video processor exception
    109,  // context switch timeout
};

// NVIDIA's names (docs.nvidia.com/deploy/xid-errors) of the XIDs that mark a GPU Unhealthy most
// often; for the health message only.
struct XidName {
  unsigned long long xid;
  const char* name;
};
constexpr XidName kXidNames[] = {
    {48, "double-bit ECC error"},
    {61, "internal micro-controller breakpoint/warning"},
    {62, "internal micro-controller halt"},
    {63, "ECC page retirement or row remapping recording event"},
    {64, "ECC page retirement or row remapper recording failure"},
    {74, "NVLink error"},
    {79, "GPU has fallen off the bus"},
    {92, "high single-bit ECC error rate"},
    {94, "contained ECC error"},
    {95, "uncontained ECC error"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
};

void log_warning(const std::string& message) {
  log::warn(message, {{"component", "device-monitor"}});
}

std::int64_t now_unix_s() {
  return static_cast<std::int64_t>(std::time(nullptr));
}

}  // namespace

bool xid_marks_unhealthy(unsigned long long xid) {
  return std::find(std::begin(kApplicationXids), std::end(kApplicationXids), xid) ==
         std::end(kApplicationXids);
}

std::string describe_xid(unsigned long long xid) {
  const std::string number = "XID " + std::to_string(xid);
  for (const XidName& known : kXidNames)
    if (known.xid == xid) return number + ": " + known.name;
  return number;
}

struct DeviceMonitor::Nvml {
  explicit Nvml(nvml::Session opened) : session(std::move(opened)) {}

  nvml::Session session;
  // Declared after the session: freed before NVML shuts down.
  nvml::EventSet set;
  std::map<nvmlDevice_t, std::string> uuid_of;  // the devices registered in `set`

  void free_set() {
    set.reset();
    uuid_of.clear();
  }
};

DeviceMonitor::DeviceMonitor(DeviceMonitorOptions options, DeviceHealthSink health,
                             DevicesCallback on_devices, Clock& clock)
    : options_(std::move(options)),
      health_(std::move(health)),
      on_devices_(std::move(on_devices)),
      clock_(clock) {}

DeviceMonitor::~DeviceMonitor() {
  stop();
}

Status DeviceMonitor::start() {
  if (loop_) return failed_precondition("the device monitor is already running");
  // kUnavailable: no NVML here, or one that does not start.
  Result<nvml::Session> session = nvml::Session::open(options_.nvml_library);
  if (!session.is_ok()) return unavailable(session.status().message());
  nvml_ = std::make_unique<Nvml>(std::move(session).value());
  std::vector<GpuInfo> gpus;
  if (std::string error = options_.list(gpus); !error.empty()) {
    nvml_.reset();
    return unavailable("cannot list the GPUs: " + error);
  }
  apply_inventory(gpus);
  register_events();
  pending_ = true;
  deliver();  // an error is logged; the loop retries
  next_inventory_ = clock_.now() + options_.inventory_interval;
  auto loop = PeriodicLoop::start(clock_, options_.poll_interval, [this] { turn(); });
  if (!loop.is_ok()) {
    nvml_.reset();
    return loop.status().with_context("cannot start the device monitor");
  }
  loop_ = std::move(loop).value();
  return Status::ok();
}

void DeviceMonitor::stop() {
  loop_.reset();  // joins: the NVML below is no longer used
  nvml_.reset();  // frees the event set, then shuts NVML down
}

std::vector<GpuInfo> DeviceMonitor::devices() const {
  MutexLock lock(mutex_);
  return listed_;
}

bool DeviceMonitor::events_supported() const {
  MutexLock lock(mutex_);
  return events_supported_;
}

std::uint64_t DeviceMonitor::turns() const {
  return loop_ ? loop_->ticks() : 0;
}

bool DeviceMonitor::wait_for_turns(std::uint64_t count, std::chrono::milliseconds timeout) const {
  return loop_ && loop_->wait_for_ticks(count, timeout);
}

void DeviceMonitor::turn() {
  collect_events();
  if (clock_.now() >= next_inventory_) inventory_turn();
  if (pending_) deliver();
}

void DeviceMonitor::inventory_turn() {
  next_inventory_ = clock_.now() + options_.inventory_interval;
  std::vector<GpuInfo> gpus;
  if (std::string error = options_.list(gpus); !error.empty()) {
    // A lost GPU can fail the whole listing: keep the last list (and its health) rather than
    // unpublish every device.
    log_once(last_list_error_, "cannot list the GPUs, keeping the last list: " + error);
    return;
  }
  last_list_error_.clear();
  bool changed = false;
  {
    MutexLock lock(mutex_);
    changed = gpus != listed_;
  }
  if (changed) {
    apply_inventory(gpus);
    register_events();  // events come only for registered devices
    pending_ = true;
    return;
  }
  // Unchanged: refresh each report's time, so the board says when health was last checked.
  for (const NodeDevice& device : published_devices(gpus)) {
    const auto fault = faults_.find(device.uuid);
    if (fault == faults_.end())
      report(device.name, DeviceHealthState::kHealthy);
    else
      report(device.name, DeviceHealthState::kUnhealthy, fault->second);
  }
}

void DeviceMonitor::deliver() {
  std::vector<GpuInfo> gpus = devices();
  if (const Status delivered = on_devices_(gpus); !delivered.is_ok()) {
    log_once(last_deliver_error_, "cannot publish the GPUs (retrying): " + delivered.message());
    return;
  }
  if (!last_deliver_error_.empty()) log::info("published the GPUs after the earlier error");
  last_deliver_error_.clear();
  pending_ = false;
}

void DeviceMonitor::apply_inventory(const std::vector<GpuInfo>& gpus) {
  const std::vector<NodeDevice> before = published_devices(devices());
  const std::vector<NodeDevice> after = published_devices(gpus);
  auto same = [](const NodeDevice& a, const NodeDevice& b) {
    return a.name == b.name && a.uuid == b.uuid;
  };
  for (const NodeDevice& old : before) {
    if (std::any_of(after.begin(), after.end(), [&](const NodeDevice& d) { return same(d, old); }))
      continue;
    // Gone: forget its fault; a device that comes back (after a reset) starts Healthy.
    faults_.erase(old.uuid);
    if (std::none_of(after.begin(), after.end(),
                     [&](const NodeDevice& d) { return d.name == old.name; })) {
      health_.remove(options_.pool, old.name);
      log::warn("GPU is gone", {{"gpu", old.name}, {"uuid", old.uuid}});
    }
  }
  for (const NodeDevice& device : after) {
    if (std::any_of(before.begin(), before.end(),
                    [&](const NodeDevice& d) { return same(d, device); }))
      continue;
    faults_.erase(device.uuid);
    report(device.name, DeviceHealthState::kHealthy);
  }
  MutexLock lock(mutex_);
  listed_ = gpus;
}

void DeviceMonitor::register_events() {
  Nvml& nvml = *nvml_;
  nvml.free_set();  // NVML cannot unregister: a new set replaces the old one
  std::vector<std::string> unsupported;
  // Events are registered on the GPUs, never on a MIG instance's handle; an event names its
  // instance by GI id (collect_events).
  const std::vector<NodeDevice> published = published_devices(devices());
  const std::vector<NodeDevice> listed = physical_gpus(published);
  // kFailedPrecondition from an event call: this driver or GPU has no events (Not Supported).
  auto not_supported = [](const Status& status) {
    return status.code() == StatusCode::kFailedPrecondition;
  };
  // A library lacking part of the event API: polling only, as with events Not Supported.
  const Status has_events = nvml.session.library().require(nvml::kEventEntryPoints);
  Result<nvml::EventSet> created =
      has_events.is_ok() ? nvml.session.create_event_set() : Result<nvml::EventSet>(has_events);
  if (!created.is_ok()) {
    if (!not_supported(created.status())) log_warning(created.status().message());
    for (const NodeDevice& device : listed) unsupported.push_back(device.name);
  } else {
    nvml.set = std::move(created).value();
    for (const NodeDevice& device : listed) {
      // A device NVML cannot watch for another reason than "not supported" is not usable:
      // Unhealthy, as the NVIDIA device plugin does.
      auto failed = [&](const Status& status) {
        const std::string why = "NVML cannot watch the GPU: " + status.message();
        log::warn("GPU marked Unhealthy",
                  {{"gpu", device.name}, {"uuid", device.uuid}, {"reason", why}});
        for (const NodeDevice& hit : devices_hit_by(published, device.uuid, kNoGpuInstance))
          mark_unhealthy(hit.name, hit.uuid, Fault{why, 0});
      };
      Result<nvmlDevice_t> handle = nvml.session.device_by_uuid(device.uuid);
      if (!handle.is_ok()) {
        failed(handle.status());
        continue;
      }
      Result<unsigned long long> types = nvml.session.supported_event_types(*handle);
      if (types.is_ok() && (*types & nvmlEventTypeXidCriticalError) == 0) {
        unsupported.push_back(device.name);  // events, but not XIDs
        continue;
      }
      const Status registered =
          types.is_ok()
              ? nvml.session.register_events(*handle, nvmlEventTypeXidCriticalError, nvml.set)
              : types.status();
      if (not_supported(registered)) {
        unsupported.push_back(device.name);
      } else if (!registered.is_ok()) {
        failed(registered);
      } else {
        nvml.uuid_of[*handle] = device.uuid;
      }
    }
    if (nvml.uuid_of.empty()) nvml.free_set();
  }
  if (!unsupported.empty() && !logged_no_events_) {
    std::string names;
    for (const std::string& name : unsupported) names += (names.empty() ? "" : ", ") + name;
    log::warn(
        "NVML events are not supported: health follows the inventory only (Healthy while listed)",
        {{"gpus", names}});
    logged_no_events_ = true;
  }
  MutexLock lock(mutex_);
  events_supported_ = static_cast<bool>(nvml.set);
}

void DeviceMonitor::collect_events() {
  Nvml& nvml = *nvml_;
  if (!nvml.set) return;
  for (int taken = 0; taken < kMaxEventsPerTurn; ++taken) {
    // What is there, no waiting (none: the set is drained).
    Result<std::optional<nvmlEventData_t>> waited = nvml.session.wait_event(nvml.set, 0);
    if (!waited.is_ok()) {
      // Logged once; tried again next turn (the loop's pace: no busy loop on a lasting error).
      log_once(last_wait_error_, waited.status().message());
      return;
    }
    if (!*waited) return;
    last_wait_error_.clear();
    const nvmlEventData_t& event = **waited;
    if ((event.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    const auto registered = nvml.uuid_of.find(event.device);
    if (registered == nvml.uuid_of.end()) continue;
    const std::string& uuid = registered->second;
    // An event NVML blames on a MIG instance (its GI id) makes only that instance's device
    // Unhealthy; the GPU's other instances stay schedulable.
    const std::vector<NodeDevice> hit =
        devices_hit_by(published_devices(devices()), uuid, event.gpuInstanceId);
    const std::string xid = std::to_string(event.eventData);
    const std::string instance =
        event.gpuInstanceId == kNoGpuInstance ? "" : std::to_string(event.gpuInstanceId);
    if (hit.empty()) {
      if (!instance.empty())
        log::info("XID on a MIG instance the agent does not publish: ignored",
                  {{"uuid", uuid}, {"gpu_instance", instance}, {"xid", xid}});
      continue;
    }
    for (const NodeDevice& device : hit) {
      if (!xid_marks_unhealthy(event.eventData)) {
        log::info("XID of an application error: device still Healthy",
                  {{"gpu", device.name}, {"uuid", device.uuid}, {"xid", xid}});
        continue;
      }
      const std::string why = describe_xid(event.eventData);
      log::warn("GPU marked Unhealthy",
                {{"gpu", device.name}, {"uuid", device.uuid}, {"xid", xid}, {"reason", why}});
      mark_unhealthy(device.name, device.uuid, Fault{why, event.eventData});
    }
  }
}

void DeviceMonitor::mark_unhealthy(const std::string& name, const std::string& uuid, Fault fault) {
  const auto known = faults_.find(uuid);
  const bool changed = known == faults_.end() || !(known->second == fault);
  faults_[uuid] = fault;
  report(name, DeviceHealthState::kUnhealthy, fault);
  // The board has the report: the delivery republishes the slices with the device's taint.
  if (changed) pending_ = true;
}

void DeviceMonitor::report(const std::string& name, DeviceHealthState state, const Fault& fault) {
  DeviceHealthReport report;
  report.pool_name = options_.pool;
  report.device_name = name;
  report.state = state;
  report.last_updated_unix_s = now_unix_s();
  report.message = fault.message;
  report.xid = fault.xid;
  health_.set(report);
}

std::vector<NodeDevice> DeviceMonitor::published_devices(const std::vector<GpuInfo>& gpus) const {
  return options_.published ? options_.published(gpus) : node_devices(gpus);
}

void DeviceMonitor::log_once(std::string& last, const std::string& message) {
  if (message == last) return;
  last = message;
  log_warning(message);
}

}  // namespace tessera::agent
