// The shorthand a container may put in `resources.limits` (and `requests`) to ask for a GPU share,
// and the ResourceClaimTemplate each distinct request becomes. Pure.
//
//   tessera.dev/gpu: "1"           shares (devices), default 1 when memory or cores are given
//   tessera.dev/gpu-memory: 8Gi    capacity `memory` per share (a byte quantity)
//   tessera.dev/gpu-cores: "30"    capacity `cores` per share (percent of the SMs, 1..100)
// and, only where the namespace opted in (HAMi's names; elsewhere they belong to NVIDIA's device
// plugin and are left alone):
//   nvidia.com/gpu: "1"  nvidia.com/gpumem: "3000" (MiB)  nvidia.com/gpumem-percentage: "100"
//   nvidia.com/gpucores: "30" (unset or 0: no cores request, a best-effort share that gets the
//   time the other shares leave idle; docs/resource-model.md)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

namespace tessera::webhook {

inline constexpr char kTesseraDeviceClass[] = "vgpu.tessera.dev";
inline constexpr char kTemplateNamePrefix[] = "tessera-vgpu-";
inline constexpr char kManagedByLabel[] = "app.kubernetes.io/managed-by";
inline constexpr char kManagedByValue[] = "tessera-webhook";
// resource.k8s.io/v1 allows at most 32 results (devices) per claim.
inline constexpr uint32_t kMaxSharesPerRequest = 32;

struct ShareRequest {
  uint32_t count = 1;
  std::optional<uint64_t> memory_bytes;  // none: the device's default (all of its memory)
  std::optional<uint32_t> cores;         // none: the device's default (all of its time)

  bool operator==(const ShareRequest&) const = default;

  // Deterministic, readable and unique per request: "tessera-vgpu-1-m8gi-c30".
  std::string template_name() const;
  // The ResourceClaimTemplate (resource.k8s.io/v1) in `namespace_name`.
  nlohmann::json claim_template(const std::string& namespace_name) const;
};

// A container's shorthand: the request and the keys it was read from (to remove).
struct Shorthand {
  ShareRequest request;
  std::vector<std::string> limit_keys;
  std::vector<std::string> request_keys;
};

// Reads `container.resources`. nullopt: no shorthand. An error (kInvalidArgument) names the
// container, the key, the value and what is expected.
Result<std::optional<Shorthand>> read_shorthand(const nlohmann::json& container, bool hami_names);

}  // namespace tessera::webhook
