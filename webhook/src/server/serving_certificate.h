// The webhook's own serving certificate (--tls-secret-name), so that nothing in the chart is
// generated at render time and a GitOps sync changes nothing. Each round (at start, then every
// --tls-secret-check-interval-seconds):
//   1. GET the Secret. Missing: generate a CA and a serving certificate for the Service's DNS
//      names and create it. Present but unusable (no pair, key not the certificate's, a DNS name
//      not covered, not signed by its ca.crt, or less than a third of its lifetime left on the
//      injected clock): generate a new pair and update the Secret with its resourceVersion.
//   2. Two replicas that write at once: the API answers the loser 409 (AlreadyExists on create,
//      Conflict on update); the loser re-reads and takes the winner's pair, so all serve one.
//   3. Patch clientConfig.caBundle of each webhook of the named Mutating/Validating
//      WebhookConfigurations that calls this Service, where it differs (JSON Patch, each write
//      guarded by a test of the webhook's name at that index). The bundle written is the Secret's
//      ca.crt plus the CAs already there that are still valid: a replica acting on a Secret it
//      read just before another replica's renewal adds, never takes away, so the new CA stays.
//   4. Serve the Secret's pair (CertificateReloader::set): the next handshake takes it.
// A renewal makes a new CA too and keeps the previous CA in ca.crt while it is valid, so a replica
// still serving the previous certificate stays trusted until its next round.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/certificate_reloader.h"
#include "tessera/kube/kube_client.h"
#include "tessera/status.h"

namespace tessera::webhook {

using WallClock = std::function<std::chrono::system_clock::time_point()>;

// The PEM text a Secret holds (ca.crt: one or more CA certificates).
struct CertificatePems {
  std::string ca;
  std::string cert;
  std::string key;
};

// <service>, <service>.<namespace>, <service>.<namespace>.svc,
// <service>.<namespace>.svc.cluster.local
std::vector<std::string> service_dns_names(const std::string& service, const std::string& ns);

// A new CA (ECDSA P-256) and a serving certificate it signs for `dns_names`, both valid from an
// hour before `now` (clock skew) to `now + validity`. ca.crt is the new CA followed by the CAs of
// `previous_ca` still valid at `now`.
Result<CertificatePems> generate_serving_certificate(const std::vector<std::string>& dns_names,
                                                     std::chrono::seconds validity,
                                                     std::chrono::system_clock::time_point now,
                                                     const std::string& previous_ca = "");

// The caBundle to write: every CA of `ours`, then those of `current` still valid at `now` and not
// in `ours`. A CA's key is dropped once it signed its one certificate, so keeping a CA until it
// expires trusts nothing but that certificate.
std::string merged_ca_bundle(const std::string& ours, const std::string& current,
                             std::chrono::system_clock::time_point now);

// Why `pems` cannot serve `dns_names` at `now` ("" when it can): see the header comment.
std::string unusable_reason(const CertificatePems& pems, const std::vector<std::string>& dns_names,
                            std::chrono::system_clock::time_point now);

struct ServingCertificateSettings {
  std::string secret_namespace;  // also the Service's
  std::string secret_name;
  std::string service_name;
  std::string mutating_configuration;    // "": none patched
  std::string validating_configuration;  // "": none patched
  std::chrono::seconds validity{std::chrono::hours(24 * 365)};
};

class ServingCertificate {
 public:
  ServingCertificate(kube::KubeClient& api, ServingCertificateSettings settings,
                     CertificateReloader& reloader, WallClock clock);

  // One round (see above). The pair is served even when a caBundle patch fails; the error is
  // returned, and the next round tries again.
  Status reconcile();

  struct Counts {
    size_t created = 0;  // Secrets this replica created
    size_t renewed = 0;  // Secrets this replica updated with a new pair
    size_t adopted = 0;  // 409 answers after which another writer's pair was taken
    size_t patched = 0;  // webhook configurations patched
    size_t served = 0;   // pairs handed to the reloader
  };
  Counts counts() const;
  // The resourceVersion of the Secret whose pair is served.
  std::string served_version() const;

 private:
  Result<nlohmann::json> read_secret();
  Result<nlohmann::json> write_secret(const nlohmann::json* existing, const CertificatePems& pems);
  Status patch_ca_bundle(bool mutating, const std::string& name, const std::string& ca_pem,
                         std::chrono::system_clock::time_point now);

  kube::KubeClient& api_;
  const ServingCertificateSettings settings_;
  const std::vector<std::string> dns_names_;
  CertificateReloader& reloader_;
  const WallClock clock_;
  mutable std::mutex mutex_;
  Counts counts_;
  std::string served_version_;
  std::string served_cert_;  // the tls.crt served, to hand over a new pair only when it changed
};

}  // namespace tessera::webhook
