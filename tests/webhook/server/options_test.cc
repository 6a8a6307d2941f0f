// Flags, environment variables and the YAML file, and which wins.
#include "server/options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace tessera::webhook {
namespace {

ParsedOptions parse(std::vector<const char*> args) {
  args.insert(args.begin(), "tessera-webhook");
  return parse_options(static_cast<int>(args.size()), args.data());
}

std::string write_config(const std::string& text) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("webhook-options-" + std::to_string(getpid()) + ".yaml");
  std::ofstream(path) << text;
  return path;
}

TEST(Options, DefaultsAndRequiredCertificate) {
  ParsedOptions missing = parse({});
  ASSERT_TRUE(missing.exit_code);
  EXPECT_EQ(*missing.exit_code, 2);
  EXPECT_NE(missing.message.find("--tls-cert-file and --tls-private-key-file are required"),
            std::string::npos);

  ParsedOptions parsed = parse({"--tls-cert-file", "c", "--tls-private-key-file", "k"});
  ASSERT_FALSE(parsed.exit_code) << parsed.message;
  const WebhookOptions& o = parsed.options;
  EXPECT_EQ(o.listen, ":8443");
  EXPECT_EQ(o.kubeconfig, "");
  EXPECT_EQ(o.policy.environment, PolicyAction::kDeny);
  EXPECT_EQ(o.policy.mounts, PolicyAction::kDeny);
  EXPECT_EQ(o.policy.privileged, PolicyAction::kWarn);
  EXPECT_EQ(o.device_classes, std::set<std::string>{"vgpu.tessera.dev"});
  EXPECT_EQ(o.cache_ttl, std::chrono::seconds(60));
}

TEST(Options, ASelfManagedCertificateInsteadOfFiles) {
  ParsedOptions parsed =
      parse({"--tls-secret-name", "tessera-webhook-tls", "--tls-secret-namespace", "tessera-system",
             "--service-name", "tessera-webhook", "--mutating-webhook-configuration",
             "tessera-webhook", "--validating-webhook-configuration", "tessera-webhook"});
  ASSERT_FALSE(parsed.exit_code) << parsed.message;
  EXPECT_EQ(parsed.options.tls_secret_name, "tessera-webhook-tls");
  EXPECT_EQ(parsed.options.tls_secret_namespace, "tessera-system");
  EXPECT_EQ(parsed.options.service_name, "tessera-webhook");
  EXPECT_EQ(parsed.options.mutating_webhook_configuration, "tessera-webhook");
  EXPECT_EQ(parsed.options.validating_webhook_configuration, "tessera-webhook");
  EXPECT_EQ(parsed.options.certificate_validity_days, 365);
  EXPECT_EQ(parsed.options.tls_secret_check_interval, std::chrono::seconds(60));

  // The file's keys, camelCase.
  const std::string path = write_config(
      "tlsSecretName: from-file\ntlsSecretNamespace: ns\nserviceName: svc\n"
      "certificateValidityDays: 90\ntlsSecretCheckIntervalSeconds: 30\n");
  ParsedOptions from_file = parse({"--config", path.c_str()});
  std::filesystem::remove(path);
  ASSERT_FALSE(from_file.exit_code) << from_file.message;
  EXPECT_EQ(from_file.options.tls_secret_name, "from-file");
  EXPECT_EQ(from_file.options.certificate_validity_days, 90);
  EXPECT_EQ(from_file.options.tls_secret_check_interval, std::chrono::seconds(30));

  ParsedOptions both = parse({"--tls-secret-name", "s", "--tls-secret-namespace", "n",
                              "--service-name", "v", "--tls-cert-file", "c"});
  ASSERT_TRUE(both.exit_code);
  EXPECT_NE(both.message.find("the certificate comes from one or the other"), std::string::npos)
      << both.message;
  ParsedOptions no_service = parse({"--tls-secret-name", "s", "--tls-secret-namespace", "n"});
  ASSERT_TRUE(no_service.exit_code);
  EXPECT_NE(no_service.message.find("needs --tls-secret-namespace and --service-name"),
            std::string::npos)
      << no_service.message;
  ParsedOptions too_long = parse({"--tls-secret-name", "s", "--tls-secret-namespace", "n",
                                  "--service-name", "v", "--certificate-validity-days", "4000"});
  ASSERT_TRUE(too_long.exit_code);
  EXPECT_NE(too_long.message.find("--certificate-validity-days"), std::string::npos)
      << too_long.message;
}

TEST(Options, HelpExitsZero) {
  ParsedOptions help = parse({"--help"});
  ASSERT_TRUE(help.exit_code);
  EXPECT_EQ(*help.exit_code, 0);
  EXPECT_NE(help.message.find("--tls-private-key-file"), std::string::npos);
  EXPECT_NE(help.message.find("TESSERA_WEBHOOK_LISTEN"), std::string::npos);
}

TEST(Options, AFlagBeatsItsEnvironmentVariableWhichBeatsTheFile) {
  const std::string config = write_config(R"(listen: "127.0.0.1:9443"
tlsCertFile: /etc/tls/tls.crt
tlsPrivateKeyFile: /etc/tls/tls.key
kubeconfig: /etc/kube/config
policy:
  environment: warn
  privileged: deny
deviceClasses: [vgpu.tessera.dev, vgpu-a100.tessera.dev]
cacheTTLSeconds: 5
shutdownDelayMs: 0
)");
  ParsedOptions from_file = parse({"--config", config.c_str()});
  ASSERT_FALSE(from_file.exit_code) << from_file.message;
  EXPECT_EQ(from_file.options.listen, "127.0.0.1:9443");
  EXPECT_EQ(from_file.options.tls_cert_file, "/etc/tls/tls.crt");
  EXPECT_EQ(from_file.options.kubeconfig, "/etc/kube/config");
  EXPECT_EQ(from_file.options.policy.environment, PolicyAction::kWarn);
  EXPECT_EQ(from_file.options.policy.mounts, PolicyAction::kDeny);
  EXPECT_EQ(from_file.options.policy.privileged, PolicyAction::kDeny);
  EXPECT_EQ(from_file.options.device_classes.size(), 2u);
  EXPECT_EQ(from_file.options.cache_ttl, std::chrono::seconds(5));
  EXPECT_EQ(from_file.options.shutdown_delay, std::chrono::milliseconds(0));

  setenv("TESSERA_WEBHOOK_LISTEN", ":10443", 1);
  setenv("TESSERA_WEBHOOK_POLICY_ENVIRONMENT", "deny", 1);
  ParsedOptions from_env = parse({"--config", config.c_str()});
  EXPECT_EQ(from_env.options.listen, ":10443");
  EXPECT_EQ(from_env.options.policy.environment, PolicyAction::kDeny);
  ParsedOptions from_flag = parse({"--config", config.c_str(), "--listen", "127.0.0.1:11443"});
  EXPECT_EQ(from_flag.options.listen, "127.0.0.1:11443");
  unsetenv("TESSERA_WEBHOOK_LISTEN");
  unsetenv("TESSERA_WEBHOOK_POLICY_ENVIRONMENT");
  std::filesystem::remove(config);
}

TEST(Options, BadValuesAreRefusedNamingThem) {
  const char* cert[] = {"--tls-cert-file", "c", "--tls-private-key-file", "k"};
  auto with_cert = [&](std::vector<const char*> more) {
    more.insert(more.begin(), std::begin(cert), std::end(cert));
    return parse(more);
  };
  ParsedOptions policy = with_cert({"--policy-mounts", "allow"});
  ASSERT_TRUE(policy.exit_code);
  EXPECT_EQ(policy.message, "--policy-mounts: invalid policy action \"allow\" (deny or warn)");
  ParsedOptions listen = with_cert({"--listen", "8443"});
  ASSERT_TRUE(listen.exit_code);
  EXPECT_EQ(listen.message, "--listen 8443: no :port");
  EXPECT_TRUE(with_cert({"--threads", "0"}).exit_code);
  EXPECT_TRUE(with_cert({"--bogus"}).exit_code);

  const std::string config = write_config("listen: :8443\npolicy: {mount: warn}\n");
  ParsedOptions unknown = with_cert({"--config", config.c_str()});
  ASSERT_TRUE(unknown.exit_code);
  EXPECT_NE(unknown.message.find("policy.mount: unknown"), std::string::npos);
  std::filesystem::remove(config);
  ParsedOptions missing = with_cert({"--config", "/nonexistent/webhook.yaml"});
  ASSERT_TRUE(missing.exit_code);
  EXPECT_NE(missing.message.find("/nonexistent/webhook.yaml"), std::string::npos);
}

TEST(Options, AFileValueOfAnotherTypeIsRefusedNamingTheKeyAndTheValue) {
  const char* cert[] = {"--tls-cert-file", "c", "--tls-private-key-file", "k"};
  const std::pair<const char*, const char*> cases[] = {
      {"threads: many\n", "threads: expected an integer, got many"},
      {"listen: [a, b]\n", "listen: expected a string, got [a, b]"},
      {"deviceClasses: vgpu.tessera.dev\n",
       "deviceClasses: expected a list of strings, got vgpu.tessera.dev"},
      {"deviceClasses: [{a: b}]\n", "deviceClasses: expected a list of strings, got [{a: b}]"},
      {"cacheTTLSeconds: 1.5\n", "cacheTTLSeconds: expected an integer, got 1.5"},
      {"shutdownDelayMs: {ms: 5}\n", "shutdownDelayMs: expected an integer, got {ms: 5}"},
      {"certificateCheckIntervalMs: soon\n",
       "certificateCheckIntervalMs: expected an integer, got soon"},
      {"policy: {mounts: [deny]}\n", "policy.mounts: expected a string, got [deny]"},
  };
  for (const auto& [text, error] : cases) {
    const std::string config = write_config(text);
    std::vector<const char*> args(std::begin(cert), std::end(cert));
    args.push_back("--config");
    args.push_back(config.c_str());
    const ParsedOptions parsed = parse(args);
    EXPECT_TRUE(parsed.exit_code) << text;
    EXPECT_EQ(parsed.message, "--config " + config + ": " + error) << text;
    std::filesystem::remove(config);
  }
}

TEST(Options, TheExtendedResourceNameIsOneKubeApiserverAccepts) {
  auto with_name = [](const char* name) {
    return parse(
        {"--tls-cert-file", "c", "--tls-private-key-file", "k", "--extended-resource-name", name});
  };
  ParsedOptions good = with_name("vgpu.tessera.dev/gpu");
  ASSERT_FALSE(good.exit_code) << good.message;
  EXPECT_EQ(good.options.extended_resource_name, "vgpu.tessera.dev/gpu");
  EXPECT_EQ(
      parse({"--tls-cert-file", "c", "--tls-private-key-file", "k"}).options.extended_resource_name,
      "");
  const std::vector<std::pair<const char*, const char*>> refused = {
      {"gpu", "\"gpu\" is not <domain>/<name>"},
      {"a/b/c", "\"a/b/c\" is not <domain>/<name>"},
      {"Tessera.dev/gpu", "the domain Tessera.dev is not a DNS subdomain"},
      {"kubernetes.io/gpu", "names under kubernetes.io are Kubernetes' own"},
      {"nodes.kubernetes.io/gpu", "names under kubernetes.io are Kubernetes' own"},
      {"vgpu.tessera.dev/-gpu", "the name -gpu must be 1 to 63"},
      {"vgpu.tessera.dev/", "the name  must be 1 to 63"},
  };
  for (const auto& [name, message] : refused) {
    const ParsedOptions parsed = with_name(name);
    ASSERT_TRUE(parsed.exit_code) << name;
    EXPECT_EQ(*parsed.exit_code, 2);
    EXPECT_NE(parsed.message.find("--extended-resource-name"), std::string::npos) << parsed.message;
    EXPECT_NE(parsed.message.find(message), std::string::npos) << parsed.message;
  }
}

}  // namespace
}  // namespace tessera::webhook
