// Creates the ResourceClaimTemplates a mutated pod refers to, idempotently: POST, and on 409 a
// GET that checks the existing template is the same request (ours, or one equal to it). "The
// same" is by meaning, not bytes: kube-apiserver writes back `spec.metadata: {}`, request
// defaults and canonical quantities, so those are compared as values. What is
// known to exist is remembered (on the injected clock, for a TTL) so a stream of pods with the
// same request costs one API call per namespace and TTL, not one per pod.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "kube/api_claim_lookup.h"
#include "tessera/kube/kube_client.h"
#include "tessera/status.h"

namespace tessera::webhook {

class TemplateWriter {
 public:
  TemplateWriter(kube::KubeClient& api, std::chrono::seconds ttl, SteadyClock clock);

  // `claim_template` as ShareRequest::claim_template makes it.
  Status ensure(const nlohmann::json& claim_template);

  struct Counts {
    size_t created = 0, existed = 0, cached = 0, failed = 0;
  };
  Counts counts() const;

 private:
  kube::KubeClient& api_;
  const std::chrono::seconds ttl_;
  const SteadyClock clock_;
  mutable std::mutex mutex_;
  std::map<std::string, std::chrono::steady_clock::time_point> known_;  // "ns/name" -> until
  Counts counts_;
};

}  // namespace tessera::webhook
