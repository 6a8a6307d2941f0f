// kube-apiserver's checks of a core/v1 Event create (POST /api/v1/namespaces/<ns>/events), ported
// for the test API server (fake_api_server.h), so an Event the real server refuses fails our tests
// with the real answer.
//
// Ported from kubernetes/kubernetes:
//   pkg/apis/core/validation/events.go: ValidateEventCreate (a core/v1 request gets
//     legacyValidateEvent only), legacyValidateEvent (involvedObject.namespace against the
//     Event's namespace: an object without one, such as a Node, needs namespace "" or "default"
//     in the legacy form, "default" or "kube-system" once eventTime is set; with eventTime,
//     reportingController, reportingInstance (128), action (128), reason (128) and message
//     (1024) are checked; the namespace a DNS-1123 subdomain);
//   staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go and registry/rest/meta.go:
//     EnsureObjectNamespaceMatchesRequestNamespace (400 when the body's namespace is not the
//     path's; an empty one takes the path's);
//   staging/src/k8s.io/apiserver/pkg/registry/rest/create.go: BeforeCreate (a generateName gives
//     the name; after the strategy's validation, ValidateObjectMetaAccessor with
//     path.ValidatePathSegmentName: "name or generateName is required", "may not be '.'",
//     "may not contain '/'").
// The generated name's suffix is fixed here ("tst00"); the real one is random.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "apiserver/apiserver_rules.h"

namespace tessera::agent::testing::apiserver {

// What the API server answers a create of `event` at namespace `path_namespace`: nullopt =
// accepted (`event` then holds the namespace and name the server gives it), else the HTTP code
// and its Status body.
std::optional<Refusal> check_event_create(nlohmann::json& event, const std::string& path_namespace);

}  // namespace tessera::agent::testing::apiserver
