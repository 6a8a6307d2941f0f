// The pods a ResourceClaim is reserved for now, as the agent re-reads them after prepare: kubelet
// calls NodePrepareResources only for the first pod of a shared claim on the node, so a later
// pod's reservation is learned from the API server (ShareManager::refresh_claim_pods), not from
// kubelet. The claim is the API server's, parsed defensively: a field of the wrong shape is an
// error naming it, never a guess.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/share_spec.h"
#include "tessera/status.h"

namespace tessera::agent {

// What a GET of the claim says about it.
struct ClaimPods {
  std::string uid;           // metadata.uid
  std::vector<PodRef> pods;  // status.reservedFor's pods, in API order
};

// `claim` as GET returns it: metadata.uid (a non-empty string) and the entries of
// status.reservedFor (ResourceClaimConsumerReference: resource, name, uid required, apiGroup
// optional) whose resource is "pods" of the core group. Consumers of other resources are skipped;
// a claim without status or reservedFor has no pods. kInvalidArgument naming the field otherwise
// ("status.reservedFor[1].uid: not a non-empty string").
Result<ClaimPods> parse_claim_pods(const nlohmann::json& claim);
Result<ClaimPods> parse_claim_pods(const std::string& claim_json);

}  // namespace tessera::agent
