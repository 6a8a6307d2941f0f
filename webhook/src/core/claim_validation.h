// The pure core of `/validate`: ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1)
// whose opaque configuration is for Tessera (driver vgpu.tessera.dev) are checked with the node
// agent's own VgpuConfig decoder, so a config kubelet would refuse at prepare time is refused at
// `kubectl apply`, with the agent's message. Pure.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/admission_review.h"
#include "tessera/status.h"

namespace tessera::webhook {

// The DeviceClasses a claim's requests name, read for their bounds (docs/resource-model.md, "Who
// sets what"). Implemented over the API server by kube/api_device_class_lookup.h.
class DeviceClassLookup {
 public:
  virtual ~DeviceClassLookup() = default;
  // The class's spec.config list (an empty array when it has none), kNotFound when there is no
  // such class, or another error when it cannot be read.
  virtual Result<nlohmann::json> class_configs(const std::string& name) = 0;
};

// `request` is a review of a ResourceClaim or a ResourceClaimTemplate; any other kind is allowed
// with a warning (the webhook configuration should not send it). With `classes`, a claim whose
// config goes past its DeviceClass's bounds is refused, naming field, value and bound; a class
// that cannot be read refuses the claim (500), one that does not exist bounds nothing (the agent
// holds the bounds again at prepare, when it does).
AdmissionResponse validate_claim(const AdmissionRequest& request,
                                 DeviceClassLookup* classes = nullptr);

// The whole path for a request body. Not an AdmissionReview: an error (HTTP 400).
Result<nlohmann::json> validate(std::string_view body, DeviceClassLookup* classes = nullptr);

}  // namespace tessera::webhook
