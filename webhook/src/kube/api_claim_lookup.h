// ClaimLookup over the Kubernetes API: GET the ResourceClaim or ResourceClaimTemplate, and call it
// Tessera when a device request names one of the Tessera device classes, or its allocation is
// from the Tessera driver. Answers are cached (claim and template specs are immutable) for a TTL
// on the injected clock; errors are not cached, so the next pod asks again.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "core/pod_mutation.h"
#include "tessera/kube/kube_client.h"

namespace tessera::webhook {

using SteadyClock = std::function<std::chrono::steady_clock::time_point()>;

// Whether a ResourceClaim or a ResourceClaimTemplate object asks for Tessera devices.
bool asks_for_tessera(const nlohmann::json& object, const std::set<std::string>& device_classes);

class ApiClaimLookup final : public ClaimLookup {
 public:
  ApiClaimLookup(kube::KubeClient& api, std::set<std::string> device_classes,
                 std::chrono::seconds ttl, SteadyClock clock, size_t max_entries = 10000);
  Result<bool> is_tessera(const std::string& namespace_name, ClaimSource source,
                          const std::string& name) override;

  size_t api_calls() const;

 private:
  using Key = std::tuple<std::string, ClaimSource, std::string>;
  struct Entry {
    bool tessera;
    std::chrono::steady_clock::time_point expires;
  };
  kube::KubeClient& api_;
  const std::set<std::string> device_classes_;
  const std::chrono::seconds ttl_;
  const SteadyClock clock_;
  const size_t max_entries_;
  mutable std::mutex mutex_;
  std::map<Key, Entry> cache_;
  size_t api_calls_ = 0;
};

}  // namespace tessera::webhook
