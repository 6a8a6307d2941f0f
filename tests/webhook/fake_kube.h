// An in-memory Kubernetes API behind the agent's KubeClient interface: GET, POST and PUT of
// namespaced objects by path, as the API server answers them (201, 404, 409 AlreadyExists and 409
// Conflict with a Status body). Records every request, can refuse all of them (unreachable) and can
// hold each one for a while (a slow API). With `writes_back` it stores and returns what
// kube-apiserver would (apiserver_write_back below), not the body as posted.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/kube/kube_client.h"
#include "tessera/kube/quantity.h"

namespace tessera::webhook::testing {

// What the server sets on an object it creates or replaces.
struct ServerFields {
  std::string uid;
  std::string resource_version;
  int64_t generation = 1;
  std::string timestamp;  // RFC 3339, UTC
  std::string manager;    // the request's fieldManager, else "unknown"
  std::string operation;  // "Update" for POST and PUT without server-side apply
};

// A ResourceClaimTemplate as kube-apiserver stores and returns it: the server's metadata (uid,
// resourceVersion, generation, creationTimestamp, one managedFields entry), `spec.metadata: {}`
// where absent (Go's encoder writes an empty struct), the request defaults (allocationMode
// ExactCount, count 1) and every capacity quantity in canonical form
// (k8s.io/apimachinery/pkg/api/resource/quantity.go). A quantity it cannot parse is refused as
// kube-apiserver refuses it (kInvalidArgument, HTTP 422), naming the field and the value.
inline Result<nlohmann::json> apiserver_write_back(const nlohmann::json& posted,
                                                   const ServerFields& fields) {
  using nlohmann::json;
  if (!posted.is_object()) return invalid_argument("body: not an object");
  json stored = posted;
  json& metadata = stored["metadata"];
  if (!metadata.is_object()) return invalid_argument("metadata: not an object");
  metadata["uid"] = fields.uid;
  metadata["resourceVersion"] = fields.resource_version;
  metadata["generation"] = fields.generation;
  if (!metadata.contains("creationTimestamp")) metadata["creationTimestamp"] = fields.timestamp;
  metadata["managedFields"] =
      json::array({{{"manager", fields.manager.empty() ? "unknown" : fields.manager},
                    {"operation", fields.operation},
                    {"apiVersion", stored.value("apiVersion", "resource.k8s.io/v1")},
                    {"time", fields.timestamp},
                    {"fieldsType", "FieldsV1"},
                    {"fieldsV1", {{"f:spec", json::object()}}}}});
  json& template_spec = stored["spec"];
  if (!template_spec.is_object()) return invalid_argument("spec: not an object");
  if (!template_spec.contains("metadata")) template_spec["metadata"] = json::object();
  json* requests = nullptr;
  if (template_spec.contains("spec") && template_spec["spec"].is_object() &&
      template_spec["spec"].contains("devices") &&
      template_spec["spec"]["devices"].contains("requests"))
    requests = &template_spec["spec"]["devices"]["requests"];
  if (!requests || !requests->is_array()) return stored;
  // One device request (exactly, or one of firstAvailable): defaults, canonical capacities.
  const auto rewrite = [](json& request, const std::string& where) -> Status {
    if (!request.is_object()) return invalid_argument(where + ": not an object");
    if (!request.contains("allocationMode")) request["allocationMode"] = "ExactCount";
    if (request["allocationMode"] == "ExactCount" && !request.contains("count"))
      request["count"] = 1;
    if (!request.contains("capacity") || !request["capacity"].contains("requests"))
      return Status::ok();
    for (auto& [name, quantity] : request["capacity"]["requests"].items()) {
      const std::string field = where + ".capacity.requests." + name;
      if (!quantity.is_string())
        return invalid_argument(field + ": " + quantity.dump() + ": not a quantity string");
      const Result<std::string> canonical = kube::canonical_quantity(quantity.get<std::string>());
      if (!canonical.is_ok()) return invalid_argument(field + ": " + canonical.status().message());
      quantity = *canonical;
    }
    return Status::ok();
  };
  for (size_t i = 0; i < requests->size(); ++i) {
    json& request = (*requests)[i];
    const std::string where = "spec.spec.devices.requests[" + std::to_string(i) + "]";
    if (request.contains("exactly")) {
      if (Status status = rewrite(request["exactly"], where + ".exactly"); !status.is_ok())
        return status;
    }
    if (request.contains("firstAvailable") && request["firstAvailable"].is_array()) {
      json& alternatives = request["firstAvailable"];
      for (size_t j = 0; j < alternatives.size(); ++j) {
        const std::string at = where + ".firstAvailable[" + std::to_string(j) + "]";
        if (Status status = rewrite(alternatives[j], at); !status.is_ok()) return status;
      }
    }
  }
  return stored;
}

class FakeKube : public kube::KubeClient {
 public:
  std::atomic<bool> unreachable{false};
  std::chrono::milliseconds delay{0};

  void put(const std::string& path, const nlohmann::json& object) {
    std::lock_guard lock(mutex_);
    objects_[path] = object;
  }
  bool has(const std::string& path) const {
    std::lock_guard lock(mutex_);
    return objects_.count(path) > 0;
  }
  nlohmann::json get(const std::string& path) const {
    std::lock_guard lock(mutex_);
    return objects_.at(path);
  }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  size_t request_count() const {
    std::lock_guard lock(mutex_);
    return requests_.size();
  }

  // Store and answer what kube-apiserver would (apiserver_write_back), not the body as sent.
  bool writes_back = false;

  // The Status body of the last non-2xx answer, as kube-apiserver sends it.
  nlohmann::json last_status() const {
    std::lock_guard lock(mutex_);
    return last_status_;
  }

  Result<kube::ApiResponse> request(const std::string& method, const std::string& path_and_query,
                                    const std::string& body = "") override {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::lock_guard lock(mutex_);
    requests_.push_back(method + " " + path_and_query);
    if (unreachable)
      return unavailable(method + " " + path_and_query + ": Couldn't connect to server");
    const size_t query_at = path_and_query.find('?');
    const std::string path = path_and_query.substr(0, query_at);
    const std::string query =
        query_at == std::string::npos ? "" : path_and_query.substr(query_at + 1);
    if (method == "GET") {
      const auto it = objects_.find(path);
      if (it == objects_.end())
        return refused(method, path, 404, "NotFound", "\"" + name_of(path) + "\" not found");
      return kube::ApiResponse{200, it->second.dump()};
    }
    if (method == "POST") {
      nlohmann::json object = nlohmann::json::parse(body);
      const std::string name = object["metadata"]["name"].get<std::string>();
      // The server names the object's identity and version itself.
      object["metadata"].erase("uid");
      object["metadata"].erase("resourceVersion");
      const std::string at = path + "/" + name;
      if (objects_.count(at))
        return refused(method, path, 409, "AlreadyExists", "\"" + name + "\" already exists");
      return store(method, path, at, object, nullptr, query, 201);
    }
    if (method == "PUT") {
      const auto it = objects_.find(path);
      if (it == objects_.end())
        return refused(method, path, 404, "NotFound", "\"" + name_of(path) + "\" not found");
      const nlohmann::json object = nlohmann::json::parse(body);
      const nlohmann::json sent_version = object["metadata"].value("resourceVersion", "");
      const nlohmann::json& stored = it->second;
      // Optimistic concurrency: a resourceVersion that is not the stored one is refused.
      if (sent_version != "" && sent_version != stored["metadata"].value("resourceVersion", ""))
        return refused(method, path, 409, "Conflict",
                       "Operation cannot be fulfilled on \"" + name_of(path) +
                           "\": the object has been modified; please apply your changes to the "
                           "latest version and try again");
      nlohmann::json replaced = object;
      replaced["metadata"]["uid"] = stored["metadata"].value("uid", "");
      replaced["metadata"]["creationTimestamp"] = stored["metadata"].value("creationTimestamp", "");
      return store(method, path, path, replaced, &stored, query, 200);
    }
    return refused(method, path, 405, "MethodNotAllowed", "the server does not allow this method");
  }

 private:
  static std::string name_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

  static std::string now_rfc3339() {
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[32];
    std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
  }

  std::string new_uid() {
    std::uniform_int_distribution<uint32_t> nibble(0, 15);
    std::string uid = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx";
    for (char& c : uid) {
      if (c != 'x' && c != 'y') continue;
      const uint32_t value = c == 'x' ? nibble(random_) : 8 + nibble(random_) % 4;
      c = "0123456789abcdef"[value];
    }
    return uid;
  }

  // Keeps `object` at `at` (replacing `previous`, if any), as posted or as kube-apiserver writes
  // it back, and answers with it.
  Result<kube::ApiResponse> store(const std::string& method, const std::string& path,
                                  const std::string& at, const nlohmann::json& object,
                                  const nlohmann::json* previous, const std::string& query,
                                  long code) {
    nlohmann::json kept = object;
    if (writes_back) {
      // The generation counts changes of the spec as stored.
      int64_t generation = 1;
      if (previous) {
        const Result<nlohmann::json> rewritten = apiserver_write_back(object, ServerFields{});
        const bool changed = rewritten.is_ok() && rewritten->value("spec", nlohmann::json()) !=
                                                      previous->value("spec", nlohmann::json());
        generation = previous->at("metadata").value("generation", int64_t{1}) + (changed ? 1 : 0);
      }
      ServerFields fields;
      fields.uid = object["metadata"].value("uid", "");
      if (fields.uid.empty()) fields.uid = new_uid();
      fields.resource_version = std::to_string(++resource_version_);
      fields.generation = generation;
      fields.timestamp = now_rfc3339();
      const std::string manager_key = "fieldManager=";
      if (const size_t at_key = query.find(manager_key); at_key != std::string::npos)
        fields.manager = query.substr(at_key + manager_key.size(),
                                      query.find('&', at_key) - at_key - manager_key.size());
      fields.operation = "Update";
      Result<nlohmann::json> written = apiserver_write_back(object, fields);
      if (!written.is_ok())
        return refused(method, path, 422, "Invalid", written.status().message());
      kept = *written;
    }
    objects_[at] = kept;
    return kube::ApiResponse{code, kept.dump()};
  }

  // A non-2xx answer: the Status body kube-apiserver sends, reported as KubeClient reports it
  // (the code by HTTP status, "METHOD path: HTTP <code>: <reason>").
  Status refused(const std::string& method, const std::string& path, long code, const char* reason,
                 const std::string& message) {
    last_status_ = {{"kind", "Status"},
                    {"apiVersion", "v1"},
                    {"metadata", nlohmann::json::object()},
                    {"status", "Failure"},
                    {"message", message},
                    {"reason", reason},
                    {"details", {{"name", name_of(path)}}},
                    {"code", code}};
    return Status(kube::code_for_http_status(code),
                  method + " " + path + ": HTTP " + std::to_string(code) + ": " + reason);
  }

  mutable std::mutex mutex_;
  std::map<std::string, nlohmann::json> objects_;
  std::vector<std::string> requests_;
  nlohmann::json last_status_;
  uint64_t resource_version_ = 0;
  std::mt19937 random_{std::random_device{}()};
};

// A clock the test moves.
struct ManualClock {
  std::chrono::steady_clock::time_point now{};
  auto function() {
    return [this] { return now; };
  }
};

}  // namespace tessera::webhook::testing
