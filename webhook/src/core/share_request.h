// The shorthand a container may put in `resources.limits` (and `requests`) to ask for a GPU share,
// and the ResourceClaimTemplate each distinct request becomes. Pure.
//
//   tessera.dev/gpu: "1"           shares (devices), default 1 when memory or cores are given
//   tessera.dev/gpu-memory: 8Gi    capacity `memory` per share (a byte quantity)
//   tessera.dev/gpu-cores: "30"    capacity `cores` per share (percent of the SMs, 1..100)
//   tessera.dev/mig-3g.71gb: "1"   N MIG instances of that profile (class mig.vgpu.tessera.dev),
//                                  instead of tessera.dev/gpu: each instance whole, or a share
//                                  inside one when gpu-memory or gpu-cores is given too
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
// The chart's MIG class (charts/tessera/templates/deviceclasses.yaml): MIG instances only.
inline constexpr char kMigDeviceClass[] = "mig.vgpu.tessera.dev";
// The shorthand key for MIG instances of one profile: "tessera.dev/mig-<profile>".
inline constexpr char kMigKeyPrefix[] = "tessera.dev/mig-";
inline constexpr char kTemplateNamePrefix[] = "tessera-vgpu-";
inline constexpr char kManagedByLabel[] = "app.kubernetes.io/managed-by";
inline constexpr char kManagedByValue[] = "tessera-webhook";
// resource.k8s.io/v1 allows at most 32 results (devices) per claim.
inline constexpr uint32_t kMaxSharesPerRequest = 32;

struct ShareRequest {
  uint32_t count = 1;
  std::optional<uint64_t> memory_bytes;  // none: the device's default (all of its memory)
  std::optional<uint32_t> cores;         // none: the device's default (all of its time)
  // A MIG profile ("3g.71gb"): devices of the MIG class with that `profile` attribute. Without
  // memory and cores, each is taken whole (all of its memory and cores 100).
  std::optional<std::string> mig_profile;

  bool operator==(const ShareRequest&) const = default;

  // Deterministic, readable and unique per request: "tessera-vgpu-1-m8gi-c30",
  // "tessera-vgpu-1-mig3g71gb" (the profile without its dot).
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

// Whether `profile` is a MIG profile name as NVIDIA writes it: "<compute slices>g.<memory>gb" with
// 1..7 compute slices and a whole number of GB ("3g.71gb", "1g.18gb"). Media-extension variants
// ("1g.18gb+me") cannot be written in a resource name; a claim asks for them by attribute.
bool is_mig_profile(const std::string& profile);

// Reads `container.resources`. nullopt: no shorthand. An error (kInvalidArgument) names the
// container, the key, the value and what is expected.
Result<std::optional<Shorthand>> read_shorthand(const nlohmann::json& container, bool hami_names);

}  // namespace tessera::webhook
