// What kube-apiserver stores, and answers, for a create or update of the objects Tessera writes
// or reads: one implementation for every stand-in (the webhook's fake_kube.h, the agent's
// fake_api_server.h and claim fixtures). Compiled once, in tessera_test_apiserver
// (write_back.cc).
//
// Ported from kubernetes/kubernetes:
//   pkg/apis/resource/v1/defaults.go (commit 16913111deb1a4c4ff76f4ba7ffd9ebef397a303):
//     SetDefaults_ExactDeviceRequest and SetDefaults_DeviceSubRequest (allocationMode ExactCount,
//     then count 1), SetDefaults_DeviceTaint (timeAdded = now, whole seconds);
//   pkg/registry/resource/resourceclaim/strategy.go (commit
//   0021a864a65a17f2ad15b60545ef41fdfc30cc4c):
//     PrepareForCreate (a new claim's status is dropped), PrepareForUpdate (an update keeps the
//     stored status), the status strategy's PrepareForUpdate (a status update keeps the stored
//     spec and metadata: resourceVersion moves, generation does not), AllowUnconditionalUpdate
//     (true, the status strategy inherits it);
//   pkg/registry/resource/resourceslice/strategy.go (commit
//   a79f3c787d204848670cdf3e424107053ffcea3e): AllowUnconditionalUpdate (true); generation 1 on
//     create, +1 when the spec changes (the metadata generation; spec.pool.generation is the
//     driver's);
//   pkg/registry/core/node/strategy.go (commit 6785e9ed401a526cfb4ae33d498b088e27237ad1):
//     PrepareForCreate (every field may be set on create, status included, but spec.configSource
//     and status.config are dropped), PrepareForUpdate (the stored status kept),
//     AllowUnconditionalUpdate (true); no generation;
//   pkg/apis/core/v1/defaults.go (commit e34b0935e09e39e5e7fb74b8f6ad141107d3b90e):
//     SetDefaults_NodeStatus (allocatable = capacity when only capacity is set),
//     SetDefaults_ResourceList (quantities as stored);
//   staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go: every Quantity is stored in
//     canonical form (tessera/kube/quantity.h); staging/src/k8s.io/apiserver/pkg/registry/rest/
//     create.go, update.go (commit a37cbbda10a7ff8bba7050114662050cf8d53844: RESTUpdateStrategy's
//     AllowUnconditionalUpdate) and generic/registry/store.go (commit
//     f565665e0604a5aebe7116339096b961becf7e23, Store.Update): uid, creationTimestamp,
//     resourceVersion, managedFields are the server's; an update without a resourceVersion is
//     unconditional where the strategy allows it (else 422 "must be specified for an update"),
//     one with a resourceVersion other than the stored one is a 409 Conflict.
//   pkg/registry/core/secret/strategy.go and pkg/apis/core/validation (ValidateSecret,
//     ValidateSecretUpdate): no generation; stringData merged into data; type Opaque by default,
//     immutable after; a kubernetes.io/tls Secret must hold data[tls.crt] and data[tls.key];
//     AllowUnconditionalUpdate (true);
//   pkg/registry/admissionregistration/{mutating,validating}webhookconfiguration/strategy.go:
//     generation 1 on create, +1 when `webhooks` changes;
//   staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go (commit
//     00f7534700c03146d83def73a4cfa9aadd527faa, applyJSPatch): a PATCH is JSON Patch
//     (application/json-patch+json) or a merge patch (application/merge-patch+json), any other
//     media type 415; a patch that does not decode 400, one that does not apply (a failed
//     "test") 422; a patched resourceVersion other than the stored one 409.
// Go's encoder never omits a struct field that is not a pointer: a ResourceClaimTemplate's
// `spec.metadata` comes back `{}` when it was not sent, a Node's `spec` `{}`, its
// `status.daemonEndpoints` and `status.nodeInfo` with zero values.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

namespace tessera::testing::apiserver {

// What the server sets on an object it creates or replaces.
struct ServerFields {
  std::string uid;
  std::string resource_version;
  int64_t generation = 1;
  std::string timestamp;  // RFC 3339, UTC
  std::string manager;    // the request's fieldManager, else "unknown"
  std::string operation;  // "Update" for POST and PUT without server-side apply
};

// RFC 3339, UTC, whole seconds ("2026-12-02T00:00:00Z").
std::string rfc3339(std::time_t when);

// `posted` as kube-apiserver stores it: defaults, canonical quantities, empty structs, the
// server's metadata (`fields`; creationTimestamp kept from `stored` on an update). `stored` is
// the object being replaced (null on create): a ResourceClaim or a Node keeps its stored status,
// and the generation moves only when the spec changed. A quantity that does not parse is
// kInvalidArgument (the API server's 422), naming the field and the value.
Result<nlohmann::json> write_back(const nlohmann::json& posted, const nlohmann::json* stored,
                                  ServerFields fields);

// Who writes a status update: with a manager, the update's managedFields entry (operation Update,
// subresource "status") is the server's record of it, replacing that manager's earlier one.
struct StatusWriter {
  std::string manager;    // "kube-scheduler", "kubelet"; "" = no managedFields entry
  std::string timestamp;  // RFC 3339, UTC; "" = now
};

// A PUT of /status (the scheduler writing an allocation or status.reservedFor): the stored spec
// and metadata kept, the status taken from `posted` with canonical quantities, a new
// resourceVersion, the same generation.
Result<nlohmann::json> write_back_status(const nlohmann::json& posted, const nlohmann::json& stored,
                                         const std::string& resource_version,
                                         const StatusWriter& writer = {});

// The 409 of an update whose resourceVersion is not the stored one (an empty one is an
// unconditional update, which these resources allow). Ok when the update may go ahead. The
// message is NewConflict's; `resource` is the qualified resource it names
// ("resourceslices.resource.k8s.io"), or "" to name only the object.
Status check_resource_version(const nlohmann::json& posted, const nlohmann::json& stored,
                              const std::string& name, const std::string& resource = "");

}  // namespace tessera::testing::apiserver
