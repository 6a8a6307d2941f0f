// An in-memory Kubernetes API behind the agent's KubeClient interface: GET, POST and PUT of
// namespaced objects by path, as the API server answers them (201, 404, 409 AlreadyExists and 409
// Conflict with a Status body). Records every request, can refuse all of them (unreachable) and can
// hold each one for a while (a slow API). With `writes_back` it stores and returns what
// kube-apiserver would (apiserver/write_back.h), not the body as posted.
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

#include "apiserver/write_back.h"
#include "tessera/kube/kube_client.h"

namespace tessera::webhook::testing {

// The server-set fields and the write-back are kube-apiserver's rules, shared by every stand-in
// (apiserver/write_back.h).
using tessera::testing::apiserver::ServerFields;

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

  // Store and answer what kube-apiserver would (apiserver/write_back.h), not the body as sent.
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
      ServerFields fields;
      fields.uid = object["metadata"].value("uid", "");
      if (fields.uid.empty()) fields.uid = new_uid();
      fields.resource_version = std::to_string(++resource_version_);
      fields.timestamp = now_rfc3339();
      const std::string manager_key = "fieldManager=";
      if (const size_t at_key = query.find(manager_key); at_key != std::string::npos)
        fields.manager = query.substr(at_key + manager_key.size(),
                                      query.find('&', at_key) - at_key - manager_key.size());
      fields.operation = "Update";
      Result<nlohmann::json> written =
          tessera::testing::apiserver::write_back(object, previous, fields);
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
