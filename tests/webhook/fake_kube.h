// An in-memory Kubernetes API behind the agent's KubeClient interface: GET and POST of namespaced
// objects by path, as the API server answers them (201, 404, 409 with a Status body). Records every
// request, can refuse all of them (unreachable) and can hold each one for a while (a slow API).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/kube/kube_client.h"

namespace tessera::webhook::testing {

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

  Result<kube::ApiResponse> request(const std::string& method, const std::string& path,
                                    const std::string& body = "") override {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::lock_guard lock(mutex_);
    requests_.push_back(method + " " + path);
    if (unreachable) return unavailable(method + " " + path + ": Couldn't connect to server");
    if (method == "GET") {
      const auto it = objects_.find(path);
      if (it == objects_.end()) return refused(method, path, 404, "NotFound");
      return kube::ApiResponse{200, it->second.dump()};
    }
    if (method == "POST") {
      const nlohmann::json object = nlohmann::json::parse(body);
      const std::string at = path + "/" + object["metadata"]["name"].get<std::string>();
      if (objects_.count(at)) return refused(method, path, 409, "AlreadyExists");
      objects_[at] = object;
      return kube::ApiResponse{201, body};
    }
    return refused(method, path, 405, "MethodNotAllowed");
  }

 private:
  // A non-2xx answer as KubeClient reports it: the code by HTTP status, the API's reason.
  static Status refused(const std::string& method, const std::string& path, long code,
                        const char* reason) {
    return Status(kube::code_for_http_status(code),
                  method + " " + path + ": HTTP " + std::to_string(code) + ": " + reason);
  }

  mutable std::mutex mutex_;
  std::map<std::string, nlohmann::json> objects_;
  std::vector<std::string> requests_;
};

// A clock the test moves.
struct ManualClock {
  std::chrono::steady_clock::time_point now{};
  auto function() {
    return [this] { return now; };
  }
};

}  // namespace tessera::webhook::testing
