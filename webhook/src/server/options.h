// tessera-webhook's settings: flags (CLI11), each with an environment variable, and a YAML file
// (--config) with the same settings in camelCase. A flag beats its environment variable, which
// beats the file, which beats the default.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>

#include "core/pod_mutation.h"
#include "tessera/log.h"
#include "tessera/status.h"

namespace tessera::webhook {

struct WebhookOptions {
  std::string listen = ":8443";
  std::string tls_cert_file;
  std::string tls_private_key_file;
  // Without files: the webhook keeps its own certificate in this Secret (serving_certificate.h).
  std::string tls_secret_name;
  std::string tls_secret_namespace;              // the Secret's and the Service's namespace
  std::string service_name;                      // the Service the certificate names
  std::string mutating_webhook_configuration;    // whose caBundle it sets ("": none)
  std::string validating_webhook_configuration;  // whose caBundle it sets ("": none)
  int certificate_validity_days = 365;
  std::chrono::seconds tls_secret_check_interval{60};
  std::string kubeconfig;  // "": in-cluster
  std::string config_file;
  Policy policy;
  std::set<std::string> device_classes = {"vgpu.tessera.dev"};
  std::string share_root = "/var/run/tessera";  // where CDI mounts shares and MPS pipes
  std::string extended_resource_name;           // the default DeviceClass's; "": none
  std::chrono::seconds cache_ttl{60};
  std::chrono::milliseconds certificate_check_interval{1000};
  // Between SIGTERM (readyz turns 503) and closing the listener, for endpoints to drop the pod.
  std::chrono::milliseconds shutdown_delay{2000};
  int threads = 8;
  log::Format log_format = log::Format::kText;  // --log-format text|json
  int verbosity = 0;                            // -v debug, -vv trace
};

struct ParsedOptions {
  WebhookOptions options;
  std::optional<int> exit_code;  // --help or a bad flag: print `message`, exit with this
  std::string message;
};

ParsedOptions parse_options(int argc, const char* const* argv);

Result<PolicyAction> parse_policy_action(const std::string& text);

// An extended resource name as kube-apiserver accepts it in a DeviceClass and in a container's
// resources (k8s.io/kubernetes pkg/apis/core/helper IsExtendedResourceName): a DNS-subdomain
// prefix outside kubernetes.io, "/", and a name of at most 63 characters. "" is accepted (none).
Status validate_extended_resource_name(const std::string& name);

}  // namespace tessera::webhook
