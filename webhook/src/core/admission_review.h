// AdmissionReview (admission.k8s.io/v1) as kube-apiserver POSTs it to a webhook, and the answer it
// expects back: the same apiVersion and kind, `response.uid` equal to `request.uid`, `allowed`, an
// optional base64 RFC 6902 patch with patchType JSONPatch, warnings, and a Status when refused.
// Pure: no I/O. The parsed request points into the caller's document (never copied: a copy of
// untrusted JSON recurses as deep as the input nests).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

namespace tessera::webhook {

inline constexpr char kAdmissionV1[] = "admission.k8s.io/v1";
inline constexpr char kAdmissionV1beta1[] = "admission.k8s.io/v1beta1";

// Kubernetes objects nest a few levels deep; opaque parameters a few more. A deeper document is
// refused before anything walks it.
inline constexpr int kMaxJsonDepth = 64;

struct GroupVersionKind {
  std::string group;  // "" for the core group (Pod)
  std::string version;
  std::string kind;
};

struct AdmissionRequest {
  std::string api_version;  // of the review: kAdmissionV1 (or v1beta1, which is refused)
  std::string uid;          // echoed in response.uid
  GroupVersionKind kind;
  std::string sub_resource;  // "" for the object itself
  std::string name;          // may be "" on CREATE (generateName)
  std::string namespace_name;
  std::string operation;  // CREATE, UPDATE, DELETE, CONNECT
  bool dry_run = false;
  const nlohmann::json* object = nullptr;  // into the parsed review; null when absent (DELETE)
};

// Parses a request body with the depth limit. Not JSON, or too deep: kInvalidArgument.
Result<nlohmann::json> parse_json_body(std::string_view body);

// Reads `review` (the parsed body). Not an AdmissionReview, an unknown apiVersion or no uid:
// kInvalidArgument (the server answers HTTP 400: there is no uid to answer to).
Result<AdmissionRequest> read_admission_request(const nlohmann::json& review);

struct AdmissionResponse {
  bool allowed = true;
  // When refused: the metav1.Status kube-apiserver shows the client ("admission webhook ...
  // denied the request: <message>").
  int32_t code = 0;
  std::string reason;  // "Forbidden", "Invalid", "BadRequest", "InternalError"
  std::string message;
  nlohmann::json patch = nlohmann::json::array();  // RFC 6902 operations; empty: no patch
  std::vector<std::string> warnings;
};

AdmissionResponse allow();
AdmissionResponse deny(int32_t code, std::string reason, std::string message);
// The answer to a review in a version other than v1 (v1beta1): refused, saying how to fix it.
AdmissionResponse unserved_version();

// The AdmissionReview answer in `api_version`, for the request `uid`.
nlohmann::json review_response(const std::string& api_version, const std::string& uid,
                               const AdmissionResponse& response);

}  // namespace tessera::webhook
