// The pure core of `/mutate`: an AdmissionReview for a Pod in, the AdmissionReview answer out, plus
// the ResourceClaimTemplates the patch refers to (the server creates them unless dryRun).
//
// - Shorthand GPU requests (core/share_request.h) become one pod claim per container, from a
//   ResourceClaimTemplate per distinct request, referenced from `spec.resourceClaims` and the
//   container's `resources.claims`; the shorthand is removed from limits and requests. Init and
//   sidecar containers are treated as any other container: their own share, or none.
// - A container with a Tessera share (from shorthand, a claim whose device class is a Tessera
//   one, or the default class's extended resource name) is checked against the policy: it must not
//   set LD_PRELOAD, TESSERA_* or CUDA_DEVICE_*_LIMIT, mount over /etc/ld.so.preload or the share
//   folder, or run privileged. Each check is `deny` or `warn`.
// - Nothing the agent's CDI spec sets (environment, mounts) is ever added, so a pod that already
//   uses Tessera claims is left as it is, and mutating a mutated pod changes nothing.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/admission_review.h"
#include "tessera/status.h"

namespace tessera::webhook {

enum class PolicyAction { kDeny, kWarn };

struct Policy {
  PolicyAction environment = PolicyAction::kDeny;  // LD_PRELOAD, TESSERA_*, CUDA_DEVICE_*_LIMIT
  PolicyAction mounts = PolicyAction::kDeny;       // over /etc/ld.so.preload or the share folder
  // Privileged GPU pods have real uses (monitoring, debugging); a warning by default.
  PolicyAction privileged = PolicyAction::kWarn;
};

struct MutateConfig {
  Policy policy;
  bool hami_names = false;                      // the namespace opted in to nvidia.com/gpu* names
  std::string share_root = "/var/run/tessera";  // where CDI mounts shares and MPS pipes
  std::string preload_file = "/etc/ld.so.preload";
  // The default DeviceClass's extendedResourceName (empty: none). A container that asks for it
  // gets a Tessera share from the scheduler (DRAExtendedResource), so it is policed as one.
  std::string extended_resource_name;
};

// What a pod claim entry refers to.
enum class ClaimSource { kResourceClaim, kResourceClaimTemplate };

// Tells whether a claim (or a template's claims) asks for Tessera devices. The server's
// implementation reads the API, cached; an error is the stated failure mode's trigger: the claim is
// then checked as a Tessera claim, and a warning says so.
class ClaimLookup {
 public:
  virtual ~ClaimLookup() = default;
  virtual Result<bool> is_tessera(const std::string& namespace_name, ClaimSource source,
                                  const std::string& name) = 0;
};

struct PodMutation {
  AdmissionResponse response;
  std::vector<nlohmann::json> templates;  // ResourceClaimTemplates the patch refers to
};

// `request` is a Pod review read by read_admission_request. Never fails: a bad pod is a refusal.
PodMutation mutate_pod(const AdmissionRequest& request, const MutateConfig& config,
                       ClaimLookup& claims);

// The whole path for a request body: parse, mutate, answer. The server runs this in two halves
// (so it can create the templates in between); tests and the fuzzer run it whole.
struct MutateResult {
  nlohmann::json review;  // the AdmissionReview answer
  std::vector<nlohmann::json> templates;
  bool dry_run = false;
  std::string namespace_name;
};
Result<MutateResult> mutate(std::string_view body, const MutateConfig& config, ClaimLookup& claims);

// Replaces an answer by a refusal (a template could not be created): same uid and version.
void refuse(nlohmann::json& review, int32_t code, const std::string& reason,
            const std::string& message);

}  // namespace tessera::webhook
