// The pure core of `/validate`: ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1)
// whose opaque configuration is for Tessera (driver vgpu.tessera.dev) are checked with the node
// agent's own VgpuConfig decoder, so a config kubelet would refuse at prepare time is refused at
// `kubectl apply`, with the agent's message. Pure.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/admission_review.h"
#include "tessera/status.h"

namespace tessera::webhook {

// `request` is a review of a ResourceClaim or a ResourceClaimTemplate; any other kind is allowed
// with a warning (the webhook configuration should not send it).
AdmissionResponse validate_claim(const AdmissionRequest& request);

// The whole path for a request body. Not an AdmissionReview: an error (HTTP 400).
Result<nlohmann::json> validate(std::string_view body);

}  // namespace tessera::webhook
