// A share's quality-of-service class, as Kubernetes derives a pod's from its requests and limits
// (docs/resource-model.md). Pure: one rule for the agent, the CLI and the metrics.
//
//   best-effort  no cores request on some GPU: it runs only in time the other shares leave idle
//   guaranteed   every request equals its limit (memory and cores), and cores are requested
//   burstable    everything else: a limit above a request, which the share may borrow up to
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/share_region.h"

namespace tessera {

// Ordered from the class reclaimed first to the one reclaimed last.
enum class QosClass : uint8_t { kBestEffort, kBurstable, kGuaranteed };

constexpr std::string_view qos_class_name(QosClass qos) {
  switch (qos) {
    case QosClass::kBestEffort:
      return "best-effort";
    case QosClass::kBurstable:
      return "burstable";
    case QosClass::kGuaranteed:
      return "guaranteed";
  }
  return "unknown";
}

// One GPU of a share. A memory request of kUnlimited (a page that names none) is the limit.
constexpr QosClass device_qos_class(uint64_t memory_request, uint64_t memory_limit,
                                    uint32_t cores_request, uint32_t cores_limit) {
  if (cores_request == 0) return QosClass::kBestEffort;
  const uint64_t guaranteed_memory = memory_request < memory_limit ? memory_request : memory_limit;
  if (guaranteed_memory == memory_limit &&
      share::effective_cores_limit(cores_request, cores_limit) == cores_request)
    return QosClass::kGuaranteed;
  return QosClass::kBurstable;
}

// A share is of the lowest class of its GPUs, as a pod is of the lowest of its containers.
constexpr QosClass lower_qos_class(QosClass a, QosClass b) {
  return a < b ? a : b;
}

static_assert(device_qos_class(4ull << 30, 4ull << 30, 0, 100) == QosClass::kBestEffort);
static_assert(device_qos_class(4ull << 30, 4ull << 30, 60, 60) == QosClass::kGuaranteed);
static_assert(device_qos_class(4ull << 30, 4ull << 30, 60, 0) == QosClass::kGuaranteed);
static_assert(device_qos_class(2ull << 30, 8ull << 30, 60, 60) == QosClass::kBurstable);
static_assert(device_qos_class(4ull << 30, 4ull << 30, 30, 60) == QosClass::kBurstable);
static_assert(device_qos_class(share::kUnlimited, 4ull << 30, 30, 30) == QosClass::kGuaranteed);

}  // namespace tessera
