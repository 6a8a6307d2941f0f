// kube-apiserver's rules for Events (core/v1 Event as JSON), ported for the test API server
// (fake_api_server.h), so that an Event the real server refuses fails our tests with its message.
//
// Ported from kubernetes/kubernetes (commit 04791b4906602ffda5ccf9bc4c84d3329f1d7080):
//   pkg/apis/core/validation/events.go: ValidateEventCreate, ValidateEventUpdate,
//     validateV1EventSeries, legacyValidateEvent (ReportingInstanceLengthLimit, ActionLengthLimit,
//     ReasonLengthLimit 128, NoteLengthLimit 1024);
//   staging/src/k8s.io/apiserver/pkg/registry/rest/create.go: BeforeCreate (the object's namespace
//     against the request's: 400; then ValidateObjectMetaAccessor with ValidatePathSegmentName for
//     the name, ValidateNamespaceName for the namespace);
//   staging/src/k8s.io/apimachinery/pkg/api/validation/path/name.go: IsValidPathSegmentName;
//   staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go: ValidateObjectMetaAccessor
//     ("name or generateName is required"), ValidateObjectMetaUpdate (name, namespace, uid and
//     creationTimestamp immutable).
// The request's version decides how strict: core/v1 and events.k8s.io/v1beta1 get the legacy rules
// only ("for backwards compatibility"); events.k8s.io/v1 (the internal Event it converts to, with
// the core/v1 field names used here) gets the strict ones too. Not modelled: metadata labels,
// annotations, ownerReferences and finalizers (Tessera's Events have none), the Event TTL
// (--event-ttl, 1 h: this server keeps Events until the test ends).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "apiserver/apiserver_rules.h"

namespace tessera::agent::testing::apiserver {

inline constexpr char kCoreV1[] = "v1";
inline constexpr char kEventsV1[] = "events.k8s.io/v1";
inline constexpr char kEventsV1beta1[] = "events.k8s.io/v1beta1";

// ValidateEventCreate and ValidateEventUpdate (`old`: the stored Event), for a request of
// `request_version`.
ErrorList validate_event_create(const nlohmann::json& event, const std::string& request_version);
ErrorList validate_event_update(const nlohmann::json& event, const nlohmann::json& old,
                                const std::string& request_version);

// ValidateObjectMetaAccessor for an Event (namespaced, names as path segments).
ErrorList validate_event_meta(const nlohmann::json& event);

// What kube-apiserver answers a create (old null) or update of a core/v1 Event posted to
// `request_namespace`: nullopt = accepted, else 400 (a namespace other than the request's; the
// body's namespace, when empty, is the request's) or 422 with NewInvalid's Status.
std::optional<Refusal> check_event_write(const nlohmann::json& event, const nlohmann::json* old,
                                         const std::string& request_namespace);

}  // namespace tessera::agent::testing::apiserver
