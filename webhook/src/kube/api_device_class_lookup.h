// DeviceClassLookup over the Kubernetes API: GET the DeviceClass a claim's request names, for the
// bounds its config sets on claims. Answers are cached for a TTL on the injected clock (a class
// may be edited, so never longer); errors are not cached.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "core/claim_validation.h"
#include "kube/api_claim_lookup.h"
#include "tessera/kube/kube_client.h"

namespace tessera::webhook {

class ApiDeviceClassLookup final : public DeviceClassLookup {
 public:
  ApiDeviceClassLookup(kube::KubeClient& api, std::chrono::seconds ttl, SteadyClock clock,
                       size_t max_entries = 1000);
  Result<nlohmann::json> class_configs(const std::string& name) override;

  size_t api_calls() const;

 private:
  struct Entry {
    nlohmann::json configs;
    std::chrono::steady_clock::time_point expires;
  };
  kube::KubeClient& api_;
  const std::chrono::seconds ttl_;
  const SteadyClock clock_;
  const size_t max_entries_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> cache_;
  size_t api_calls_ = 0;
};

}  // namespace tessera::webhook
