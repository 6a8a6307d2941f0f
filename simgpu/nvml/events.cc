// Event sets. The only event the simulator produces is the one health checkers wait for: a device
// marked unhealthy (fault injection) raises XID 79, "GPU has fallen off the bus", once per fault.
#include <time.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

#include "nvml_internal.h"

struct nvmlEventSet_st {
  struct Registration {
    int device;
    unsigned long long types;
    uint64_t delivered_faults;  // the device's fault counter as far as this set has reported it
  };
  std::mutex mutex;
  std::vector<Registration> registrations;
};

namespace simgpu::nvml {
namespace {

constexpr unsigned long long kXidFallenOffTheBus = 79;
constexpr unsigned int kNoMigInstance = 0xFFFFFFFF;
constexpr long kPollIntervalNs = 5'000'000;

// What a Hopper data-centre GPU reports; only XID events are ever raised.
constexpr unsigned long long kSupportedEventTypes =
    nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState |
    nvmlEventTypeXidCriticalError;

// Delivers at most one pending XID event; false when there is none.
bool take_event(nvmlEventSet_st& set, Simulator& sim, nvmlEventData_t& data) {
  std::lock_guard<std::mutex> lock(set.mutex);
  for (nvmlEventSet_st::Registration& registration : set.registrations) {
    if ((registration.types & nvmlEventTypeXidCriticalError) == 0) continue;
    if (sim.fault_events(registration.device) <= registration.delivered_faults) continue;
    ++registration.delivered_faults;
    data.device = handle_for(registration.device);
    data.eventType = nvmlEventTypeXidCriticalError;
    data.eventData = kXidFallenOffTheBus;
    data.gpuInstanceId = kNoMigInstance;
    data.computeInstanceId = kNoMigInstance;
    return true;
  }
  return false;
}

nvmlReturn_t wait_for_event(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  Simulator* sim = initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const uint64_t deadline = now_ns() + static_cast<uint64_t>(timeout_ms) * 1'000'000;
  for (;;) {
    if (take_event(*set, *sim, *data)) return NVML_SUCCESS;
    const uint64_t now = now_ns();
    if (now >= deadline) return NVML_ERROR_TIMEOUT;
    // Faults are injected from other processes and leave no wakeup to block on: poll.
    const uint64_t remaining = deadline - now;
    timespec pause{0, remaining < static_cast<uint64_t>(kPollIntervalNs)
                          ? static_cast<long>(remaining)
                          : kPollIntervalNs};
    nanosleep(&pause, nullptr);
  }
}

}  // namespace
}  // namespace simgpu::nvml

using simgpu::nvml::Device;

extern "C" {

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (simgpu::nvml::initialised_simulator() == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = new (std::nothrow) nvmlEventSet_st;
  return *set != nullptr ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes) {
  Device dev;
  if (nvmlReturn_t result = simgpu::nvml::resolve_gpu(device, dev); result != NVML_SUCCESS) {
    return result;
  }
  if (eventTypes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *eventTypes = simgpu::nvml::kSupportedEventTypes;
  return NVML_SUCCESS;
}

// A device that is already unhealthy when registered has one event pending, so a health checker
// that starts after the fault still learns of it.
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
  Device dev;
  if (nvmlReturn_t result = simgpu::nvml::resolve_gpu(device, dev); result != NVML_SUCCESS) {
    return result;
  }
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if ((eventTypes & ~simgpu::nvml::kSupportedEventTypes) != 0) return NVML_ERROR_NOT_SUPPORTED;
  const uint64_t faults = dev.sim->fault_events(dev.index);
  const uint64_t already_reported =
      dev.sim->healthy(dev.index) ? faults : faults - std::min<uint64_t>(faults, 1);
  std::lock_guard<std::mutex> lock(set->mutex);
  for (nvmlEventSet_st::Registration& registration : set->registrations) {
    if (registration.device == dev.index) {
      registration.types |= eventTypes;
      return NVML_SUCCESS;
    }
  }
  set->registrations.push_back({dev.index, eventTypes, already_reported});
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                 unsigned int timeoutms) {
  return simgpu::nvml::wait_for_event(set, data, timeoutms);
}

// The v1 caller's struct ends after eventData: write only those fields.
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  nvmlEventData_t event{};
  const nvmlReturn_t result =
      simgpu::nvml::wait_for_event(set, data != nullptr ? &event : nullptr, timeoutms);
  if (result == NVML_SUCCESS) {
    data->device = event.device;
    data->eventType = event.eventType;
    data->eventData = event.eventData;
  }
  return result;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (simgpu::nvml::initialised_simulator() == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  return NVML_SUCCESS;
}

}  // extern "C"
