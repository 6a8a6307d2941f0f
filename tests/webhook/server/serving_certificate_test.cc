// The webhook's own serving certificate (--tls-secret-name) against the stand-in kube-apiserver
// (real HTTPS, HttpKubeClient, the server's Secret and webhook-configuration rules): bootstrap,
// a second round that writes nothing, renewal on an injected clock, and two replicas racing.
#include "server/serving_certificate.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>
#include <thread>

#include "apiserver/fake_api_server.h"
#include "core/base64.h"
#include "server/webhook_server.h"
#include "tessera/kube/http_kube_client.h"
#include "test_certificates.h"

namespace tessera::webhook {
namespace {

using agent::testing::FakeApiServer;
using nlohmann::json;
using std::chrono::system_clock;

constexpr char kNamespace[] = "tessera-system";
constexpr char kService[] = "tessera-webhook";
constexpr char kSecret[] = "tessera-webhook-tls";
constexpr char kMutating[] = "mutatingwebhookconfigurations";
constexpr char kValidating[] = "validatingwebhookconfigurations";

std::string decoded(const std::string& base64) {
  std::string out(base64.size(), '\0');
  const int length = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                     reinterpret_cast<const unsigned char*>(base64.data()),
                                     static_cast<int>(base64.size()));
  size_t padding = 0;
  for (size_t i = base64.size(); i > 0 && base64[i - 1] == '=' && padding < 2; --i) ++padding;
  out.resize(static_cast<size_t>(length) - padding);
  return out;
}

// A webhook calling `service`, as the chart renders it (no caBundle).
json webhook(const std::string& name, const std::string& service, const std::string& path) {
  return {{"name", name},
          {"admissionReviewVersions", {"v1"}},
          {"sideEffects", "None"},
          {"failurePolicy", "Fail"},
          {"clientConfig",
           {{"service",
             {{"name", service}, {"namespace", kNamespace}, {"path", path}, {"port", 443}}}}}};
}

class ServingCertificateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The chart's two configurations; the mutating one also holds a webhook of another service
    // (its caBundle is not ours to set).
    api_.add_webhook_configuration(
        kMutating, {{"apiVersion", "admissionregistration.k8s.io/v1"},
                    {"kind", "MutatingWebhookConfiguration"},
                    {"metadata", {{"name", kService}}},
                    {"webhooks",
                     {webhook("pods.vgpu.tessera.dev", kService, "/mutate"),
                      webhook("other.example.com", "other", "/mutate"),
                      webhook("hami-pods.vgpu.tessera.dev", kService, "/mutate/hami")}}});
    api_.add_webhook_configuration(
        kValidating, {{"apiVersion", "admissionregistration.k8s.io/v1"},
                      {"kind", "ValidatingWebhookConfiguration"},
                      {"metadata", {{"name", kService}}},
                      {"webhooks", {webhook("claims.vgpu.tessera.dev", kService, "/validate")}}});
    settings_.secret_namespace = kNamespace;
    settings_.secret_name = kSecret;
    settings_.service_name = kService;
    settings_.mutating_configuration = kService;
    settings_.validating_configuration = kService;
    settings_.validity = std::chrono::hours(24 * 90);
  }

  // One replica: its own API client, reloader and clock.
  struct Replica {
    Replica(FakeApiServer& api, const ServingCertificateSettings& settings,
            std::atomic<system_clock::time_point>& now)
        : client(api.connection()),
          reloader("", "", std::chrono::milliseconds(0),
                   [] { return std::chrono::steady_clock::now(); }),
          certificate(client, settings, reloader, [&now] { return now.load(); }) {}
    std::string serial() const { return reloader.current() ? reloader.current()->serial_hex : ""; }
    kube::HttpKubeClient client;
    CertificateReloader reloader;
    ServingCertificate certificate;
  };

  CertificatePems stored_pems() {
    const json secret = api_.secret(kNamespace, kSecret);
    return {decoded(secret["data"]["ca.crt"]), decoded(secret["data"]["tls.crt"]),
            decoded(secret["data"]["tls.key"])};
  }
  std::string ca_bundle(const char* resource, size_t index) {
    return api_.webhook_configuration(resource, kService)["webhooks"][index]["clientConfig"].value(
        "caBundle", "");
  }
  static std::string serial_of(const std::string& cert_pem, const std::string& key_pem) {
    auto pair = parse_certified_key(cert_pem, key_pem, "test");
    return pair.is_ok() ? (*pair)->serial_hex : "unparsable: " + pair.status().message();
  }
  static size_t certificates_in(const std::string& pem) {
    size_t count = 0;
    for (size_t at = pem.find("BEGIN CERTIFICATE"); at != std::string::npos;
         at = pem.find("BEGIN CERTIFICATE", at + 1))
      ++count;
    return count;
  }
  size_t writes(const std::string& method) {
    size_t count = 0;
    for (const auto& write : api_.take_writes()) count += write.method == method ? 1 : 0;
    return count;
  }

  FakeApiServer api_;
  ServingCertificateSettings settings_;
  std::atomic<system_clock::time_point> now_{system_clock::now()};
};

TEST_F(ServingCertificateTest, BootstrapCreatesTheSecretSetsTheCaBundlesAndServesIt) {
  Replica replica(api_, settings_, now_);
  ASSERT_TRUE(replica.certificate.reconcile().is_ok());

  const json secret = api_.secret(kNamespace, kSecret);
  ASSERT_TRUE(secret.is_object());
  EXPECT_EQ(secret["type"], "kubernetes.io/tls");
  EXPECT_FALSE(secret["metadata"].value("uid", "").empty());  // server-set
  EXPECT_FALSE(secret["metadata"].contains("generation"));    // a Secret has none
  const CertificatePems pems = stored_pems();
  EXPECT_EQ(unusable_reason(pems, service_dns_names(kService, kNamespace), now_.load()), "");
  EXPECT_EQ(replica.serial(), serial_of(pems.cert, pems.key));
  EXPECT_EQ(replica.certificate.served_version(), secret["metadata"]["resourceVersion"]);

  const std::string bundle = base64_encode(pems.ca);
  EXPECT_EQ(ca_bundle(kMutating, 0), bundle);
  EXPECT_EQ(ca_bundle(kMutating, 1), "");  // another service's webhook is left alone
  EXPECT_EQ(ca_bundle(kMutating, 2), bundle);
  EXPECT_EQ(ca_bundle(kValidating, 0), bundle);
  EXPECT_EQ(api_.webhook_configuration(kMutating, kService)["metadata"]["generation"], 2);
  const auto counts = replica.certificate.counts();
  EXPECT_EQ(counts.created, 1u);
  EXPECT_EQ(counts.patched, 2u);

  // A second round finds everything in place: no write at all.
  api_.take_writes();
  ASSERT_TRUE(replica.certificate.reconcile().is_ok());
  EXPECT_TRUE(api_.take_writes().empty());
  EXPECT_EQ(replica.reloader.reloads(), 0u);
}

TEST_F(ServingCertificateTest, TheServerPresentsItAndItVerifiesForTheServiceName) {
  WebhookOptions options;
  options.listen = "127.0.0.1:0";
  options.tls_secret_name = kSecret;
  options.shutdown_delay = std::chrono::milliseconds(0);
  kube::HttpKubeClient client(api_.connection());
  WebhookServer server(options, client, [] { return std::chrono::steady_clock::now(); });
  // No pair yet: the server does not start.
  EXPECT_FALSE(server.start().is_ok());
  ServingCertificate certificate(client, settings_, server.certificates(),
                                 [this] { return now_.load(); });
  ASSERT_TRUE(certificate.reconcile().is_ok());
  ASSERT_TRUE(server.start().is_ok());
  std::thread serving([&] { server.serve(); });
  const std::string ca = decoded(ca_bundle(kValidating, 0));
  const CertificatePems pems = stored_pems();
  // kube-apiserver calls https://<service>.<namespace>.svc with the configuration's caBundle.
  EXPECT_EQ(testing::handshake_serial(server.port(), ca, 0, "tessera-webhook.tessera-system.svc"),
            serial_of(pems.cert, pems.key));
  EXPECT_EQ(testing::handshake_serial(server.port(), ca, 0, "another.tessera-system.svc"),
            std::nullopt);
  server.stop();
  serving.join();
}

TEST_F(ServingCertificateTest, RenewsWithAThirdLeftAndServesTheNewPairWithoutRestart) {
  WebhookOptions options;
  options.listen = "127.0.0.1:0";
  options.tls_secret_name = kSecret;
  options.shutdown_delay = std::chrono::milliseconds(0);
  kube::HttpKubeClient client(api_.connection());
  WebhookServer server(options, client, [] { return std::chrono::steady_clock::now(); });
  ServingCertificate certificate(client, settings_, server.certificates(),
                                 [this] { return now_.load(); });
  ASSERT_TRUE(certificate.reconcile().is_ok());
  ASSERT_TRUE(server.start().is_ok());
  std::thread serving([&] { server.serve(); });
  const CertificatePems first = stored_pems();
  const std::string first_version = certificate.served_version();
  const std::string host = "tessera-webhook.tessera-system.svc";

  // 59 of 90 days: more than a third left, nothing changes.
  now_ = now_.load() + std::chrono::hours(24 * 59);
  api_.take_writes();
  ASSERT_TRUE(certificate.reconcile().is_ok());
  EXPECT_EQ(writes("PUT"), 0u);

  // 61 of 90 days: renewed by an update with the resourceVersion read.
  now_ = now_.load() + std::chrono::hours(24 * 2);
  ASSERT_TRUE(certificate.reconcile().is_ok());
  const auto recorded = api_.take_writes();
  ASSERT_EQ(recorded.size(), 3u);  // the Secret, then the two configurations
  EXPECT_EQ(recorded[0].method, "PUT");
  EXPECT_EQ(recorded[0].body["metadata"]["resourceVersion"], first_version);
  EXPECT_EQ(certificate.counts().renewed, 1u);
  const CertificatePems second = stored_pems();
  EXPECT_NE(serial_of(second.cert, second.key), serial_of(first.cert, first.key));
  // ca.crt: the new CA and the previous one, still valid, so both pairs verify against it.
  EXPECT_EQ(certificates_in(second.ca), 2u);
  EXPECT_EQ(ca_bundle(kMutating, 0), base64_encode(second.ca));
  EXPECT_NE(unusable_reason(first, service_dns_names(kService, kNamespace), now_.load())
                .find("renewed from"),
            std::string::npos);
  // The running server presents the new pair from its next handshake (no restart).
  const time_t at = system_clock::to_time_t(now_.load());
  EXPECT_EQ(testing::handshake_serial(server.port(), second.ca, 0, host, at),
            serial_of(second.cert, second.key));
  EXPECT_EQ(server.certificates().reloads(), 1u);

  // Past the first CA's end, the next renewal leaves it out of ca.crt.
  now_ = now_.load() + std::chrono::hours(24 * 60);
  ASSERT_TRUE(certificate.reconcile().is_ok());
  const CertificatePems third = stored_pems();
  EXPECT_EQ(certificates_in(third.ca), 2u);  // the third CA and the second
  EXPECT_EQ(third.ca.find(first.ca), std::string::npos);
  EXPECT_EQ(testing::handshake_serial(server.port(), third.ca, 0, host,
                                      system_clock::to_time_t(now_.load())),
            serial_of(third.cert, third.key));
  server.stop();
  serving.join();
}

TEST_F(ServingCertificateTest, ReplacesASecretThatDoesNotNameTheService) {
  // A pair made for another Service (the release renamed): the update keeps the Secret's type.
  Result<CertificatePems> other = generate_serving_certificate(
      service_dns_names("old-name", kNamespace), std::chrono::hours(24 * 90), now_.load());
  ASSERT_TRUE(other.is_ok());
  api_.put_secret(kNamespace, {{"apiVersion", "v1"},
                               {"kind", "Secret"},
                               {"type", "kubernetes.io/tls"},
                               {"metadata", {{"name", kSecret}, {"namespace", kNamespace}}},
                               {"data",
                                {{"ca.crt", base64_encode(other->ca)},
                                 {"tls.crt", base64_encode(other->cert)},
                                 {"tls.key", base64_encode(other->key)}}}});
  EXPECT_NE(unusable_reason(*other, service_dns_names(kService, kNamespace), now_.load()), "");
  Replica replica(api_, settings_, now_);
  ASSERT_TRUE(replica.certificate.reconcile().is_ok());
  EXPECT_EQ(replica.certificate.counts().renewed, 1u);
  const CertificatePems pems = stored_pems();
  EXPECT_EQ(unusable_reason(pems, service_dns_names(kService, kNamespace), now_.load()), "");
  EXPECT_EQ(replica.serial(), serial_of(pems.cert, pems.key));
}

TEST_F(ServingCertificateTest, TwoReplicasCreatingAtOnceEndWithOneSecretBothServe) {
  Replica first(api_, settings_, now_);
  Replica second(api_, settings_, now_);
  api_.hold_secret_reads(2);  // both read "not found" before either writes
  Status first_result = Status::ok(), second_result = Status::ok();
  std::thread a([&] { first_result = first.certificate.reconcile(); });
  std::thread b([&] { second_result = second.certificate.reconcile(); });
  a.join();
  b.join();
  ASSERT_TRUE(first_result.is_ok()) << first_result.message();
  ASSERT_TRUE(second_result.is_ok()) << second_result.message();
  EXPECT_EQ(writes("POST"), 2u);  // both tried; the server took one
  const auto one = first.certificate.counts();
  const auto two = second.certificate.counts();
  EXPECT_EQ(one.created + two.created, 1u);
  EXPECT_EQ(one.adopted + two.adopted, 1u);
  const CertificatePems pems = stored_pems();
  EXPECT_EQ(first.serial(), serial_of(pems.cert, pems.key));
  EXPECT_EQ(second.serial(), first.serial());
  EXPECT_EQ(ca_bundle(kValidating, 0), base64_encode(pems.ca));
}

TEST_F(ServingCertificateTest, TwoReplicasRenewingAtOnceEndWithOneSecretBothServe) {
  Replica first(api_, settings_, now_);
  Replica second(api_, settings_, now_);
  ASSERT_TRUE(first.certificate.reconcile().is_ok());
  ASSERT_TRUE(second.certificate.reconcile().is_ok());
  const std::string before = first.serial();
  now_ = now_.load() + std::chrono::hours(24 * 70);
  api_.take_writes();
  api_.hold_secret_reads(2);  // both read the same resourceVersion, both update with it
  Status first_result = Status::ok(), second_result = Status::ok();
  std::thread a([&] { first_result = first.certificate.reconcile(); });
  std::thread b([&] { second_result = second.certificate.reconcile(); });
  a.join();
  b.join();
  ASSERT_TRUE(first_result.is_ok()) << first_result.message();
  ASSERT_TRUE(second_result.is_ok()) << second_result.message();
  EXPECT_EQ(writes("PUT"), 2u);  // one 409 Conflict
  EXPECT_EQ(first.certificate.counts().renewed + second.certificate.counts().renewed, 1u);
  EXPECT_EQ(first.certificate.counts().adopted + second.certificate.counts().adopted, 1u);
  const CertificatePems pems = stored_pems();
  EXPECT_NE(first.serial(), before);
  EXPECT_EQ(first.serial(), serial_of(pems.cert, pems.key));
  EXPECT_EQ(second.serial(), first.serial());
  EXPECT_EQ(ca_bundle(kMutating, 2), base64_encode(pems.ca));
}

TEST_F(ServingCertificateTest, AMissingConfigurationIsAnErrorButThePairIsServed) {
  settings_.validating_configuration = "not-there";
  Replica replica(api_, settings_, now_);
  const Status result = replica.certificate.reconcile();
  EXPECT_FALSE(result.is_ok());
  EXPECT_NE(result.message().find("not-there"), std::string::npos) << result.message();
  EXPECT_NE(replica.serial(), "");
  EXPECT_EQ(ca_bundle(kMutating, 0), base64_encode(stored_pems().ca));
}

// A replica that read the Secret just before another renewed it writes the bundle it knows,
// merged with what is there: the other replica's new CA is never taken away, and a CA leaves the
// bundle only once it expired.
TEST(MergedCaBundle, AddsNeverRemovesAValidCaAndDropsExpiredOnes) {
  const auto now = system_clock::now();
  const auto names = service_dns_names(kService, kNamespace);
  Result<CertificatePems> first = generate_serving_certificate(names, std::chrono::hours(24), now);
  Result<CertificatePems> second =
      generate_serving_certificate(names, std::chrono::hours(24 * 30), now, first->ca);
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  ASSERT_NE(second->ca.find(first->ca), std::string::npos);  // the renewal keeps the first CA
  const std::string second_ca_only = second->ca.substr(0, second->ca.find(first->ca));

  // The stale replica knows only the first CA; the configuration already has both.
  const std::string stale = merged_ca_bundle(first->ca, second->ca, now);
  EXPECT_NE(stale.find(second_ca_only), std::string::npos);
  EXPECT_NE(stale.find(first->ca), std::string::npos);
  // Nothing new: the same bundle, so no patch.
  EXPECT_EQ(merged_ca_bundle(second->ca, second->ca, now), second->ca);
  // Two days on the first CA has expired: it leaves, even though the configuration had it.
  EXPECT_EQ(merged_ca_bundle(second_ca_only, second->ca, now + std::chrono::hours(48)),
            second_ca_only);
}

// The real binary in the chart's selfManaged wiring, against the stand-in API server: it makes
// the Secret before it listens, sets the caBundle, presents the Secret's certificate for the
// Service's name, and exits 0 on SIGTERM.
TEST_F(ServingCertificateTest, TheBinaryBootstrapsItsOwnCertificate) {
  std::string pattern = std::filesystem::temp_directory_path() / "webhook-certs-XXXXXX";
  const std::string dir = mkdtemp(pattern.data());
  testing::write_file(dir + "/ca.crt", api_.ca_pem());
  testing::write_file(dir + "/kubeconfig",
                      "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                      "clusters:\n- name: t\n  cluster:\n    server: " +
                          api_.url() +
                          "\n    certificate-authority: ca.crt\n"
                          "contexts:\n- name: t\n  context: {cluster: t, "
                          "user: t}\nusers:\n- name: t\n  user: {token: " +
                          api_.token() + "}\n");
  // A port nothing listens on: bound to port 0, read, closed, then given to the binary.
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
  close(probe);
  const int port = ntohs(address.sin_port);
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  const std::string kubeconfig = dir + "/kubeconfig";
  std::vector<const char*> argv = {TESSERA_WEBHOOK_BIN,
                                   "--listen",
                                   listen.c_str(),
                                   "--kubeconfig",
                                   kubeconfig.c_str(),
                                   "--tls-secret-name",
                                   kSecret,
                                   "--tls-secret-namespace",
                                   kNamespace,
                                   "--service-name",
                                   kService,
                                   "--mutating-webhook-configuration",
                                   kService,
                                   "--validating-webhook-configuration",
                                   kService,
                                   "--shutdown-delay-ms",
                                   "0",
                                   nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, const_cast<char**>(argv.data()), environ),
            0);
  // Until it listens (a bound on the wait, not a verdict on its speed).
  std::optional<std::string> presented;
  for (int i = 0; i < 1200 && !presented; ++i) {
    const std::string bundle = ca_bundle(kValidating, 0);
    if (!bundle.empty())
      presented =
          testing::handshake_serial(port, decoded(bundle), 0, "tessera-webhook.tessera-system.svc");
    if (!presented) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(presented);
  const CertificatePems pems = stored_pems();
  EXPECT_EQ(*presented, serial_of(pems.cert, pems.key));
  EXPECT_EQ(ca_bundle(kMutating, 0), base64_encode(pems.ca));
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::webhook
