#include "server/options.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <regex>
#include <type_traits>
#include <vector>

#include "tessera/flags/listen_address.h"
#include "tessera/flags/log_flags.h"

namespace tessera::webhook {
namespace {

std::string action_name(PolicyAction action) {
  return action == PolicyAction::kDeny ? "deny" : "warn";
}

template <typename T>
const char* expected_type() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of strings";
  if constexpr (std::is_integral_v<T>) return "an integer";
  return "another type";
}

// `node` (the file's `field`) as a T, or an error naming the field and the value.
template <typename T>
Status convert(const YAML::Node& node, const std::string& where, T& target) {
  try {
    target = node.as<T>();
    return Status::ok();
  } catch (const YAML::BadConversion&) {
    YAML::Emitter shown;
    shown << YAML::Flow << node;
    return invalid_argument(where + ": expected " + expected_type<T>() + ", got " + shown.c_str());
  }
}

// Settings that a flag or its environment variable did not set are taken from the file.
Status apply_config_file(const std::string& path, const CLI::App& app, WebhookOptions& out,
                         std::string& policy_environment, std::string& policy_mounts,
                         std::string& policy_privileged, std::vector<std::string>& classes) {
  YAML::Node file;
  try {
    file = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return invalid_argument("--config " + path + ": " + e.what());
  }
  if (!file.IsMap() && !file.IsNull()) return invalid_argument("--config " + path + ": not a map");
  auto unset = [&](const char* flag) { return app.get_option(flag)->count() == 0; };
  static const std::set<std::string> kKnown = {"listen",
                                               "tlsCertFile",
                                               "tlsPrivateKeyFile",
                                               "kubeconfig",
                                               "policy",
                                               "deviceClasses",
                                               "shareRoot",
                                               "extendedResourceName",
                                               "cacheTTLSeconds",
                                               "threads",
                                               "shutdownDelayMs",
                                               "certificateCheckIntervalMs",
                                               "tlsSecretName",
                                               "tlsSecretNamespace",
                                               "serviceName",
                                               "mutatingWebhookConfiguration",
                                               "validatingWebhookConfiguration",
                                               "certificateValidityDays",
                                               "tlsSecretCheckIntervalSeconds"};
  try {
    for (const auto& entry : file) {
      const std::string key = entry.first.as<std::string>();
      if (!kKnown.count(key)) return invalid_argument("--config " + path + ": unknown key " + key);
    }
    const std::string in_file = "--config " + path + ": ";
    auto take = [&](const char* key, const char* flag, auto& target) {
      if (!file[key] || !unset(flag)) return Status::ok();
      return convert(file[key], in_file + key, target);
    };
    TESSERA_RETURN_IF_ERROR(take("listen", "--listen", out.listen));
    TESSERA_RETURN_IF_ERROR(take("tlsCertFile", "--tls-cert-file", out.tls_cert_file));
    TESSERA_RETURN_IF_ERROR(
        take("tlsPrivateKeyFile", "--tls-private-key-file", out.tls_private_key_file));
    TESSERA_RETURN_IF_ERROR(take("kubeconfig", "--kubeconfig", out.kubeconfig));
    TESSERA_RETURN_IF_ERROR(take("tlsSecretName", "--tls-secret-name", out.tls_secret_name));
    TESSERA_RETURN_IF_ERROR(
        take("tlsSecretNamespace", "--tls-secret-namespace", out.tls_secret_namespace));
    TESSERA_RETURN_IF_ERROR(take("serviceName", "--service-name", out.service_name));
    TESSERA_RETURN_IF_ERROR(take("mutatingWebhookConfiguration", "--mutating-webhook-configuration",
                                 out.mutating_webhook_configuration));
    TESSERA_RETURN_IF_ERROR(take("validatingWebhookConfiguration",
                                 "--validating-webhook-configuration",
                                 out.validating_webhook_configuration));
    TESSERA_RETURN_IF_ERROR(take("certificateValidityDays", "--certificate-validity-days",
                                 out.certificate_validity_days));
    if (file["tlsSecretCheckIntervalSeconds"] && unset("--tls-secret-check-interval-seconds")) {
      int64_t seconds = 0;
      TESSERA_RETURN_IF_ERROR(convert(file["tlsSecretCheckIntervalSeconds"],
                                      in_file + "tlsSecretCheckIntervalSeconds", seconds));
      out.tls_secret_check_interval = std::chrono::seconds(seconds);
    }
    TESSERA_RETURN_IF_ERROR(take("shareRoot", "--share-root", out.share_root));
    TESSERA_RETURN_IF_ERROR(
        take("extendedResourceName", "--extended-resource-name", out.extended_resource_name));
    TESSERA_RETURN_IF_ERROR(take("threads", "--threads", out.threads));
    TESSERA_RETURN_IF_ERROR(take("deviceClasses", "--device-class", classes));
    int64_t count = 0;
    if (file["cacheTTLSeconds"] && unset("--cache-ttl-seconds")) {
      TESSERA_RETURN_IF_ERROR(convert(file["cacheTTLSeconds"], in_file + "cacheTTLSeconds", count));
      out.cache_ttl = std::chrono::seconds(count);
    }
    if (file["shutdownDelayMs"] && unset("--shutdown-delay-ms")) {
      TESSERA_RETURN_IF_ERROR(convert(file["shutdownDelayMs"], in_file + "shutdownDelayMs", count));
      out.shutdown_delay = std::chrono::milliseconds(count);
    }
    if (file["certificateCheckIntervalMs"] && unset("--certificate-check-interval-ms")) {
      TESSERA_RETURN_IF_ERROR(convert(file["certificateCheckIntervalMs"],
                                      in_file + "certificateCheckIntervalMs", count));
      out.certificate_check_interval = std::chrono::milliseconds(count);
    }
    if (const YAML::Node policy = file["policy"]) {
      if (!policy.IsMap()) return invalid_argument("--config " + path + ": policy: not a map");
      for (const auto& entry : policy) {
        const std::string key = entry.first.as<std::string>();
        if (key != "environment" && key != "mounts" && key != "privileged")
          return invalid_argument("--config " + path + ": policy." + key +
                                  ": unknown (environment, mounts, privileged)");
      }
      if (policy["environment"] && unset("--policy-environment"))
        TESSERA_RETURN_IF_ERROR(
            convert(policy["environment"], in_file + "policy.environment", policy_environment));
      if (policy["mounts"] && unset("--policy-mounts"))
        TESSERA_RETURN_IF_ERROR(
            convert(policy["mounts"], in_file + "policy.mounts", policy_mounts));
      if (policy["privileged"] && unset("--policy-privileged"))
        TESSERA_RETURN_IF_ERROR(
            convert(policy["privileged"], in_file + "policy.privileged", policy_privileged));
    }
  } catch (const YAML::Exception& e) {
    return invalid_argument("--config " + path + ": " + e.what());
  }
  return Status::ok();
}

}  // namespace

Result<PolicyAction> parse_policy_action(const std::string& text) {
  if (text == "deny") return PolicyAction::kDeny;
  if (text == "warn") return PolicyAction::kWarn;
  return invalid_argument("invalid policy action \"" + text + "\" (deny or warn)");
}

ParsedOptions parse_options(int argc, const char* const* argv) {
  ParsedOptions parsed;
  WebhookOptions& out = parsed.options;
  CLI::App app{"tessera-webhook: the admission webhook for Tessera GPU shares (HTTPS only)"};
  std::string policy_environment = action_name(out.policy.environment);
  std::string policy_mounts = action_name(out.policy.mounts);
  std::string policy_privileged = action_name(out.policy.privileged);
  std::vector<std::string> classes(out.device_classes.begin(), out.device_classes.end());
  int64_t cache_ttl = out.cache_ttl.count();
  int64_t shutdown_delay = out.shutdown_delay.count();
  int64_t check_interval = out.certificate_check_interval.count();
  app.add_option("--listen", out.listen, "host:port to serve HTTPS on")
      ->envname("TESSERA_WEBHOOK_LISTEN")
      ->capture_default_str();
  app.add_option("--tls-cert-file", out.tls_cert_file, "PEM certificate (and chain); reloaded")
      ->envname("TESSERA_WEBHOOK_TLS_CERT_FILE");
  app.add_option("--tls-private-key-file", out.tls_private_key_file, "PEM private key; reloaded")
      ->envname("TESSERA_WEBHOOK_TLS_PRIVATE_KEY_FILE");
  app.add_option("--tls-secret-name", out.tls_secret_name,
                 "instead of the files: a kubernetes.io/tls Secret the webhook creates, renews "
                 "and serves (with --tls-secret-namespace and --service-name)")
      ->envname("TESSERA_WEBHOOK_TLS_SECRET_NAME");
  app.add_option("--tls-secret-namespace", out.tls_secret_namespace,
                 "the namespace of the Secret and of the webhook's Service")
      ->envname("TESSERA_WEBHOOK_TLS_SECRET_NAMESPACE");
  app.add_option("--service-name", out.service_name,
                 "the webhook's Service: the certificate names its DNS names")
      ->envname("TESSERA_WEBHOOK_SERVICE_NAME");
  app.add_option("--mutating-webhook-configuration", out.mutating_webhook_configuration,
                 "the MutatingWebhookConfiguration whose caBundle the webhook sets")
      ->envname("TESSERA_WEBHOOK_MUTATING_WEBHOOK_CONFIGURATION");
  app.add_option("--validating-webhook-configuration", out.validating_webhook_configuration,
                 "the ValidatingWebhookConfiguration whose caBundle the webhook sets")
      ->envname("TESSERA_WEBHOOK_VALIDATING_WEBHOOK_CONFIGURATION");
  app.add_option("--certificate-validity-days", out.certificate_validity_days,
                 "lifetime of a certificate the webhook makes (renewed with a third left)")
      ->envname("TESSERA_WEBHOOK_CERTIFICATE_VALIDITY_DAYS")
      ->check(CLI::Range(1, 3650))
      ->capture_default_str();
  int64_t secret_check_interval = out.tls_secret_check_interval.count();
  app.add_option("--tls-secret-check-interval-seconds", secret_check_interval,
                 "how often the Secret is read again (renewal, another replica's renewal)")
      ->envname("TESSERA_WEBHOOK_TLS_SECRET_CHECK_INTERVAL_SECONDS")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}))
      ->capture_default_str();
  app.add_option("--kubeconfig", out.kubeconfig, "kubeconfig file (empty: in-cluster)")
      ->envname("TESSERA_WEBHOOK_KUBECONFIG");
  app.add_option("--config", out.config_file, "YAML file with these settings (camelCase)")
      ->envname("TESSERA_WEBHOOK_CONFIG");
  app.add_option("--policy-environment", policy_environment,
                 "LD_PRELOAD, TESSERA_*, CUDA_DEVICE_*_LIMIT set by a share's container")
      ->envname("TESSERA_WEBHOOK_POLICY_ENVIRONMENT")
      ->capture_default_str();
  app.add_option("--policy-mounts", policy_mounts,
                 "mounts over /etc/ld.so.preload or the share folder")
      ->envname("TESSERA_WEBHOOK_POLICY_MOUNTS")
      ->capture_default_str();
  app.add_option("--policy-privileged", policy_privileged, "privileged containers with a share")
      ->envname("TESSERA_WEBHOOK_POLICY_PRIVILEGED")
      ->capture_default_str();
  app.add_option("--device-class", classes, "DeviceClasses whose claims are Tessera shares")
      ->envname("TESSERA_WEBHOOK_DEVICE_CLASSES")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--share-root", out.share_root, "the share folder containers must not cover")
      ->envname("TESSERA_WEBHOOK_SHARE_ROOT")
      ->capture_default_str();
  app.add_option("--extended-resource-name", out.extended_resource_name,
                 "the default DeviceClass's extendedResourceName: containers asking for it are "
                 "policed as shares")
      ->envname("TESSERA_WEBHOOK_EXTENDED_RESOURCE_NAME");
  app.add_option("--cache-ttl-seconds", cache_ttl, "how long claim lookups are cached")
      ->envname("TESSERA_WEBHOOK_CACHE_TTL_SECONDS")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}))
      ->capture_default_str();
  app.add_option("--shutdown-delay-ms", shutdown_delay,
                 "after SIGTERM: readyz 503 this long before the listener closes")
      ->envname("TESSERA_WEBHOOK_SHUTDOWN_DELAY_MS")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}))
      ->capture_default_str();
  app.add_option("--certificate-check-interval-ms", check_interval,
                 "how often a handshake may look for a rotated certificate")
      ->envname("TESSERA_WEBHOOK_CERTIFICATE_CHECK_INTERVAL_MS")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}))
      ->capture_default_str();
  app.add_option("--threads", out.threads, "request threads")
      ->envname("TESSERA_WEBHOOK_THREADS")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  std::string log_format = "text";
  flags::add_log_flags(app, log_format, out.verbosity, "TESSERA_WEBHOOK_LOG_FORMAT");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    parsed.exit_code = e.get_exit_code();
    parsed.message = e.get_exit_code() == 0 ? app.help() : std::string(e.what());
    return parsed;
  }
  out.log_format = log::parse_format(log_format).value();
  auto fail = [&](const Status& status) {
    parsed.exit_code = 2;
    parsed.message = status.message();
    return parsed;
  };
  if (!out.config_file.empty()) {
    if (Status s = apply_config_file(out.config_file, app, out, policy_environment, policy_mounts,
                                     policy_privileged, classes);
        !s.is_ok())
      return fail(s);
  }
  out.cache_ttl = app.get_option("--cache-ttl-seconds")->count() ? std::chrono::seconds(cache_ttl)
                                                                 : out.cache_ttl;
  if (app.get_option("--shutdown-delay-ms")->count())
    out.shutdown_delay = std::chrono::milliseconds(shutdown_delay);
  if (app.get_option("--certificate-check-interval-ms")->count())
    out.certificate_check_interval = std::chrono::milliseconds(check_interval);
  for (auto [text, target, flag] :
       {std::tuple{&policy_environment, &out.policy.environment, "--policy-environment"},
        std::tuple{&policy_mounts, &out.policy.mounts, "--policy-mounts"},
        std::tuple{&policy_privileged, &out.policy.privileged, "--policy-privileged"}}) {
    Result<PolicyAction> action = parse_policy_action(*text);
    if (!action.is_ok()) return fail(action.status().with_context(flag));
    *target = *action;
  }
  out.device_classes = std::set<std::string>(classes.begin(), classes.end());
  if (out.device_classes.empty()) return fail(invalid_argument("--device-class: none given"));
  if (app.get_option("--tls-secret-check-interval-seconds")->count())
    out.tls_secret_check_interval = std::chrono::seconds(secret_check_interval);
  if (!out.tls_secret_name.empty()) {
    if (!out.tls_cert_file.empty() || !out.tls_private_key_file.empty())
      return fail(invalid_argument(
          "--tls-secret-name " + out.tls_secret_name +
          " with --tls-cert-file or --tls-private-key-file: the certificate comes from one or "
          "the other"));
    if (out.tls_secret_namespace.empty() || out.service_name.empty())
      return fail(invalid_argument("--tls-secret-name " + out.tls_secret_name +
                                   " needs --tls-secret-namespace and --service-name (the "
                                   "certificate names the Service's DNS names)"));
    if (out.certificate_validity_days < 1 || out.certificate_validity_days > 3650)
      return fail(invalid_argument("--certificate-validity-days " +
                                   std::to_string(out.certificate_validity_days) + ": 1 to 3650"));
  } else if (out.tls_cert_file.empty() || out.tls_private_key_file.empty()) {
    return fail(invalid_argument(
        "--tls-cert-file and --tls-private-key-file are required (the webhook serves HTTPS "
        "only), or --tls-secret-name for a certificate the webhook makes and renews itself"));
  }
  if (Status listen = flags::parse_listen_address(out.listen, "--listen").status(); !listen.is_ok())
    return fail(listen);
  if (Status s = validate_extended_resource_name(out.extended_resource_name); !s.is_ok())
    return fail(s.with_context("--extended-resource-name"));
  return parsed;
}

Status validate_extended_resource_name(const std::string& name) {
  if (name.empty()) return Status::ok();
  static const std::regex kPrefix(
      "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  static const std::regex kName("[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?");
  const size_t slash = name.find('/');
  const std::string shown = "\"" + name + "\"";
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos)
    return invalid_argument(shown +
                            " is not <domain>/<name>: an extended resource name is fully "
                            "qualified (e.g. vgpu.tessera.dev/gpu)");
  const std::string prefix = name.substr(0, slash);
  const std::string rest = name.substr(slash + 1);
  if (prefix.size() > 253 || !std::regex_match(prefix, kPrefix))
    return invalid_argument(shown + ": the domain " + prefix + " is not a DNS subdomain");
  if (prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io"))
    return invalid_argument(shown + ": names under kubernetes.io are Kubernetes' own resources");
  if (rest.empty() || rest.size() > 63 || !std::regex_match(rest, kName))
    return invalid_argument(shown + ": the name " + rest +
                            " must be 1 to 63 letters, digits, '-', '_' or '.', starting and "
                            "ending with a letter or digit");
  return Status::ok();
}

}  // namespace tessera::webhook
